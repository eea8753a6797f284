#include "serve/generation_route.h"

#include <httplib.h>

#include <memory>
#include <optional>
#include <utility>

#include "serve/client_connection.h"
#include "serve/generation_stream.h"
#include "serve/http_reply.h"

namespace kvmem::serve {
namespace {

// Counts a generation request while the server holds it (queued or running): Stop() waits for
// the count to reach zero.
class InFlight {
 public:
  explicit InFlight(std::atomic<int64_t>* counter) : counter_(counter) { counter_->fetch_add(1); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { counter_->fetch_sub(1); }

 private:
  std::atomic<int64_t>* counter_;
};

// Everything a streamed reply needs until its last byte is written. Members are destroyed in
// reverse order: the generation thread is joined before the running place is given on, so
// in_flight() counts a generation until its backend call has returned.
struct StreamState {
  StreamState(std::atomic<int64_t>* in_flight, ServerMetrics* m) : counted(in_flight), metrics(m) {}
  ~StreamState() {
    if (stream == nullptr) return;
    stream->Cancel();  // no-op when it already ended
    std::vector<ReplyChunk> ignored;
    while (stream->Next(&ignored)) {
    }
    if (stream->result().ok()) metrics->RecordGeneration(*stream->result(), stream->timing());
  }

  InFlight counted;
  Admission::Ticket ticket;
  ServerMetrics* metrics;
  ClientConnection client;
  std::unique_ptr<ReplyFormat> reply;
  std::unique_ptr<GenerationStream> stream;
};

ApiError ShuttingDown() { return {ApiErrorKind::kOverloaded, "server is shutting down"}; }

// Writes one stream's events until its end; false when the client went away (the generation
// is then cancelled).
bool WriteStream(StreamState& state, const std::atomic<bool>& stopping, httplib::DataSink& sink) {
  GenerationStream& stream = *state.stream;
  ReplyFormat& reply = *state.reply;
  // An empty write would end the chunked body early.
  const auto write = [&](const std::string& bytes) {
    return bytes.empty() || sink.write(bytes.data(), bytes.size());
  };
  bool ok = write(reply.StreamStart(stream.prompt()));
  std::vector<ReplyChunk> chunks;
  for (bool more = true; ok && more;) {
    more = stream.Next(&chunks);
    for (const ReplyChunk& c : chunks) ok = ok && write(reply.StreamChunk(c));
  }
  if (!ok) {
    stream.Cancel();
    return false;
  }
  const Result<GenerationResult>& result = stream.result();
  std::string tail;
  if (!result.ok()) {
    tail = reply.StreamError(ErrorFromStatus(result.status()));
  } else if (result->finish_reason == FinishReason::kCancelled && stopping.load()) {
    tail = reply.StreamError(ShuttingDown());
  } else {
    tail = reply.StreamEnd(*result);
  }
  if (!write(tail)) return false;
  sink.done();
  return true;
}

// The reply to a request whose client has gone: nobody reads it, but the status (nginx's 499,
// "client closed request") is what /metrics counts.
void ClientClosed(httplib::Response& res, Dialect dialect) {
  SendError(res, {ApiErrorKind::kInvalidRequest, "the client closed the request"}, dialect);
  res.status = 499;
}

// A prompt past the context is the fault of the field that holds the prompt (OpenAI's `param`).
ApiError GenerationError(const Status& status, const char* prompt_field) {
  ApiError e = ErrorFromStatus(status);
  if (e.kind == ApiErrorKind::kContextLength && e.param.empty()) e.param = prompt_field;
  return e;
}

void SetDivergenceHeader(const Divergence& d, httplib::Response& res) {
  if (d.diverged) res.set_header(kDivergenceHeader, DivergenceHeaderValue(d));
}

}  // namespace

void ServeGeneration(const GenerationContext& ctx, Dialect dialect, const RequestParser& parse,
                     const httplib::Request& req, std::string_view body, httplib::Response& res,
                     const std::string& tenant) {
  const Clock::time_point received = Clock::now();
  if (ctx.stopping->load()) return SendError(res, ShuttingDown(), dialect);
  auto state = std::make_shared<StreamState>(ctx.in_flight, ctx.metrics);
  RequestContext request_ctx{
      .tenant = tenant, .header_agent_id = {}, .model = ctx.backend->model()};
  if (req.has_header("X-Agent-Id")) {
    request_ctx.header_agent_id = req.get_header_value("X-Agent-Id");
  }
  Result<ParsedRequest> parsed = parse(body, request_ctx);
  if (!parsed.ok()) return SendStatus(res, parsed.status(), dialect);
  const char* prompt_field = !parsed->prompt_field.empty() ? parsed->prompt_field.c_str()
                             : parsed->generation.prompt   ? "prompt"
                                                           : "messages";

  ClientConnection& client = state->client;
  client = ClientConnection::Find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  const std::atomic<bool>* stopping = ctx.stopping;
  const Admission::Outcome admitted = ctx.admission->Enter(
      tenant, parsed->generation.agent.id, [&] { return stopping->load() || client.Gone(); },
      &state->ticket);
  if (admitted == Admission::Outcome::kFull) {
    const AdmissionLimits& limits = ctx.admission->limits();
    return SendError(res,
                     {ApiErrorKind::kQueueFull,
                      "server is at its limit of " + std::to_string(limits.max_running) +
                          " running and " + std::to_string(limits.max_queue) +
                          " queued generation requests; retry later"},
                     dialect);
  }
  if (admitted == Admission::Outcome::kLeft) {
    return stopping->load() ? SendError(res, ShuttingDown(), dialect) : ClientClosed(res, dialect);
  }

  if (!parsed->stream) {
    CollectingSink sink(received, ctx.cancel_all, &client);
    Result<GenerationResult> result = ctx.backend->Generate(parsed->generation, &sink);
    const GenerationTiming timing = sink.Finish();
    if (!result.ok()) {
      return SendError(res, GenerationError(result.status(), prompt_field), dialect);
    }
    ctx.metrics->RecordGeneration(*result, timing);
    SetDivergenceHeader(sink.prompt().divergence, res);
    if (result->finish_reason == FinishReason::kCancelled) {
      if (stopping->load()) return SendError(res, ShuttingDown(), dialect);
      if (client.Gone()) return ClientClosed(res, dialect);
    }
    SendJson(res, parsed->reply->CompleteChoices(sink.prompt(), sink.TakeChoices(), *result));
    return;
  }

  state->reply = std::move(parsed->reply);
  state->stream = std::make_unique<GenerationStream>(ctx.backend, std::move(parsed->generation),
                                                     received, ctx.cancel_all, &state->client);
  if (!state->stream->WaitForStart()) {
    return SendError(res, GenerationError(state->stream->result().status(), prompt_field), dialect);
  }
  res.status = 200;
  SetDivergenceHeader(state->stream->prompt().divergence, res);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // reverse proxies: do not buffer the stream
  // The provider owns the state: the library destroys it with the response, after the last
  // write or when the connection failed before the first.
  res.set_chunked_content_provider("text/event-stream",
                                   [state, stopping](size_t, httplib::DataSink& sink) {
                                     return WriteStream(*state, *stopping, sink);
                                   });
}

}  // namespace kvmem::serve
