#include "serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kvmem::serve {
namespace {

// Integers as integers, other values as the shortest decimal that reads back exactly, as
// Prometheus clients print them.
std::string FormatDouble(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void Header(std::string_view name, std::string_view type, std::string_view help, std::string* out) {
  out->append("# HELP ").append(name).append(" ").append(help).append("\n");
  out->append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void Sample(std::string_view name, std::string_view labels, double value, std::string* out) {
  out->append(name);
  if (!labels.empty()) out->append("{").append(labels).append("}");
  out->append(" ").append(FormatDouble(value)).append("\n");
}

void Scalar(std::string_view name, std::string_view type, std::string_view help, double value,
            std::string* out) {
  Header(name, type, help, out);
  Sample(name, "", value, out);
}

// Latency buckets: TTFT spans queueing behind other requests of the agent and a long
// prefill; per-token times are milliseconds on a CPU.
const std::vector<double> kTtftBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                          2.5,  5,     10,   20,  40,   80};
const std::vector<double> kTpotBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04,
                                          0.08,  0.15,   0.3,   0.6,  1.2};
const std::vector<double> kDurationBuckets = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320};

constexpr Tier kTiers[] = {Tier::kMiss, Tier::kHot, Tier::kWarm,
                                Tier::kCold};
constexpr FinishReason kReasons[] = {FinishReason::kEndOfTurn, FinishReason::kStopSequence,
                                     FinishReason::kLength, FinishReason::kCancelled};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();  // le: <=
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::Render(std::string_view name, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? FormatDouble(bounds_[i]) : "+Inf";
    Sample(bucket, "le=\"" + le + "\"", static_cast<double>(cumulative), out);
  }
  Sample(std::string(name) + "_sum", "", sum_, out);
  Sample(std::string(name) + "_count", "", static_cast<double>(count_), out);
}

ServerMetrics::ServerMetrics()
    : ttft_(kTtftBuckets), tpot_(kTpotBuckets), duration_(kDurationBuckets) {}

void ServerMetrics::CountRequest(std::string_view endpoint, int http_status) {
  std::lock_guard<std::mutex> lock(requests_mu_);
  ++requests_[{std::string(endpoint), http_status}];
}

void ServerMetrics::RecordGeneration(const GenerationResult& result,
                                     const GenerationTiming& timing) {
  const Usage& u = result.usage;
  prompt_tokens_ += static_cast<uint64_t>(std::max<int64_t>(u.prompt_tokens, 0));
  cached_tokens_ += static_cast<uint64_t>(std::max<int64_t>(u.cached_tokens, 0));
  generated_tokens_ += static_cast<uint64_t>(std::max<int64_t>(u.completion_tokens, 0));
  ++lookups_by_tier_[static_cast<size_t>(result.tier)];
  // Backends report the four engine-side reasons; kToolCalls is the reply's reading of one.
  const size_t reason = static_cast<size_t>(result.finish_reason);
  if (reason < finished_by_reason_.size()) ++finished_by_reason_[reason];
  if (timing.first_text_s >= 0) {
    ttft_.Observe(timing.first_text_s);
    if (u.completion_tokens > 1 && timing.last_text_s > timing.first_text_s) {
      tpot_.Observe((timing.last_text_s - timing.first_text_s) /
                    static_cast<double>(u.completion_tokens - 1));
    }
  }
  duration_.Observe(timing.end_s);
}

namespace {

// The batched forward steps (engine/step_batcher.h): how many, how full, how long.
void RenderSteps(const engine::StepStats& s, std::string* out) {
  Scalar("kvmem_batch_steps_total", "counter",
         "Forward steps, each one pass over every decoding sequence and a prompt chunk.",
         static_cast<double>(s.steps), out);
  Scalar("kvmem_batch_tokens_total", "counter", "Tokens through the forward steps.",
         static_cast<double>(s.tokens), out);
  Scalar("kvmem_batch_decode_tokens_total", "counter",
         "Decode tokens through the forward steps (the rest are prompt chunks).",
         static_cast<double>(s.decode_tokens), out);
  Scalar("kvmem_batch_step_seconds_total", "counter", "Time spent in forward steps.",
         s.step_seconds, out);
  Scalar("kvmem_batch_waiting", "gauge", "Forward calls waiting for a step now.",
         static_cast<double>(s.waiting), out);
  Header("kvmem_batch_sequences", "histogram", "Sequences per forward step.", out);
  int64_t cumulative = 0;
  for (size_t i = 0; i < s.steps_by_sequences.size(); ++i) {
    cumulative += s.steps_by_sequences[i];
    const bool last = i + 1 == s.steps_by_sequences.size();
    Sample("kvmem_batch_sequences_bucket",
           "le=\"" + (last ? std::string("+Inf") : std::to_string(s.kBucketMax[i])) + "\"",
           static_cast<double>(cumulative), out);
  }
  Sample("kvmem_batch_sequences_sum", "", static_cast<double>(s.sequences), out);
  Sample("kvmem_batch_sequences_count", "", static_cast<double>(s.steps), out);
}

}  // namespace

