#include "kv/kv_view.h"

namespace kvmem::kv {

KvView::KvView(int n_layers) : layer_(n_layers) {}

const std::vector<ViewRun>& KvView::layer(int l) const {
  return layer_[l] ? *layer_[l] : shared_;
}

std::vector<ViewRun>& KvView::mutable_layer(int l) {
  if (!layer_[l]) layer_[l] = std::make_unique<std::vector<ViewRun>>(shared_);
  return *layer_[l];
}

void KvView::AppendTo(std::vector<ViewRun>& runs, RowRef first, int n, int64_t first_pos) {
  if (n <= 0) return;
  if (!runs.empty()) {
    ViewRun& last = runs.back();
    if (last.block == first.block && last.first_row + last.n_rows == first.row &&
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
}

int64_t KvView::n_rows(int l) const {
  int64_t n = 0;
  for (const ViewRun& r : layer(l)) n += r.n_rows;
  return n;
}

void KvView::TruncateList(std::vector<ViewRun>& runs, int64_t n) {
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
}

void KvView::Clear() {
  shared_.clear();
  for (auto& own : layer_) own.reset();
}

}  // namespace kvmem::kv
