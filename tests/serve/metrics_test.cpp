// The Prometheus exposition: parsed back line by line as a scraper would, checking names,
// HELP/TYPE before samples, label syntax, and cumulative histogram buckets.
#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kvmem::serve {
namespace {

struct PromSample {
  std::string name;
  std::string labels;  // inside the braces, as written
  double value;
};

struct Exposition {
  std::map<std::string, std::string> type;  // family -> counter/gauge/histogram
  std::vector<PromSample> samples;
  double Value(const std::string& name, const std::string& labels = "") const {
    for (const PromSample& s : samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    ADD_FAILURE() << "no sample " << name << "{" << labels << "}";
    return NAN;
  }
};

// The family a sample belongs to: histogram samples carry _bucket/_sum/_count suffixes.
std::string FamilyOf(const std::string& name, const std::map<std::string, std::string>& type) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.ends_with(s)) {
      const std::string base = name.substr(0, name.size() - s.size());
      auto it = type.find(base);
      if (it != type.end() && it->second == "histogram") return base;
    }
  }
  return name;
}

bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// The metric name at the start of `s`; empty if `s` does not start with one.
std::string_view TakeName(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && IsNameChar(s[n], n == 0)) ++n;
  return s.substr(0, n);
}

// `labels` (the text between braces) as name="value" pairs separated by commas, values with
// \\, \" and \n escapes only.
bool ValidLabels(std::string_view labels) {
  size_t i = 0;
  while (i < labels.size()) {
    const std::string_view name = TakeName(labels.substr(i));
    if (name.empty() || name.find(':') != std::string_view::npos) return false;
    i += name.size();
    if (labels.substr(i, 2) != "=\"") return false;
    i += 2;
    for (;; ++i) {
      if (i >= labels.size()) return false;
      if (labels[i] == '\\') {
        if (i + 1 >= labels.size() ||
            std::string_view("\\\"n").find(labels[i + 1]) == std::string_view::npos) {
          return false;
        }
        ++i;
      } else if (labels[i] == '"') {
        ++i;
        break;
      }
    }
    if (i < labels.size() && labels[i++] != ',') return false;
  }
  return true;
}

Exposition ParseExposition(const std::string& text) {
  Exposition e;
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  EXPECT_TRUE(text.ends_with("\n"));
  while (std::getline(in, line)) {
    std::string_view l = line;
    if (l.starts_with("# HELP ")) {
      const std::string name(TakeName(l.substr(7)));
      EXPECT_FALSE(name.empty()) << line;
      EXPECT_GT(l.size(), 7 + name.size() + 1) << "empty HELP: " << line;
      EXPECT_TRUE(helped.insert(name).second) << "second HELP for " << name;
    } else if (l.starts_with("# TYPE ")) {
      const std::string name(TakeName(l.substr(7)));
      const std::string type(l.substr(7 + name.size() + 1));
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      EXPECT_TRUE(helped.count(name)) << "TYPE before HELP for " << name;
      EXPECT_TRUE(e.type.emplace(name, type).second) << "second TYPE for " << name;
    } else {
      const std::string name(TakeName(l));
      if (name.empty()) {
        ADD_FAILURE() << "unparsable line: " << line;
        continue;
      }
      l.remove_prefix(name.size());
      std::string labels;
      if (l.starts_with("{")) {
        const size_t close = l.rfind('}');
        if (close == std::string_view::npos) {
          ADD_FAILURE() << "unclosed labels: " << line;
          continue;
        }
        labels = l.substr(1, close - 1);
        EXPECT_TRUE(ValidLabels(labels)) << line;
        l.remove_prefix(close + 1);
      }
      if (!l.starts_with(" ")) {
        ADD_FAILURE() << "no value: " << line;
        continue;
      }
      const std::string value(l.substr(1));
      size_t used = 0;
      const double v = value == "+Inf" ? INFINITY : std::stod(value, &used);
      EXPECT_TRUE(value == "+Inf" || used == value.size()) << line;
      EXPECT_TRUE(e.type.count(FamilyOf(name, e.type))) << "sample before its TYPE: " << line;
      e.samples.push_back({name, labels, v});
    }
  }
  return e;
}

