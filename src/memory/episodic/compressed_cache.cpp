#include "memory/episodic/compressed_cache.h"

#include <algorithm>

#include "core/base64.h"

namespace kvmem::memory {

int64_t CompressedCache::layer_rows(int l) const {
  int64_t n = 0;
  for (int g = 0; g < n_kv_heads; ++g) n = std::max<int64_t>(n, of(l, g).size());
  return n;
}

int64_t CompressedCache::total_rows() const {
  int64_t n = 0;
  for (const std::vector<int64_t>& p : pos) n += static_cast<int64_t>(p.size());
  return n;
}

std::vector<int64_t> BlockFirstRows(const kv::KvSequence& seq) {
  std::vector<int64_t> first(static_cast<size_t>(seq.pool()->max_blocks()), -1);
  const int br = seq.pool()->geometry().block_rows;
  for (size_t i = 0; i < seq.blocks().size(); ++i) {
    first[seq.blocks()[i]] = static_cast<int64_t>(i) * br;
  }
  return first;
}

Result<CompressedCache> AllocateRegion(kv::KvSequence* seq, int64_t capacity,
                                       std::span<const int64_t> layer_rows) {
  const kv::KvGeometry& g = seq->pool()->geometry();
  const int64_t br = g.block_rows;
  if (!layer_rows.empty()) {
    if (seq->n_rows() % br != 0) {
      return InvalidArgument("a region with layer budgets must start at a block boundary");
    }
    capacity = (capacity + br - 1) / br * br;
  }
  CompressedCache c;
  c.n_layers = g.n_layers;
  c.n_kv_heads = g.n_kv_heads;
  c.first_row = seq->n_rows();
  c.capacity = capacity;
  c.pos.assign(static_cast<size_t>(g.n_layers) * g.n_kv_heads, {});
  const std::vector<float> k(static_cast<size_t>(g.n_kv_heads) * g.head_dim_k, 0.0f);
  const std::vector<float> v(static_cast<size_t>(g.n_kv_heads) * g.head_dim_v, 0.0f);
  // A block at a time: its layers past their rows are given back before the next block is
  // taken, so the region never holds more than it keeps plus one block.
  for (int64_t at = 0; at < capacity;) {
    const int64_t n = std::min(capacity - at, br - (c.first_row + at) % br);
    KVMEM_ASSIGN_OR_RETURN(std::vector<kv::RowRef> rows,
                           seq->AppendRows(static_cast<int>(n), at));
    const size_t block_index = static_cast<size_t>((c.first_row + at) / br);
    for (int l = 0; l < g.n_layers; ++l) {
      if (!layer_rows.empty() && at >= layer_rows[l]) {
        seq->ReleaseStorage(block_index, l);
        continue;
      }
      for (const kv::RowRef r : rows) seq->pool()->WriteToken(r, l, k.data(), v.data());
    }
    // A slot's keys sit at a position per (layer, KV head) (c.pos); the row's own records its
    // place in the region, which is what the store keeps of it.
    for (int64_t j = 0; j < n; ++j) seq->pool()->set_rotated_pos(rows[j], at + j);
    at += n;
  }
  return c;
}

void SetView(const CompressedCache& c, kv::KvSequence* seq, int64_t tail_first) {
  kv::KvView& view = seq->view();
  view.Clear();
  const kv::KvPool& pool = *seq->pool();
  for (int l = 0; l < c.n_layers; ++l) {
    for (int g = 0; g < c.n_kv_heads; ++g) {
      view.mutable_head(l, g);  // an own (empty) list even when nothing is kept
      const std::vector<int64_t>& pos = c.of(l, g);
      for (size_t j = 0; j < pos.size(); ++j) {
        view.AppendToHead(l, g, RowAt(*seq, c.first_row + static_cast<int64_t>(j)), 1, pos[j]);
      }
      for (int64_t i = tail_first; i < seq->n_rows(); ++i) {
        const kv::RowRef r = RowAt(*seq, i);
        view.AppendToHead(l, g, r, 1, pool.rotated_pos(r));
      }
    }
  }
}

namespace {

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool GetVarint(std::string_view s, size_t* at, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 63 && *at < s.size(); shift += 7) {
    const auto b = static_cast<uint8_t>(s[(*at)++]);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

}  // namespace

std::string EncodePositions(const CompressedCache& c) {
  std::string bytes;
  for (const std::vector<int64_t>& p : c.pos) {
    PutVarint(p.size(), &bytes);
    int64_t prev = -1;
    for (int64_t x : p) {
      PutVarint(static_cast<uint64_t>(x - prev - 1), &bytes);
      prev = x;
    }
  }
  return Base64Encode(bytes);
}

Status DecodePositions(std::string_view text, CompressedCache* c) {
  KVMEM_ASSIGN_OR_RETURN(std::string bytes, Base64Decode(text, "epicache state: positions"));
  const auto bad = [](const std::string& why) {
    return Corrupt("epicache state: positions " + why);
  };
  std::vector<std::vector<int64_t>> pos(static_cast<size_t>(c->n_layers) * c->n_kv_heads);
  size_t at = 0;
  for (std::vector<int64_t>& p : pos) {
    uint64_t n = 0;
    if (!GetVarint(bytes, &at, &n)) return bad("are truncated");
    if (n > static_cast<uint64_t>(c->capacity)) return bad("exceed the region's capacity");
    int64_t prev = -1;
    for (uint64_t j = 0; j < n; ++j) {
      uint64_t gap = 0;
      if (!GetVarint(bytes, &at, &gap)) return bad("are truncated");
      const int64_t room = c->next_pos - prev - 2;  // the largest gap staying below next_pos
      if (room < 0 || gap > static_cast<uint64_t>(room)) {
        return bad("reach beyond the history (" + std::to_string(c->next_pos) + " tokens)");
      }
      prev += static_cast<int64_t>(gap) + 1;
      p.push_back(prev);
    }
  }
  if (at != bytes.size()) return bad("have trailing bytes");
  c->pos = std::move(pos);
  return Status::Ok();
}

}  // namespace kvmem::memory
