#include "eval/policy_qa.h"

#include <chrono>

#include "core/clock.h"
#include "engine/sampler.h"
#include "eval/metrics.h"

namespace kvmem::eval {
namespace {

constexpr int kBlockRows = 256;  // as the server's agents (AgentRuntimeOptions)

}  // namespace

Result<std::unique_ptr<EvalAgent>> EvalAgent::Create(const model::Model& model,
                                                     const tokenizer::Tokenizer& tok,
                                                     ThreadPool* threads, std::string_view policy,
                                                     const memory::Json& config,
                                                     const EvalAgentOptions& options) {
  std::unique_ptr<EvalAgent> a(new EvalAgent());
  a->tok_ = &tok;
  memory::PolicyEnv& env = a->env_;
  env.model = &model;
  env.tok = &tok;
  env.threads = threads;
  a->batcher_ = std::make_unique<engine::StepBatcher>(model, threads, engine::StepBatcher::Options{});
  env.compute = a->batcher_.get();
  env.n_ctx = model.spec().n_ctx_train;
  env.max_history_tokens = options.max_history_tokens;
  env.model_fingerprint = options.model_fingerprint;
  env.presets_dir = options.presets_dir;
  env.encoder = options.encoder;
  KVMEM_ASSIGN_OR_RETURN(a->spec_, memory::ParseMemorySpec(env, policy, config));
  const int64_t rows = a->spec_.kind->rows_needed(env, a->spec_.config);
  a->pool_ = std::make_unique<kv::KvPool>(model.kv_geometry(kBlockRows),
                                          static_cast<int>((rows + kBlockRows - 1) / kBlockRows),
                                          options.formats);
  KVMEM_ASSIGN_OR_RETURN(a->policy_, a->spec_.kind->create(env, a->spec_.config, a->pool_.get()));
  return a;
}

Result<memory::PromptAccount> EvalAgent::Prefill(std::string_view prompt_text,
                                                 std::string_view focus,
                                                 std::vector<float>* logits) {
  KVMEM_ASSIGN_OR_RETURN(memory::TurnPlan plan, policy_->Plan({prompt_text, focus}));
  Result<memory::PromptAccount> account = policy_->Apply(plan, logits);
  if (!account.ok()) policy_->Abort();
  return account;
}

Result<memory::PromptAccount> EvalAgent::Ingest(std::string_view prompt_text) {
  std::vector<float> logits;
  KVMEM_ASSIGN_OR_RETURN(memory::PromptAccount account, Prefill(prompt_text, "", &logits));
  KVMEM_RETURN_IF_ERROR(policy_->Commit());
  return account;
}

Result<Asked> EvalAgent::Ask(std::string_view prompt_text, std::string_view focus,
                             std::span<const int32_t> gold, int answer_tokens) {
  Asked a;
  std::vector<float> logits;
  if (!gold.empty()) {
    KVMEM_RETURN_IF_ERROR(Prefill(prompt_text, focus, &logits).status());
    Status st;
    for (size_t i = 0; i < gold.size() && st.ok(); ++i) {
      a.nll += NegLogLikelihood(logits, gold[i]);
      if (i + 1 < gold.size()) {
        st = policy_->CanStep() ? policy_->Step(gold[i], &logits)
                                : OutOfRange("the gold answer does not fit the context");
      }
    }
    policy_->Abort();
    KVMEM_RETURN_IF_ERROR(st);
    a.nll /= static_cast<double>(gold.size());
  }
  auto t0 = std::chrono::steady_clock::now();
  KVMEM_ASSIGN_OR_RETURN(a.account, Prefill(prompt_text, focus, &logits));
  a.prefill_seconds = SecondsSince(t0);
  a.report = policy_->Report();
  a.detail = policy_->Detail();
  a.first_logits = logits;
  t0 = std::chrono::steady_clock::now();
  engine::SamplerConfig greedy;
  greedy.temperature = 0;
  engine::Sampler sampler(greedy);
  std::vector<int32_t> out;
  std::string text;
  Status st;
  for (int i = 0; i < answer_tokens && st.ok(); ++i) {
    const int32_t t = sampler.Sample(logits, out);
    if (tok_->IsEndOfGeneration(t)) break;
    out.push_back(t);
    text += tok_->TokenToPiece(t);
    if (text.find('\n') != std::string::npos || i + 1 == answer_tokens || !policy_->CanStep()) {
      break;
    }
    st = policy_->Step(t, &logits);
    if (st.ok()) ++a.decoded;
  }
  policy_->Abort();
  KVMEM_RETURN_IF_ERROR(st);
  a.answer_seconds = SecondsSince(t0);
  a.prediction = text.substr(0, text.find('\n'));
  return a;
}

}  // namespace kvmem::eval
