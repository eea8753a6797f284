// Server metrics in the Prometheus text exposition format (version 0.0.4), scraped from
// GET /metrics:
//   kvmem_http_requests_total{endpoint,status}       counter  every HTTP request, by route
//   kvmem_prompt_tokens_total                        counter  prompt tokens, cached included
//   kvmem_prompt_tokens_cached_total                 counter  prompt tokens reused from caches
//   kvmem_generation_tokens_total                    counter  generated tokens
//   kvmem_agent_cache_lookups_total{tier}            counter  where each generation's reused
//                                                             prefix came from: hot, warm,
//                                                             cold, miss
//   kvmem_generations_finished_total{reason}         counter  end_turn, stop_sequence, length,
//                                                             cancelled
//   kvmem_time_to_first_token_seconds                histogram request received → first text
//   kvmem_time_per_output_token_seconds              histogram per request: (last text − first
//                                                             text) / (completion tokens − 1)
//   kvmem_generation_duration_seconds                histogram request received → generation end
//   kvmem_requests_running                           gauge    generation requests running
//   kvmem_requests_queued                            gauge    waiting for a running place
//   kvmem_requests_refused_total                     counter  refused: running and queue full
//   kvmem_requests_in_flight                         gauge    running + queued
//   kvmem_turns_waiting, kvmem_store_bytes, kvmem_hot_cache_bytes, kvmem_agents{state}
//                                                    gauges   from Backend::stats() at scrape time
//   kvmem_prefix_cache_hit_tokens_total, kvmem_prefix_cache_lookup_tokens_total,
//   kvmem_prefix_cache_evictions_total               counters the prefix cache of requests
//   kvmem_prefix_cache_bytes                         gauge    without an agent, at scrape time
// Thread-safe: all methods may be called concurrently.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serve/admission.h"
#include "serve/api_types.h"
#include "serve/http_front.h"

namespace kvmem::serve {

// A Prometheus histogram: fixed, increasing upper bounds plus +Inf.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // Appends the `name`_bucket{le=…} lines (cumulative counts), `name`_sum and `name`_count.
  void Render(std::string_view name, std::string* out) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Timings of one generation, seconds since the request was received.
struct GenerationTiming {
  double first_text_s = -1;  // < 0: no text was produced
  double last_text_s = -1;
  double end_s = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // `endpoint` is a route pattern ("/v1/agents/{id}"), never a raw path, so label values stay
  // few whatever clients send.
  void CountRequest(std::string_view endpoint, int http_status);
  void RecordGeneration(const GenerationResult& result, const GenerationTiming& timing);

  std::string Render(const BackendStats& backend, const AdmissionCounts& admission,
                     int64_t in_flight, const FrontCounts& connections = {}) const;

 private:
  mutable std::mutex requests_mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::atomic<uint64_t> prompt_tokens_{0};
  std::atomic<uint64_t> cached_tokens_{0};
  std::atomic<uint64_t> generated_tokens_{0};
  std::array<std::atomic<uint64_t>, 4> lookups_by_tier_{};     // indexed by Tier
  std::array<std::atomic<uint64_t>, 4> finished_by_reason_{};  // indexed by FinishReason
  Histogram ttft_;
  Histogram tpot_;
  Histogram duration_;
};

// A Prometheus label value with \, " and newline escaped.
std::string EscapeLabelValue(std::string_view value);

}  // namespace kvmem::serve
