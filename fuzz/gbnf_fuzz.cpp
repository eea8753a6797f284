// libFuzzer target for the GBNF grammar parser and the matcher (engine/grammar/): the input is
// "<grammar text>\0<text>". A grammar that parses prints (ToString) and is matched against the
// text byte by byte (grammar_fuzz_util.h: the token mask is exact at the start and where the
// walk stops; accepting the bytes one by one and all at once agree). See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/grammar/grammar.h"
#include "grammar_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmem;
  using engine::grammar::Grammar;
  const auto [gbnf, text] = fuzz::SplitAtNul(data, size);
  Result<Grammar> g = Grammar::Parse(gbnf);
  if (!g.ok()) {
    fuzz::Check(g.status().code() == ErrorCode::kInvalidArgument && !g.status().message().empty());
    return 0;
  }
  fuzz::Check(g->root() >= 0 && g->root() < g->n_rules() && !g->ToString().empty());
  bool complete = false;
  fuzz::WalkText(std::make_shared<const Grammar>(std::move(*g)), text, &complete);
  return 0;
}