std::string ServerMetrics::Render(const BackendStats& backend, const AdmissionCounts& admission,
                                  int64_t in_flight, const FrontCounts& connections) const {
  std::string out;
  Header("kvmem_http_requests_total", "counter", "HTTP requests by route and status code.", &out);
  {
    std::lock_guard<std::mutex> lock(requests_mu_);
    for (const auto& [key, count] : requests_) {
      Sample("kvmem_http_requests_total",
             "endpoint=\"" + EscapeLabelValue(key.first) + "\",status=\"" +
                 std::to_string(key.second) + "\"",
             static_cast<double>(count), &out);
    }
  }
  Scalar("kvmem_prompt_tokens_total", "counter", "Prompt tokens, cached ones included.",
         static_cast<double>(prompt_tokens_.load()), &out);
  Scalar("kvmem_prompt_tokens_cached_total", "counter",
         "Prompt tokens reused from agents' KV caches instead of prefilled.",
         static_cast<double>(cached_tokens_.load()), &out);
  Scalar("kvmem_generation_tokens_total", "counter", "Generated tokens.",
         static_cast<double>(generated_tokens_.load()), &out);

  Header("kvmem_agent_cache_lookups_total", "counter",
         "Generations by where the agent's reused prefix came from (miss: nothing reused).", &out);
  for (Tier tier : kTiers) {
    Sample("kvmem_agent_cache_lookups_total", std::string("tier=\"") + TierName(tier) + "\"",
           static_cast<double>(lookups_by_tier_[static_cast<size_t>(tier)].load()), &out);
  }
  Header("kvmem_generations_finished_total", "counter", "Generations by finish reason.", &out);
  for (FinishReason reason : kReasons) {
    Sample("kvmem_generations_finished_total",
           std::string("reason=\"") + FinishReasonName(reason) + "\"",
           static_cast<double>(finished_by_reason_[static_cast<size_t>(reason)].load()), &out);
  }

  Header("kvmem_time_to_first_token_seconds", "histogram",
         "Time from receiving a generation request to its first text.", &out);
  ttft_.Render("kvmem_time_to_first_token_seconds", &out);
  Header("kvmem_time_per_output_token_seconds", "histogram",
         "Mean time between output tokens of a generation, after the first.", &out);
  tpot_.Render("kvmem_time_per_output_token_seconds", &out);
  Header("kvmem_generation_duration_seconds", "histogram",
         "Time from receiving a generation request to the end of its generation.", &out);
  duration_.Render("kvmem_generation_duration_seconds", &out);

  Scalar("kvmem_requests_running", "gauge", "Generation requests running (at most --max-running).",
         static_cast<double>(admission.running), &out);
  Scalar("kvmem_requests_queued", "gauge",
         "Generation requests waiting for a running place (at most --max-queue).",
         static_cast<double>(admission.queued), &out);
  Scalar("kvmem_requests_refused_total", "counter",
         "Generation requests refused (429/529) because running and queued were full.",
         static_cast<double>(admission.refused), &out);
  Scalar("kvmem_requests_in_flight", "gauge", "Generation requests running or queued.",
         static_cast<double>(in_flight), &out);
  Scalar("kvmem_http_connections_open", "gauge", "Client connections open (http_front.h).",
         static_cast<double>(connections.open), &out);
  Scalar("kvmem_http_connections_refused_client_limit_total", "counter",
         "Connections refused (503) beyond --max-client-connections from one address.",
         static_cast<double>(connections.refused_client_limit), &out);
  Scalar("kvmem_http_requests_refused_busy_total", "counter",
         "Requests refused (503) with every HTTP thread taken and --accept-queue waiting.",
         static_cast<double>(connections.refused_busy), &out);
  Scalar("kvmem_http_requests_timed_out_total", "counter",
         "Requests not in full within --request-timeout (408).",
         static_cast<double>(connections.timed_out), &out);
  Scalar("kvmem_turns_waiting", "gauge",
         "Running requests waiting inside the backend for their agent or a batch slot.",
         static_cast<double>(backend.queued_requests), &out);
  Scalar("kvmem_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens of requests without an agent read from the prefix cache.",
         static_cast<double>(backend.prefix_cache_hit_tokens), &out);
  Scalar("kvmem_prefix_cache_lookup_tokens_total", "counter",
         "Prompt tokens of requests without an agent looked up in the prefix cache.",
         static_cast<double>(backend.prefix_cache_lookup_tokens), &out);
  Scalar("kvmem_prefix_cache_bytes", "gauge", "KV bytes of the pool blocks the prefix cache holds.",
         static_cast<double>(backend.prefix_cache_bytes), &out);
  Scalar("kvmem_prefix_cache_evictions_total", "counter",
         "Cached prefixes (radix tree leaves) evicted from the prefix cache.",
         static_cast<double>(backend.prefix_cache_evictions), &out);
  Scalar("kvmem_store_bytes", "gauge", "Bytes of agents' KV caches in the persistent store.",
         static_cast<double>(backend.store_bytes), &out);
  Scalar("kvmem_hot_cache_bytes", "gauge", "Bytes of agents' KV rows resident in memory.",
         static_cast<double>(backend.hot_bytes), &out);
  Header("kvmem_agents", "gauge",
         "Agents with their cache resident in memory (hot) or in the store (stored).", &out);
  Sample("kvmem_agents", "state=\"hot\"", static_cast<double>(backend.agents_hot), &out);
  Sample("kvmem_agents", "state=\"stored\"", static_cast<double>(backend.agents_stored), &out);
  RenderSteps(backend.steps, &out);
  return out;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace kvmem::serve
