#include "memory/policy/memory_policy.h"

namespace kvmem::memory {

std::string_view PolicyEnv::Piece(int32_t id) const {
  // A BOS the tokenizer adds is not spelled in the rendered text.
  if (id == tok->bos_id() && tok->add_bos()) return {};
  return tok->TokenToPiece(id, /*render_special=*/true);
}

}  // namespace kvmem::memory
