#include "serve/generation_stream.h"

#include <exception>

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

}  // namespace

CollectingSink::CollectingSink(Clock::time_point received, const std::atomic<bool>* cancel_all)
    : received_(received), cancel_all_(cancel_all) {}

bool CollectingSink::OnText(std::string_view piece) {
  if (cancel_all_ != nullptr && cancel_all_->load()) return false;
  NoteText(received_, piece, &timing_);
  text_ += utf8_.Push(piece);
  return true;
}

std::string CollectingSink::TakeText() {
  text_ += utf8_.Flush();
  return std::move(text_);
}

GenerationTiming CollectingSink::Finish() {
  timing_.end_s = SecondsSince(received_);
  return timing_;
}

GenerationStream::GenerationStream(Backend* backend, GenerationRequest request,
                                   Clock::time_point received, const std::atomic<bool>* cancel_all)
    : backend_(backend),
      request_(std::move(request)),
      received_(received),
      cancel_all_(cancel_all),
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
  pending_ += utf8_.Flush();
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

bool GenerationStream::OnText(std::string_view piece) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_ || (cancel_all_ != nullptr && cancel_all_->load())) return false;
  NoteText(received_, piece, &timing_);
  pending_ += utf8_.Push(piece);
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

bool GenerationStream::Next(std::string* text) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !pending_.empty() || finished_; });
  text->clear();
  text->swap(pending_);
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
