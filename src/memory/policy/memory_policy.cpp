#include "memory/policy/memory_policy.h"

namespace kvmem::memory {

std::string_view PolicyEnv::Piece(int32_t id) const {
  // A BOS the tokenizer adds is not spelled in the rendered text.
  if (id == tok->bos_id() && tok->add_bos()) return {};
  return tok->TokenToPiece(id, /*render_special=*/true);
}

Json RowRangesJson(std::span<const int64_t> rows) {
  Json flat = Json::array();
  for (size_t k = 0; k < rows.size();) {
    size_t e = k + 1;
    while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
    flat.push_back(rows[k]);
    flat.push_back(rows[e - 1] + 1);
    k = e;
  }
  return flat;
}

Json TokenBytesJson(std::span<const size_t> token_ends, int64_t begin, int64_t end) {
  const size_t from = begin == 0 ? 0 : token_ends[begin - 1];
  return Json::array({from, token_ends[end - 1]});
}

Json MemoryPolicy::Inspect() const {
  Json cached = Json::array();
  if (!text().empty()) cached = Json::array({0, text().size()});
  return Json{{"cached", std::move(cached)}, {"parts", Json::array()}};
}

Result<Json> MemoryPolicy::Segments(const SegmentRequest&) {
  return Unsupported("this memory policy has no segments");
}

}  // namespace kvmem::memory
