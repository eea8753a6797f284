// Tool calls in kvmem's generic format, for every chat template but Llama 3.1's, Qwen 2.5/3's and
// GPT-OSS's harmony, which have their own (serve/llama31_tools.h, serve/qwen_tools.h,
// serve/harmony_tools.h; ApplyTools picks by ToolFormat). SmolLM2's ChatML, Gemma's and Llama 3's
// templates declare no tools. After llama.cpp's common/chat "generic" handler:
//
// - The tools are described in the system message: one JSON line per tool, then how to answer.
//   The text does not depend on tool_choice, so a conversation whose tool_choice changes between
//   turns keeps its cached prefix.
// - The model's turn is one JSON object, either {"tool_calls":[{"name":…,"arguments":{…}},…]}
//   or {"response":"…"}, held to that shape by a grammar (ToolOutputGrammar) for every
//   tool_choice, auto included: a small model asked for JSON otherwise drifts into prose that
//   no parser recovers. tool_choice only narrows the grammar (none: a response; required: calls;
//   a named function: one call of it; parallel_tool_calls false: one call at most).
// - The grammar admits no whitespace outside strings, only the shortest escapes in strings
//   (JsonSpelling::kCompact), and the arguments' properties come in the order of their names (a
//   JSON object's keys as the server keeps them), so the model's output has one spelling: a tool
//   call or reply that the client sends back is rendered again byte for byte
//   (RenderToolConversation), and the agent's next turn matches its cached prefix. (A number
//   the model spelled unusually, 1.50 for 1.5, is the one way it can drift.)
// - Tool results are user messages of {"tool_response":{"name":…,"content":…}} lines (several
//   results of one turn share a message; templates such as Gemma's require roles to alternate).
//
// Thread-safety: pure functions; a ToolOutputParser belongs to one reply.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/grammar/grammar.h"
#include "serve/api_types.h"
#include "serve/json_body.h"

namespace kvmem::serve {

class HarmonyToolReader;  // serve/harmony_tools.h

struct ToolDef {
  std::string name{};  // [A-Za-z0-9_-]{1,64}
  std::string description{};
  Json parameters = Json::object();  // a JSON schema of the arguments object
  bool strict = false;  // parameters the schema compiler refuses are an error (else: any object)
  std::string field{};  // where the parameters are in the request, for errors
};

enum class ToolChoiceMode { kAuto, kNone, kRequired, kNamed };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  std::string name{};  // kNamed
};

struct ToolRequest {
  std::vector<ToolDef> tools{};
  ToolChoice choice{};
  bool parallel = true;  // several calls in one turn
};

// One message of a conversation that involves tools, as both dialects reduce to it.
struct ToolTurn {
  std::string role{};  // "system", "user", "assistant" or "tool"
  std::string text{};
  std::vector<ToolCall> calls{};  // assistant: the calls it made (arguments as sent back)
  std::string tool_call_id{};     // tool: the call this answers
  bool is_error = false;        // tool: Anthropic's is_error
};

// The request's conversation and tools in `format`: sets out->messages, out->grammar (tools
// given, and for Llama 3.1 a call required) and out->template_tools. InvalidArgument naming the
// field: a strict tool's schema the compiler refuses, a grammar already set (response_format or
// grammar beside tools), several calls in one Llama 3.1 message.
Status ApplyTools(ToolFormat format, const ToolRequest& request, const std::vector<ToolTurn>& turns,
                  GenerationRequest* out);

// InvalidArgument naming `field` unless `name` is a valid tool name.
Status ValidateToolName(std::string_view name, std::string_view field);

// The chat messages to render: the tool list joins the system message (or becomes one), calls
// and replies of assistant turns are written in the format above, tool results become user
// messages. A tool_call_id no earlier call has is rendered without the tool's name.
std::vector<ChatMessage> RenderToolConversation(const ToolRequest& request,
                                                const std::vector<ToolTurn>& turns);