// Buckets of `name` in order, cumulative, ending in +Inf == _count.
void ExpectHistogram(const Exposition& e, const std::string& name, double expected_count) {
  double prev_le = -INFINITY, prev_count = 0;
  bool saw_inf = false;
  for (const PromSample& s : e.samples) {
    if (s.name != name + "_bucket") continue;
    ASSERT_TRUE(s.labels.starts_with("le=\"") && s.labels.ends_with("\"")) << s.labels;
    const std::string le_text = s.labels.substr(4, s.labels.size() - 5);
    const double le = le_text == "+Inf" ? INFINITY : std::stod(le_text);
    EXPECT_GT(le, prev_le) << name;
    EXPECT_GE(s.value, prev_count) << name << " buckets must be cumulative";
    prev_le = le;
    prev_count = s.value;
    saw_inf = std::isinf(le);
  }
  EXPECT_TRUE(saw_inf) << name;
  EXPECT_EQ(prev_count, e.Value(name + "_count")) << name;
  EXPECT_EQ(e.Value(name + "_count"), expected_count) << name;
}

TEST(Histogram, BucketsAreUpperInclusiveAndCumulative) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 1.0, 5.0, 50.0}) h.Observe(v);
  std::string out;
  h.Render("x", &out);
  double sum = 0;
  for (double v : {0.05, 0.1, 0.5, 1.0, 5.0, 50.0}) sum += v;
  EXPECT_EQ(out.substr(0, out.find("x_sum")),
            "x_bucket{le=\"0.1\"} 2\n"
            "x_bucket{le=\"1\"} 4\n"
            "x_bucket{le=\"10\"} 5\n"
            "x_bucket{le=\"+Inf\"} 6\n");
  EXPECT_NE(out.find("x_count 6\n"), std::string::npos);
  // The sum is printed with the fewest digits that read back exactly.
  const size_t at = out.find("x_sum ") + 6;
  EXPECT_EQ(std::stod(out.substr(at, out.find('\n', at) - at)), sum);
}

