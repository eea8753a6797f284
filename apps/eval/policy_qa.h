// Questions asked of an agent memory policy, as the server asks them (llama2.c's test_all.py
// lesson: the evaluation runs the shipped code). An EvalAgent is one policy from the table
// (memory/policy/policy_table.h) over its own pool; the evaluation feeds it a history turn by
// turn (Ingest: a turn that joins the memory without a reply) and asks questions (Ask: the gold
// answer's NLL teacher-forced through the policy's decode steps, then the greedy answer, each
// after its own Plan/Apply; the turn is aborted, so every question meets the same memory).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_format.h"
#include "memory/policy/policy_table.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::eval {

struct EvalAgentOptions {
  kv::KvFormats formats;
  int64_t max_history_tokens = 0;  // history the memory may hold (policies beyond the context)
  std::string model_fingerprint;   // for per-model presets
  std::string presets_dir;
  const memory::embed::SentenceEncoder* encoder = nullptr;  // PolicyEnv::encoder
};

// One asked question.
struct Asked {
  double nll = 0;          // mean per gold token; 0 without gold
  std::string prediction;  // the greedy answer up to its first line break
  memory::PromptAccount account;
  memory::Json report;  // the policy's Report() of the prompt
  memory::Json detail;  // its Detail()
  int64_t decoded = 0;  // tokens of the answer fed back (rows read at the end: prompt + these)
  double prefill_seconds = 0, answer_seconds = 0;
  std::vector<float> first_logits;  // (n_vocab) what the greedy answer's first token is drawn from
};

class EvalAgent {
 public:
  // model, tok and threads outlive the agent. InvalidArgument for a bad policy or config.
  static Result<std::unique_ptr<EvalAgent>> Create(const model::Model& model,
                                                   const tokenizer::Tokenizer& tok,
                                                   ThreadPool* threads, std::string_view policy,
                                                   const memory::Json& config,
                                                   const EvalAgentOptions& options);

  // A turn that joins the memory without a reply; what its prompt cost.
  Result<memory::PromptAccount> Ingest(std::string_view prompt_text);
  // prompt_text as a turn's whole prompt (focus: its retrieval_query); the memory is left as
  // it was. answer_tokens bounds the greedy answer.
  Result<Asked> Ask(std::string_view prompt_text, std::string_view focus,
                    std::span<const int32_t> gold, int answer_tokens);

  const memory::MemorySpec& spec() const { return spec_; }
  // The most KV memory the agent's pool held.
  size_t kv_peak_bytes() const { return pool_->peak_bytes_in_use(); }
  memory::MemoryPolicy& policy() { return *policy_; }

 private:
  EvalAgent() = default;
  Result<memory::PromptAccount> Prefill(std::string_view prompt_text, std::string_view focus,
                                        std::vector<float>* logits);

  const tokenizer::Tokenizer* tok_ = nullptr;
  std::unique_ptr<engine::StepBatcher> batcher_;
  memory::PolicyEnv env_;
  memory::MemorySpec spec_;
  std::unique_ptr<kv::KvPool> pool_;
  std::unique_ptr<memory::MemoryPolicy> policy_;
};

}  // namespace kvmem::eval
