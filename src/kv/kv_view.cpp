#include "kv/kv_view.h"

#include <algorithm>
#include <cassert>

namespace kvmem::kv {

KvView::KvView(int n_layers, int n_kv_heads)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      layer_(n_layers),
      head_(static_cast<size_t>(n_layers) * n_kv_heads) {}

KvView KvView::Clone() const {
  KvView out(n_layers_, n_kv_heads_);
  out.shared_ = shared_;
  for (size_t i = 0; i < layer_.size(); ++i) {
    if (layer_[i]) out.layer_[i] = std::make_unique<List>(*layer_[i]);
  }
  for (size_t i = 0; i < head_.size(); ++i) {
    if (head_[i]) out.head_[i] = std::make_unique<List>(*head_[i]);
  }
  return out;
}

const std::vector<ViewRun>& KvView::list(int l, int g) const {
  if (const auto& h = head_slot(l, g)) return *h;
  return layer_[l] ? *layer_[l] : shared_;
}

std::vector<ViewRun>& KvView::mutable_layer(int l) {
  if (!layer_[l]) layer_[l] = std::make_unique<List>(shared_);
  return *layer_[l];
}

std::vector<ViewRun>& KvView::mutable_head(int l, int g) {
  auto& h = head_slot(l, g);
  if (!h) h = std::make_unique<List>(list(l, g));
  return *h;
}

void KvView::AppendTo(List& runs, RowRef first, int n, int64_t first_pos) {
  if (n <= 0) return;
  if (!runs.empty()) {
    ViewRun& last = runs.back();
    if (!last.dead() && last.block == first.block && last.first_row + last.n_rows == first.row &&
        last.first_pos + last.n_rows == first_pos) {
      last.n_rows += n;
      return;
    }
  }
  runs.push_back({first.block, first.row, n, first_pos});
}

void KvView::Append(RowRef first, int n, int64_t first_pos) {
  AppendTo(shared_, first, n, first_pos);
  for (auto& own : layer_) {
    if (own) AppendTo(*own, first, n, first_pos);
  }
  for (auto& own : head_) {
    if (own) AppendTo(*own, first, n, first_pos);
  }
}

int64_t KvView::n_rows(int l, int g) const {
  int64_t n = 0;
  for (const ViewRun& r : list(l, g)) n += r.dead() ? 0 : r.n_rows;
  return n;
}

int64_t KvView::n_slots(int l, int g) const {
  int64_t n = 0;
  for (const ViewRun& r : list(l, g)) n += r.n_rows;
  return n;
}

void KvView::TruncateList(List& runs, int64_t n) {
  int64_t seen = 0;
  size_t i = 0;
  for (; i < runs.size(); ++i) {
    if (seen + runs[i].n_rows >= n) {
      runs[i].n_rows = static_cast<int32_t>(n - seen);
      break;
    }
    seen += runs[i].n_rows;
  }
  if (i < runs.size()) runs.resize(runs[i].n_rows > 0 ? i + 1 : i);
}

void KvView::Truncate(int64_t n) {
  TruncateList(shared_, n);
  for (auto& own : layer_) {
    if (own) TruncateList(*own, n);
  }
  for (auto& own : head_) {
    if (own) TruncateList(*own, n);
  }
}

void KvView::Clear() {
  shared_.clear();
  for (auto& own : layer_) own.reset();
  for (auto& own : head_) own.reset();
}

// Splits every run that overlaps rows [first.row, first.row + n) of first.block into the parts
// outside the range, and (kill) a dead run for the part inside, keeping list order.
void KvView::EditList(List& runs, RowRef first, int n, bool kill) {
  const int32_t lo = first.row, hi = first.row + n;
  List out;
  out.reserve(runs.size() + 2);
  for (const ViewRun& r : runs) {
    const int32_t r_lo = r.first_row, r_hi = r.first_row + r.n_rows;
    if (r.dead() || r.block != first.block || r_hi <= lo || r_lo >= hi) {
      out.push_back(r);
      continue;
    }
    const int32_t cut_lo = std::max(lo, r_lo), cut_hi = std::min(hi, r_hi);
    if (cut_lo > r_lo) out.push_back({r.block, r_lo, cut_lo - r_lo, r.first_pos});
    if (kill) {
      ViewRun dead{kDeadBlock, 0, cut_hi - cut_lo, r.first_pos + (cut_lo - r_lo)};
      if (!out.empty() && out.back().dead() &&
          out.back().first_pos + out.back().n_rows == dead.first_pos) {
        out.back().n_rows += dead.n_rows;
      } else {
        out.push_back(dead);
      }
    }
    if (cut_hi < r_hi) {
      out.push_back({r.block, cut_hi, r_hi - cut_hi, r.first_pos + (cut_hi - r_lo)});
    }
  }
  runs.swap(out);
}

void KvView::ForSelected(int layer, int head, const std::function<void(List&)>& fn) {
  if (layer < 0) {
    fn(shared_);
    for (auto& own : layer_) {
      if (own) fn(*own);
    }
    for (auto& own : head_) {
      if (own) fn(*own);
    }
    return;
  }
  assert(layer < n_layers_);
  if (head < 0) {
    fn(mutable_layer(layer));
    for (int g = 0; g < n_kv_heads_; ++g) {
      if (head_slot(layer, g)) fn(*head_slot(layer, g));
    }
    return;
  }
  fn(mutable_head(layer, head));
}

void KvView::Hide(RowRef first, int n, int layer, int head) {
  ForSelected(layer, head, [&](List& l) { EditList(l, first, n, /*kill=*/false); });
}

void KvView::Kill(RowRef first, int n, int layer, int head) {
  ForSelected(layer, head, [&](List& l) { EditList(l, first, n, /*kill=*/true); });
}

}  // namespace kvmem::kv
