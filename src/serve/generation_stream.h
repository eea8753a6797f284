// Running one Backend::Generate for an HTTP response, whole or streamed.
//
// A streamed reply runs the generation on a thread of its own (GenerationStream) because the
// HTTP library writes the status line only after the request handler returns: the handler
// waits until the backend has accepted the prompt, so that a failure before that point (unknown
// agent, prompt too long, server full) still becomes an HTTP error status, and then hands the
// events to the content provider, which writes them as they come. When the client goes away
// (its connection, watched by both sinks at every piece, or the next write fails) the backend's
// next OnText returns false.
//
// Both sinks reassemble UTF-8 split across pieces and time the first and last text for the
// metrics. Thread-safety: GenerationStream's methods may be called from one consumer thread
// while the backend calls its sink from the generation thread; CollectingSink is used by the
// thread that calls Generate.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "serve/backend.h"
#include "serve/client_connection.h"
#include "serve/metrics.h"
#include "serve/reply_format.h"
#include "serve/utf8.h"

namespace kvmem::serve {

using Clock = std::chrono::steady_clock;

// The text of a whole (not streamed) reply.
class CollectingSink final : public GenerationSink {
 public:
  // `cancel_all` (may be null): once true, OnText returns false (the server is stopping), as it
  // does once `client` (may be null; outlives the sink) is gone.
  CollectingSink(Clock::time_point received, const std::atomic<bool>* cancel_all,
                 ClientConnection* client = nullptr);

  void OnPrompt(const PromptInfo& prompt) override { prompt_ = prompt; }
  bool OnText(std::string_view piece) override { return OnDelta({0, piece, {}}); }
  bool OnDelta(const Delta& delta) override;

  // Call once, after Generate returned: each choice's text (valid UTF-8) and logprobs (at least
  // choice 0), and the timings.
  std::vector<ReplyChunk> TakeChoices();
  const PromptInfo& prompt() const { return prompt_; }
  GenerationTiming Finish();

 private:
  Clock::time_point received_;
  const std::atomic<bool>* cancel_all_;
  ClientConnection* client_;
  PromptInfo prompt_;
  std::vector<Utf8Assembler> utf8_;  // (choices)
  std::vector<ReplyChunk> choices_;
  GenerationTiming timing_;
};

class GenerationStream final : private GenerationSink {
 public:
  // Starts backend->Generate(request) on a new thread. `backend` and `client` (may be null:
  // not watched; only the generation thread asks it) must outlive this object.
  GenerationStream(Backend* backend, GenerationRequest request, Clock::time_point received,
                   const std::atomic<bool>* cancel_all, ClientConnection* client = nullptr);
  // Cancels the generation and waits for the backend to return.
  ~GenerationStream() override;
  GenerationStream(const GenerationStream&) = delete;
  GenerationStream& operator=(const GenerationStream&) = delete;

  // Blocks until the prompt was accepted, text arrived, or the generation ended. False when it
  // ended with an error before any of that: result() then holds the error for an HTTP status.
  bool WaitForStart();
  // The prompt's usage as the backend reported it (zeros when it did not call OnPrompt).
  PromptInfo prompt() const;
  // Blocks until there is output or the end; moves the pieces (valid UTF-8, in order) into
  // *chunks. Returns false once the generation has ended and *chunks holds the last of it.
  bool Next(std::vector<ReplyChunk>* chunks);
  // From now on OnText returns false.
  void Cancel();
  // Valid once Next returned false or WaitForStart returned false.
  const Result<GenerationResult>& result() const;
  GenerationTiming timing() const;

 private:
  void Run();
  void OnPrompt(const PromptInfo& prompt) override;
  bool OnText(std::string_view piece) override { return OnDelta({0, piece, {}}); }
  bool OnDelta(const Delta& delta) override;

  Backend* backend_;
  GenerationRequest request_;
  Clock::time_point received_;
  const std::atomic<bool>* cancel_all_;
  ClientConnection* client_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool finished_ = false;
  bool cancelled_ = false;
  PromptInfo prompt_;
  std::vector<Utf8Assembler> utf8_;  // (choices)
  std::vector<ReplyChunk> pending_;  // not yet taken by Next
  GenerationTiming timing_;
  std::optional<Result<GenerationResult>> result_;

  std::thread thread_;  // last: starts after every member above is constructed
};

}  // namespace kvmem::serve
