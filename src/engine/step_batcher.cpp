#include "engine/step_batcher.h"

#include <algorithm>
#include <chrono>
#include <optional>

namespace kvmem::engine {

namespace {

// The fairness key of this thread's calls (StepBatcher::Scope).
thread_local uint64_t t_group = 0;
thread_local uint64_t t_member = 0;

using Clock = std::chrono::steady_clock;

}  // namespace

struct StepBatcher::Job {
  kv::KvSequence* seq;
  std::span<const int32_t> tokens;
  int64_t first_pos;
  bool all_logits;
  std::vector<float>* logits;
  uint64_t group;
  uint64_t member;
  size_t done_tokens = 0;
  bool finished = false;
  Status status = Status::Ok();
  std::vector<float> part = {};  // the logits of this job's piece in the running step
  std::condition_variable cv = {};  // wakes the caller: its job finished, or it runs a step

  bool decode() const { return tokens.size() == 1; }
};

StepBatcher::Scope::Scope(uint64_t group, uint64_t member) : group_(t_group), member_(t_member) {
  t_group = group;
  t_member = member;
}

StepBatcher::Scope::~Scope() {
  t_group = group_;
  t_member = member_;
}

StepBatcher::StepBatcher(const model::Model& model, ThreadPool* threads, Options options)
    : model_(model), threads_(threads), options_(options) {}

Status StepBatcher::Forward(kv::KvSequence* seq, std::span<const int32_t> tokens,
                            int64_t first_pos, bool all_logits, std::vector<float>* logits) {
  if (tokens.empty()) return InvalidArgument("no tokens to evaluate");
  logits->clear();
  Job job{seq, tokens, first_pos, all_logits, logits, t_group, t_member};
  std::unique_lock<std::mutex> l(mu_);
  jobs_.push_back(&job);
  ++stats_.waiting;
  if (returning_.erase(seq) > 0) gather_cv_.notify_one();
  while (!job.finished) {
    if (stepping_) {
      job.cv.wait(l);
      continue;
    }
    // This caller runs the next step, for everyone waiting.
    stepping_ = true;
    gather_cv_.wait_until(l, Clock::now() + options_.gather,
                          [&] { return returning_.empty(); });
    returning_.clear();
    const std::vector<Take> takes = PlanStep();
    l.unlock();
    const auto start = Clock::now();
    RunStep(takes);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    l.lock();
    int64_t tokens_in_step = 0;
    if (options_.on_step) {
      std::vector<const kv::KvSequence*> seqs;
      for (const Take& t : takes) seqs.push_back(t.job->seq);
      options_.on_step(seqs);
    }
    for (const Take& t : takes) {
      Job* j = t.job;
      tokens_in_step += t.n;
      if (j->status.ok()) {
        j->done_tokens += static_cast<size_t>(t.n);
        if (j->all_logits) {
          j->logits->insert(j->logits->end(), j->part.begin(), j->part.end());
        } else if (j->done_tokens == j->tokens.size()) {
          j->logits->swap(j->part);
        }
      }
      if (!j->status.ok() || j->done_tokens == j->tokens.size()) {
        j->finished = true;
        jobs_.erase(std::find(jobs_.begin(), jobs_.end(), j));
        if (j->decode() && j->status.ok()) returning_.insert(j->seq);
        j->cv.notify_one();
      }
      if (j->decode()) ++stats_.decode_tokens;
    }
    const auto n_seq = static_cast<int>(takes.size());
    const auto* bucket = std::lower_bound(StepStats::kBucketMax.begin(),
                                          StepStats::kBucketMax.end(), n_seq);
    ++stats_.steps_by_sequences[bucket - StepStats::kBucketMax.begin()];
    ++stats_.steps;
    stats_.sequences += n_seq;
    stats_.tokens += tokens_in_step;
    stats_.step_seconds += seconds;
    stepping_ = false;
    // The next step is this caller's if its job goes on, else the oldest waiter's.
    if (job.finished && !jobs_.empty()) jobs_.front()->cv.notify_one();
  }
  --stats_.waiting;
  return job.status;
}

std::vector<StepBatcher::Take> StepBatcher::PlanStep() {
  std::vector<Take> takes;
  std::vector<Job*> prompts;
  std::unordered_set<const kv::KvSequence*> in_step;
  const auto max_sequences = static_cast<size_t>(std::max(1, options_.max_sequences));
  for (Job* j : jobs_) {
    if (!j->decode()) {
      prompts.push_back(j);
    } else if (takes.size() < max_sequences && in_step.insert(j->seq).second) {
      takes.push_back({j, 1});
    }
  }
  std::erase_if(prompts, [&](const Job* j) { return in_step.count(j->seq) > 0; });
  if (!prompts.empty() && takes.size() < max_sequences) {
    Job* p = NextPrompt(prompts);
    int chunk = std::max(1, takes.empty() ? options_.max_step_tokens
                                          : options_.chunk_while_decoding);
    if (!takes.empty()) {
      // n tokens from position d read about n * (d + n / 2) rows.
      const int64_t depth = p->first_pos + static_cast<int64_t>(p->done_tokens);
      while (chunk > 1 && chunk * (depth + chunk / 2) > options_.chunk_reads_while_decoding) {
        chunk /= 2;
      }
    }
    const size_t left = p->tokens.size() - p->done_tokens;
    takes.push_back({p, static_cast<int>(std::min(left, static_cast<size_t>(chunk)))});
  }
  return takes;
}

// Round-robin over groups, then over the members of the chosen group; a member's prompts in
// arrival order.
StepBatcher::Job* StepBatcher::NextPrompt(const std::vector<Job*>& prompts) {
  // The smallest key after `last`, else the smallest key (wrapping around).
  auto next_after = [](uint64_t last, auto keys) {
    std::optional<uint64_t> after, first;
    for (uint64_t k : keys) {
      if (!first || k < *first) first = k;
      if (k > last && (!after || k < *after)) after = k;
    }
    return after ? *after : *first;
  };
  std::vector<uint64_t> keys;
  for (const Job* j : prompts) keys.push_back(j->group);
  const uint64_t group = next_after(last_group_, keys);
  auto last = std::find_if(last_member_.begin(), last_member_.end(),
                           [&](const auto& gm) { return gm.first == group; });
  if (last == last_member_.end()) {
    last_member_.push_back({group, 0});
    last = last_member_.end() - 1;
  }
  keys.clear();
  for (const Job* j : prompts) {
    if (j->group == group) keys.push_back(j->member);
  }
  const uint64_t member = next_after(last->second, keys);
  last_group_ = group;
  last->second = member;
  return *std::find_if(prompts.begin(), prompts.end(),
                       [&](const Job* j) { return j->group == group && j->member == member; });
}

void StepBatcher::RunStep(const std::vector<Take>& takes) {
  std::vector<SeqPiece> pieces;
  pieces.reserve(takes.size());
  for (const Take& t : takes) {
    Job* j = t.job;
    pieces.push_back({j->seq, j->tokens.subspan(j->done_tokens, static_cast<size_t>(t.n)),
                      j->first_pos + static_cast<int64_t>(j->done_tokens), j->all_logits,
                      &j->part});
  }
  {
    std::lock_guard<std::mutex> compute(compute_mu_);
    ForwardMany(model_, threads_, pieces, &scratch_);
  }
  for (size_t i = 0; i < takes.size(); ++i) {
    if (!pieces[i].status.ok()) takes[i].job->status = pieces[i].status;
  }
}

StepStats StepBatcher::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace kvmem::engine