// The grammar of the model's turn under `request` (tools non-empty). InvalidArgument naming
// "tools[i]" for a strict tool whose parameters the schema compiler refuses.
Result<std::shared_ptr<const engine::grammar::Grammar>> ToolOutputGrammar(
    const ToolRequest& request);

// The grammar of one call in Llama 3.1's format, {"name": …, "parameters": {…}}, over the tools
// tool_choice allows (serve/llama31_tools.h).
Result<std::shared_ptr<const engine::grammar::Grammar>> Llama31CallGrammar(
    const ToolRequest& request);

// The grammar of a turn of calls in Qwen's format, <tool_call>\n{"name": …, "arguments": {…}}
// \n</tool_call> blocks separated by "\n" (one when parallel calls are off or a function is
// named), over the tools tool_choice allows (serve/qwen_tools.h).
Result<std::shared_ptr<const engine::grammar::Grammar>> QwenCallGrammar(
    const ToolRequest& request);

// What a reply in the generic format says, as it arrives.
struct ToolEvent {
  enum class Kind { kText, kCallStart, kCallArguments };
  Kind kind = Kind::kText;
  int index = 0;     // kCallStart, kCallArguments: the call's index in the reply
  std::string text{};  // kText: reply text; kCallArguments: a piece of the arguments' JSON
  ToolCall call{};     // kCallStart: id and name (arguments empty)
};

// Reads the model's output incrementally: the response string's characters (unescaped) as
// text, each call's name as soon as it is complete and its arguments as they come. Output
// that is not in the format (no grammar held it) is passed through as text.
class ToolOutputParser {
 public:
  // Call ids are `id_prefix` ("call_", "toolu_") and 24 random characters. kLlama31: output
  // that opens with "{" is held to its end and read as {"name", "parameters"} (a call comes
  // whole, at the end); anything else is text. kQwen: text until a <tool_call> block, each block
  // read as {"name", "arguments"} when it closes (one that is not a call stays text). kHarmony:
  // the reply with its special tokens (HarmonyToolReader).
  explicit ToolOutputParser(std::string id_prefix, ToolFormat format = ToolFormat::kGeneric);
  ~ToolOutputParser();

  void Push(std::string_view text, std::vector<ToolEvent>* events);
  // At the end of the output: whatever is held back, and the calls that were complete.
  void Finish(std::vector<ToolEvent>* events);
  const std::vector<ToolCall>& complete_calls() const { return complete_; }

 private:
  enum class State {
    kStart, kResponse, kCallOpen, kName, kArgsKey, kArgs, kCallClose, kDone, kRaw,
    kLlamaCall,  // kLlama31: a call's JSON, held to the end
    kQwenCall,   // kQwen: inside a <tool_call> block, held to its close
  };
  enum class Match { kYes, kWait, kNo };

  void Drain(std::vector<ToolEvent>* events);
  Match Expect(std::string_view literal);
  bool DrainResponse(std::vector<ToolEvent>* events);  // false: wait for more
  bool DrainArguments(std::vector<ToolEvent>* events);
  void ToRaw(std::vector<ToolEvent>* events);
  void DrainLlama31(std::vector<ToolEvent>* events);
  void FinishLlama31(std::vector<ToolEvent>* events);
  void DrainQwen(std::vector<ToolEvent>* events);
  void FinishQwen(std::vector<ToolEvent>* events);
  bool ReadQwenCall(std::string_view block, std::vector<ToolEvent>* events);

  std::string id_prefix_;
  ToolFormat format_;
  State state_ = State::kStart;
  std::string buf_;  // output not yet consumed
  std::string name_;
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  std::vector<ToolCall> calls_;     // started
  std::vector<ToolCall> complete_;  // closed
  std::unique_ptr<HarmonyToolReader> harmony_;  // kHarmony
};

}  // namespace kvmem::serve
