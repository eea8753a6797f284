// libFuzzer target for the JSON-Schema -> GBNF compiler (engine/grammar/json_schema.h): the
// input is "<schema JSON>\0<text>". A schema the compiler accepts must give a grammar the GBNF
// parser accepts; the text is matched against it (grammar_fuzz_util.h) and, when a prefix of
// it is a complete sentence, that prefix must be a JSON document (nlohmann parses it): the
// compiler never admits text a client could not parse. The same text runs against the
// json_object grammar, whose complete sentences must be JSON objects. See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "grammar_fuzz_util.h"

namespace kvmem::fuzz {
namespace {

// RFC 8259's grammar allows two things nlohmann refuses, and the schema grammar allows them
// too: a number past a double's range (1e999) and a lone UTF-16 surrogate escape ("\ud800").
bool RefusedOnlyBeyondTheRfc(const std::string& what) {
  return what.find("number overflow") != std::string::npos ||
         what.find("surrogate") != std::string::npos;
}

void CheckJsonSentences(const std::shared_ptr<const engine::grammar::Grammar>& g,
                        std::string_view text, bool object) {
  bool complete = false;
  const size_t n = WalkText(g, text, &complete);
  if (!complete) return;
  try {
    const nlohmann::json doc = nlohmann::json::parse(text.substr(0, n));
    if (object) Check(doc.is_object());
  } catch (const nlohmann::json::exception& e) {
    Check(RefusedOnlyBeyondTheRfc(e.what()));
  }
}

}  // namespace
}  // namespace kvmem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmem;
  const auto [schema, text] = fuzz::SplitAtNul(data, size);
  static const std::shared_ptr<const engine::grammar::Grammar> object =
      engine::grammar::CompileJsonObject();
  fuzz::CheckJsonSentences(object, text, true);
  Result<std::string> gbnf = engine::grammar::JsonSchemaToGbnf(schema);
  if (!gbnf.ok()) {
    fuzz::Check(!gbnf.status().message().empty());
    return 0;
  }
  Result<engine::grammar::Grammar> g = engine::grammar::Grammar::Parse(*gbnf);
  fuzz::Check(g.ok());
  fuzz::CheckJsonSentences(std::make_shared<const engine::grammar::Grammar>(std::move(*g)), text,
                           false);
  return 0;
}
