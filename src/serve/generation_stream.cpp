#include "serve/generation_stream.h"

#include <exception>
#include <iterator>

#include "core/log.h"

namespace kvmem::serve {
namespace {

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void NoteText(Clock::time_point received, std::string_view piece, GenerationTiming* timing) {
  if (piece.empty()) return;
  const double t = SecondsSince(received);
  if (timing->first_text_s < 0) timing->first_text_s = t;
  timing->last_text_s = t;
}

// Appends a delta to `out`, completing UTF-8 per choice; merges with the last chunk when it is
// the same choice's.
void AddDelta(const GenerationSink::Delta& d, std::vector<Utf8Assembler>* utf8,
              std::vector<ReplyChunk>* out) {
  if (d.choice < 0) return;
  if (utf8->size() <= static_cast<size_t>(d.choice)) utf8->resize(d.choice + 1);
  std::string text = (*utf8)[d.choice].Push(d.text);
  if (text.empty() && d.logprobs.empty()) return;
  if (out->empty() || out->back().choice != d.choice) out->push_back({d.choice, "", {}});
  out->back().text += text;
  out->back().logprobs.insert(out->back().logprobs.end(), d.logprobs.begin(), d.logprobs.end());
}

// Each choice's held-back UTF-8 tail, at the end.
void FlushUtf8(std::vector<Utf8Assembler>* utf8, std::vector<ReplyChunk>* out) {
  for (size_t i = 0; i < utf8->size(); ++i) {
    std::string tail = (*utf8)[i].Flush();
    if (!tail.empty()) out->push_back({static_cast<int>(i), std::move(tail), {}});
  }
}

}  // namespace

CollectingSink::CollectingSink(Clock::time_point received, const std::atomic<bool>* cancel_all,
                               ClientConnection* client)
    : received_(received), cancel_all_(cancel_all), client_(client) {}

bool CollectingSink::OnDelta(const Delta& delta) {
  if (cancel_all_ != nullptr && cancel_all_->load()) return false;
  if (client_ != nullptr && client_->Gone()) return false;
  NoteText(received_, delta.text, &timing_);
  if (choices_.size() <= static_cast<size_t>(delta.choice)) {
    choices_.resize(delta.choice + 1);
    for (size_t i = 0; i < choices_.size(); ++i) choices_[i].choice = static_cast<int>(i);
  }
  std::vector<ReplyChunk> one;
  AddDelta(delta, &utf8_, &one);
  for (ReplyChunk& c : one) {
    choices_[c.choice].text += c.text;
    auto& lp = choices_[c.choice].logprobs;
    lp.insert(lp.end(), std::make_move_iterator(c.logprobs.begin()),
              std::make_move_iterator(c.logprobs.end()));
  }
  return true;
}

std::vector<ReplyChunk> CollectingSink::TakeChoices() {
  std::vector<ReplyChunk> tails;
  FlushUtf8(&utf8_, &tails);
  if (choices_.empty()) choices_.resize(1);
  for (ReplyChunk& t : tails) choices_[t.choice].text += t.text;
  return std::move(choices_);
}

GenerationTiming CollectingSink::Finish() {
  timing_.end_s = SecondsSince(received_);
  return timing_;
}

GenerationStream::GenerationStream(Backend* backend, GenerationRequest request,
                                   Clock::time_point received, const std::atomic<bool>* cancel_all,
                                   ClientConnection* client)
    : backend_(backend),
      request_(std::move(request)),
      received_(received),
      cancel_all_(cancel_all),
      client_(client),
      thread_([this] { Run(); }) {}

GenerationStream::~GenerationStream() {
  Cancel();
  thread_.join();
}

void GenerationStream::Run() {
  std::optional<Result<GenerationResult>> result;
  // An exception must not escape a thread (std::terminate); a backend that throws is a
  // server fault, reported like one.
  try {
    result.emplace(backend_->Generate(request_, this));
  } catch (const std::exception& e) {
    KVMEM_LOG_ERROR("backend threw while generating %s: %s", request_.request_id.c_str(), e.what());
    result.emplace(Internal(std::string("backend threw: ") + e.what()));
  } catch (...) {
    KVMEM_LOG_ERROR("backend threw while generating %s", request_.request_id.c_str());
    result.emplace(Internal("backend threw"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  FlushUtf8(&utf8_, &pending_);
  timing_.end_s = SecondsSince(received_);
  result_ = std::move(result);
  finished_ = true;
  cv_.notify_all();
}

void GenerationStream::OnPrompt(const PromptInfo& prompt) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_ = prompt;
  started_ = true;
  cv_.notify_all();
}

bool GenerationStream::OnDelta(const Delta& delta) {
  // Outside the lock: a peek at the socket, by the generation thread only.
  const bool gone = client_ != nullptr && client_->Gone();
  std::lock_guard<std::mutex> lock(mu_);
  if (gone) cancelled_ = true;
  if (cancelled_ || (cancel_all_ != nullptr && cancel_all_->load())) return false;
  NoteText(received_, delta.text, &timing_);
  AddDelta(delta, &utf8_, &pending_);
  started_ = true;
  cv_.notify_all();
  return true;
}

bool GenerationStream::WaitForStart() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return started_ || finished_; });
  return started_ || result_->ok();
}

PromptInfo GenerationStream::prompt() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prompt_;
}

bool GenerationStream::Next(std::vector<ReplyChunk>* chunks) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !pending_.empty() || finished_; });
  chunks->clear();
  chunks->swap(pending_);
  return !finished_;
}

void GenerationStream::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

const Result<GenerationResult>& GenerationStream::result() const {
  std::lock_guard<std::mutex> lock(mu_);
  return *result_;
}

GenerationTiming GenerationStream::timing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timing_;
}

}  // namespace kvmem::serve
