// Tools in GPT-OSS's harmony format (tokenizer/harmony.h renders the prompt), for a model whose
// chat template is harmony's (ModelInfo::tool_format):
// - The functions are declared as the template declares them, a TypeScript namespace in the
//   developer message (HarmonyToolNamespace: the template's render_typescript_type, its
//   whitespace included; oneOf is written as a plain union, without the template's comments).
// - A call is an assistant message to=functions.NAME on the commentary channel, one per message
//   (the model ends its reply at <|call|>, so it never makes two at once); its result comes back
//   as a message from functions.NAME. Arguments and results are written as the template's tojson
//   writes them. The template drops the analysis that preceded a call once a final reply follows
//   it, so an agent's cache diverges from the model's own output there, as it does after every
//   reply in plain harmony chat.
// - tool_choice is not enforced: a call's header is made of special tokens, which grammars do not
//   match (required and named choices are a request to the model, none still shows the tools).
// - The model's reply is read whole (GenerationRequest::raw_reply): the final channel is the text,
//   a commentary message to functions.NAME a call, analysis and preambles are not shown.
// Thread-safety: pure functions; a HarmonyToolReader belongs to one reply.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/tool_calls.h"

namespace kvmem::serve {

// ApplyTools for ToolFormat::kHarmony (tools given or not: calls and results keep the format).
Status ApplyHarmonyTools(const ToolRequest& request, const std::vector<ToolTurn>& turns,
                         GenerationRequest* out);

// "## functions\n\nnamespace functions {\n\n…} // namespace functions", as the template writes it.
std::string HarmonyToolNamespace(const std::vector<ToolDef>& tools);

// Reads a harmony reply with its special tokens (ToolOutputParser for ToolFormat::kHarmony).
class HarmonyToolReader {
 public:
  explicit HarmonyToolReader(std::string id_prefix) : id_prefix_(std::move(id_prefix)) {}
  void Push(std::string_view text, std::vector<ToolEvent>* events, std::vector<ToolCall>* calls);
  void Finish(std::vector<ToolEvent>* events, std::vector<ToolCall>* calls);

 private:
  enum class State { kHeader, kBody };
  enum class Body { kHidden, kFinal, kCall };
  void EndMessage(std::vector<ToolEvent>* events, std::vector<ToolCall>* calls);

  std::string id_prefix_;
  State state_ = State::kHeader;  // the generation prompt opened the first message's header
  Body body_ = Body::kHidden;
  std::string buf_;      // text not yet consumed
  std::string header_;   // the current message's header so far
  std::string call_;     // kCall: the function
  std::string args_;     // kCall: the body so far
  bool opened_ = false;  // a message opened (else the reply is shown as it is)
};

}  // namespace kvmem::serve