TEST(ServerMetrics, ExpositionParsesAndCounts) {
  ServerMetrics m;
  m.CountRequest("/v1/chat/completions", 200);
  m.CountRequest("/v1/chat/completions", 200);
  m.CountRequest("/v1/messages", 400);
  m.CountRequest("odd\"label\\\n", 404);
  GenerationResult r;
  r.usage = Usage{.prompt_tokens = 100, .cached_tokens = 60, .completion_tokens = 11};
  r.tier = Tier::kWarm;
  r.finish_reason = FinishReason::kLength;
  m.RecordGeneration(r, GenerationTiming{.first_text_s = 0.2, .last_text_s = 1.2, .end_s = 1.3});
  r.tier = Tier::kMiss;
  r.finish_reason = FinishReason::kEndOfTurn;
  m.RecordGeneration(r, GenerationTiming{.first_text_s = -1, .last_text_s = -1, .end_s = 0.5});

  BackendStats stats{.store_bytes = 1 << 20,
                           .hot_bytes = 4096,
                           .agents_hot = 2,
                           .agents_stored = 5,
                           .queued_requests = 3,
                           .steps = {}};
  // 10 steps: 4 of one sequence, 5 of two, 1 of five; 4 + 10 + 5 sequences.
  stats.steps.steps_by_sequences = {4, 5, 0, 1, 0, 0, 0};
  stats.steps.steps = 10;
  stats.steps.sequences = 19;
  stats.steps.tokens = 300;
  const Exposition e =
      ParseExposition(m.Render(stats, AdmissionCounts{.running = 4, .queued = 3, .refused = 9}, 7));
  EXPECT_EQ(e.type.at("kvmem_http_requests_total"), "counter");
  EXPECT_EQ(
      e.Value("kvmem_http_requests_total", "endpoint=\"/v1/chat/completions\",status=\"200\""), 2);
  EXPECT_EQ(e.Value("kvmem_http_requests_total", "endpoint=\"/v1/messages\",status=\"400\""), 1);
  EXPECT_EQ(e.Value("kvmem_http_requests_total", "endpoint=\"odd\\\"label\\\\\\n\",status=\"404\""),
            1);
  EXPECT_EQ(e.Value("kvmem_prompt_tokens_total"), 200);
  EXPECT_EQ(e.Value("kvmem_prompt_tokens_cached_total"), 120);
  EXPECT_EQ(e.Value("kvmem_generation_tokens_total"), 22);
  EXPECT_EQ(e.Value("kvmem_agent_cache_lookups_total", "tier=\"warm\""), 1);
  EXPECT_EQ(e.Value("kvmem_agent_cache_lookups_total", "tier=\"miss\""), 1);
  EXPECT_EQ(e.Value("kvmem_agent_cache_lookups_total", "tier=\"hot\""), 0);
  EXPECT_EQ(e.Value("kvmem_generations_finished_total", "reason=\"length\""), 1);
  EXPECT_EQ(e.type.at("kvmem_time_to_first_token_seconds"), "histogram");
  ExpectHistogram(e, "kvmem_time_to_first_token_seconds", 1);
  ExpectHistogram(e, "kvmem_time_per_output_token_seconds", 1);
  EXPECT_DOUBLE_EQ(e.Value("kvmem_time_per_output_token_seconds_sum"), 0.1);  // 1 s / 10
  ExpectHistogram(e, "kvmem_generation_duration_seconds", 2);
  EXPECT_EQ(e.Value("kvmem_time_to_first_token_seconds_bucket", "le=\"0.25\""), 1);
  EXPECT_EQ(e.Value("kvmem_time_to_first_token_seconds_bucket", "le=\"0.1\""), 0);
  EXPECT_EQ(e.type.at("kvmem_store_bytes"), "gauge");
  EXPECT_EQ(e.Value("kvmem_store_bytes"), 1 << 20);
  EXPECT_EQ(e.Value("kvmem_requests_in_flight"), 7);
  EXPECT_EQ(e.Value("kvmem_requests_running"), 4);
  EXPECT_EQ(e.Value("kvmem_requests_queued"), 3);
  EXPECT_EQ(e.type.at("kvmem_requests_refused_total"), "counter");
  EXPECT_EQ(e.Value("kvmem_requests_refused_total"), 9);
  EXPECT_EQ(e.Value("kvmem_turns_waiting"), 3);
  EXPECT_EQ(e.Value("kvmem_agents", "state=\"stored\""), 5);
  EXPECT_EQ(e.Value("kvmem_batch_steps_total"), 10);
  EXPECT_EQ(e.Value("kvmem_batch_tokens_total"), 300);
  ExpectHistogram(e, "kvmem_batch_sequences", 10);
  EXPECT_EQ(e.Value("kvmem_batch_sequences_bucket", "le=\"1\""), 4);
  EXPECT_EQ(e.Value("kvmem_batch_sequences_bucket", "le=\"4\""), 9);
  EXPECT_EQ(e.Value("kvmem_batch_sequences_bucket", "le=\"8\""), 10);
  EXPECT_EQ(e.Value("kvmem_batch_sequences_sum"), 19);
}

TEST(ServerMetrics, ConcurrentUpdates) {
  ServerMetrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m] {
      GenerationResult r;
      r.usage.completion_tokens = 2;
      for (int i = 0; i < 1000; ++i) {
        m.CountRequest("/v1/completions", 200);
        m.RecordGeneration(
            r, GenerationTiming{.first_text_s = 0.01, .last_text_s = 0.02, .end_s = 0.03});
      }
    });
  }
  for (auto& t : threads) t.join();
  const Exposition e = ParseExposition(m.Render({}, {}, 0));
  EXPECT_EQ(e.Value("kvmem_http_requests_total", "endpoint=\"/v1/completions\",status=\"200\""),
            4000);
  EXPECT_EQ(e.Value("kvmem_generation_tokens_total"), 8000);
  ExpectHistogram(e, "kvmem_time_to_first_token_seconds", 4000);
}

}  // namespace
}  // namespace kvmem::serve
