// Forward passes from many threads combined into shared steps: the scheduler of a server that
// serves many agents at once (semantic.md §3.6, after llama.cpp's server `update_slots`).
//
// Each agent's turn runs on its own thread and calls Forward() where it would call
// engine::Forward. The calls in flight are served together, a step at a time: a step takes the
// next token of every decoding sequence and one chunk of one prompt (round-robin over groups,
// then over the members of a group: tenants, then agents), runs them as one ForwardMany (the
// weights read once for all) and wakes the callers whose pieces are done. There is no scheduler
// thread: a caller that finds no step running runs the next one itself, for everyone.
//
//   StepBatcher batcher(model, &threads, {});
//   StepBatcher::Scope scope(tenant_hash, agent_hash);       // fairness key of this thread
//   batcher.Forward(&seq, prompt, seq.n_rows(), false, &logits);  // prefill, chunk by chunk
//   batcher.Forward(&seq, {&next, 1}, pos, false, &logits);       // one decode step
//   { auto lock = batcher.Exclusive(); ... ForwardPass with a tap ... }  // beside the steps
//
// A decode step that just ran is likely to come back within microseconds (the caller samples
// and calls again), so a step waits up to Options::gather for the sequences of the previous step
// before it starts; sequences whose turn ended cost that wait once.
// Prompt chunks are shorter while other sequences decode (Options::chunk_while_decoding, and
// fewer tokens the deeper they read), so a long prompt delays the decoding streams by one short
// step at a time, not by its whole prefill.
// Passes that need the model to themselves (layer taps, layer stepping, custom visibility) hold
// Exclusive(), which waits for the running step and holds off the next.
// Thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/forward_many.h"
#include "kv/kv_sequence.h"
#include "model/model.h"

namespace kvmem::engine {

// What the steps so far did (for /metrics).
struct StepStats {
  // Steps by the number of sequences in them: 1, 2, 3-4, 5-8, 9-16, 17-32, 33+.
  static constexpr std::array<int, 7> kBucketMax = {1, 2, 4, 8, 16, 32, 1 << 30};
  std::array<int64_t, 7> steps_by_sequences = {};
  int64_t steps = 0;
  int64_t sequences = 0;      // pieces, all steps (sequences per step = sequences / steps)
  int64_t tokens = 0;         // decode tokens + prompt tokens, all steps
  int64_t decode_tokens = 0;  // pieces of one token
  double step_seconds = 0;    // time in steps, all steps
  int64_t waiting = 0;        // calls waiting now
};

class StepBatcher {
 public:
  struct Options {
    int max_step_tokens = 256;        // prompt chunk when nothing decodes (the micro-batch)
    int chunk_while_decoding = 64;    // prompt chunk while sequences decode, at most
    // ... and at most this many (token, row) reads of attention, counting every row before a
    // token: a chunk deep in a long prompt costs more than its tokens' matmuls (64 tokens at
    // depth 4096 measured ~230 ms on SmolLM2), so it gets fewer tokens.
    int64_t chunk_reads_while_decoding = 65536;
    int max_sequences = 64;           // pieces per step; the rest wait for the next
    std::chrono::microseconds gather{2000};
    // Called after each step with the sequences it served, in order (tracing, tests).
    std::function<void(std::span<const kv::KvSequence* const>)> on_step;
  };

  // The fairness key of the calling thread's Forward calls while the scope lives.
  class Scope {
   public:
    Scope(uint64_t group, uint64_t member);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    uint64_t group_, member_;
  };

  StepBatcher(const model::Model& model, ThreadPool* threads, Options options);

  // What engine::Forward computes, with the same contract (rows appended to seq at first_pos..;
  // logits of the last token, or of all with all_logits), in steps shared with other callers.
  // Blocks until done. seq must not be used elsewhere meanwhile.
  Status Forward(kv::KvSequence* seq, std::span<const int32_t> tokens, int64_t first_pos,
                 bool all_logits, std::vector<float>* logits);

  // The model and threads to oneself: no step runs while the lock is held.
  std::unique_lock<std::mutex> Exclusive() { return std::unique_lock<std::mutex>(compute_mu_); }
  // The mutex Exclusive() holds, for code that takes a std::mutex* around its passes.
  std::mutex& mutex() { return compute_mu_; }

  StepStats stats() const;
  const model::Model& model() const { return model_; }
  ThreadPool* threads() const { return threads_; }

 private:
  struct Job;
  // What one step does for one job.
  struct Take {
    Job* job;
    int n;
  };
  std::vector<Take> PlanStep();            // under mu_
  void RunStep(const std::vector<Take>& takes);  // not under mu_
  Job* NextPrompt(const std::vector<Job*>& prompts);

  const model::Model& model_;
  ThreadPool* threads_;
  const Options options_;
  std::mutex compute_mu_;  // held by a running step and by Exclusive()
  ManyScratch scratch_;    // under compute_mu_

  mutable std::mutex mu_;
  std::condition_variable gather_cv_;  // a sequence of the previous step came back
  std::deque<Job*> jobs_;  // in arrival order
  bool stepping_ = false;  // a caller is planning or running a step
  // Sequences of the previous step's decode pieces that have not called again yet.
  std::unordered_set<const kv::KvSequence*> returning_;
  uint64_t last_group_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> last_member_;  // (group, member last served)
  StepStats stats_;
};

}  // namespace kvmem::engine
