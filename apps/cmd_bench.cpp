// `kvmem bench`: llama-bench-like speed of plain inference (eval/bench_runner.h), each result set
// against the machine's roofline measured in the same run (eval/roofline.h). Results go to stdout
// (a markdown table, or JSON lines with --json); progress to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "CLI/CLI.hpp"
#include "common.h"
#include "commands.h"
#include "eval/bench_runner.h"
#include "eval/roofline.h"
#include "kv/kv_format.h"

namespace kvmem::app {
namespace {

struct BenchCliOptions {
  std::string model;
  std::string threads = "1,2";
  std::string tests;  // empty: eval::DefaultBenchTests
  std::string reps = "5";
  std::string ubatch = "512";
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  bool json = false;
};

constexpr double kMiB = 1024.0 * 1024.0;

std::string Basename(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string RooflineLine(const std::vector<eval::Roofline>& roofs) {
  std::string line = "roofline (measured):";
  for (const eval::Roofline& r : roofs) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), " %s%d thread%s: read %.1f GB/s, fp32 FMA %.1f GFLOP/s (%s)",
                  &r == &roofs.front() ? "" : "|", r.threads, r.threads == 1 ? "" : "s",
                  r.bandwidth_gbps, r.fma_peak_gflops, r.fma_isa);
    line += buf;
  }
  return line;
}

std::string TestLabel(const eval::BenchTest& t, bool beyond_training_context) {
  return t.name() + (beyond_training_context ? " (beyond training context)" : "");
}

// A markdown table printed row by row as results come; widths are fixed by the header.
class TablePrinter {
 public:
  TablePrinter(std::string model, double size_mib, int test_width)
      : model_(std::move(model)),
        size_mib_(size_mib),
        columns_{{"model", std::max<int>(5, static_cast<int>(model_.size())), false},
                 {"size MiB", 8, true},
                 {"threads", 7, true},
                 {"test", test_width, false},
                 {"t/s (± half range)", 20, true},
                 {"min t/s", 9, true},
                 {"max t/s", 9, true},
                 {"achieved", 15, true},
                 {"roofline", 8, true}} {}

  void Header(const std::vector<eval::Roofline>& roofs) const {
    std::printf("%s\n\n", RooflineLine(roofs).c_str());
    std::vector<std::string> names, rules;
    for (const Column& c : columns_) {
      names.push_back(c.name);
      rules.push_back(std::string(c.width - (c.right ? 1 : 0), '-') + (c.right ? ":" : ""));
    }
    Print(names);
    Print(rules);
    std::fflush(stdout);
  }

  void Row(const eval::BenchRow& r) const {
    const eval::RepStats& t = r.tokens_per_second;
    const bool pp = r.test.kind == eval::BenchTest::Kind::kPrompt;
    Print({model_, Format("%.1f", size_mib_), std::to_string(r.threads),
           TestLabel(r.test, r.beyond_training_context),
           Format("%.2f ± %.2f", t.median, (t.max - t.min) / 2), Format("%.2f", t.min),
           Format("%.2f", t.max), Format(pp ? "%.1f GFLOP/s" : "%.1f GB/s", r.achieved()),
           Format("%.1f %%", 100.0 * r.roofline_fraction())});
    std::fflush(stdout);
  }

 private:
  struct Column {
    const char* name;
    int width;
    bool right;
  };

  template <typename... Args>
  static std::string Format(const char* fmt, Args... args) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), fmt, args...);
    return buf;
  }
  // Pads to the column's width in characters (UTF-8: "±" is one).
  void Print(const std::vector<std::string>& cells) const {
    std::string line = "|";
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string& s = cells[i];
      const int chars = static_cast<int>(
          std::count_if(s.begin(), s.end(), [](char ch) { return (ch & 0xC0) != 0x80; }));
      const std::string pad(std::max(0, columns_[i].width - chars), ' ');
      line += " " + (columns_[i].right ? pad + s : s + pad) + " |";
    }
    std::printf("%s\n", line.c_str());
  }

  std::string model_;
  double size_mib_;
  std::vector<Column> columns_;
};

void PrintJson(const eval::BenchRow& r, const std::string& model) {
  const bool pp = r.test.kind == eval::BenchTest::Kind::kPrompt;
  nlohmann::ordered_json j = {{"model", model},
                              {"test", r.test.name()},
                              {"threads", r.threads},
                              {"tokens_per_second", r.tokens_per_second.median},
                              {"min", r.tokens_per_second.min},
                              {"max", r.tokens_per_second.max},
                              {"reps", r.reps},
                              {pp ? "gflops" : "gbps", r.achieved()},
                              {"roofline_fraction", r.roofline_fraction()},
                              {"bandwidth_gbps", r.roofline.bandwidth_gbps},
                              {"fma_peak_gflops", r.roofline.fma_peak_gflops},
                              {"beyond_training_context", r.beyond_training_context}};
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

int Run(const BenchCliOptions& c) {
  eval::BenchOptions o;
  auto threads = eval::ParseThreadCounts(c.threads);
  if (!threads.ok()) return Fail(threads.status());
  o.threads = *threads;
  auto reps = eval::ParsePositiveInt(c.reps, "--reps", 1000);
  if (!reps.ok()) return Fail(reps.status());
  o.reps = *reps;
  auto ubatch = eval::ParsePositiveInt(c.ubatch, "--ubatch", 1 << 16);
  if (!ubatch.ok()) return Fail(ubatch.status());
  o.ubatch = *ubatch;
  auto fk = kv::ParseKvFormat(c.cache_type_k);
  if (!fk.ok()) return Fail(fk.status().WithContext("--ctk"));
  auto fv = kv::ParseKvFormat(c.cache_type_v);
  if (!fv.ok()) return Fail(fv.status().WithContext("--ctv"));
  o.formats = {*fk, *fv};
  if (!c.tests.empty()) {
    auto tests = eval::ParseBenchTests(c.tests);
    if (!tests.ok()) return Fail(tests.status().WithContext("--tests"));
    o.tests = *tests;
  }

  auto model = LoadModel(c.model);
  if (!model.ok()) return Fail(model.status());
  const model::Model& m = **model;
  if (o.tests.empty()) o.tests = eval::DefaultBenchTests(m.spec());
  // RunBench checks these too; here they fail before a second of roofline measurement.
  Status st = eval::CheckBenchTests(o.tests, m.spec());
  if (st.ok()) st = kv::CheckKvFormats(o.formats, m.spec().head_dim_k, m.spec().head_dim_v);
  if (!st.ok()) return Fail(st);

  const std::string name = Basename(c.model.empty() ? DefaultModelPath() : c.model);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<eval::Roofline> roofs =
      eval::MeasureRooflines(o.threads, eval::RooflineBufferBytes(m.weight_bytes()));
  std::fprintf(stderr, "kvmem bench: roofline measured in %.1f s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (c.json) {
    st = eval::RunBench(m, o, roofs, [&](const eval::BenchRow& r) { PrintJson(r, name); });
  } else {
    int test_width = 4;
    for (const eval::BenchTest& t : o.tests) {
      const std::string label = TestLabel(t, eval::BeyondTrainingContext(t, m.spec()));
      test_width = std::max<int>(test_width, static_cast<int>(label.size()));
    }
    TablePrinter table(name, m.weight_bytes() / kMiB, test_width);
    table.Header(roofs);
    st = eval::RunBench(m, o, roofs, [&](const eval::BenchRow& r) { table.Row(r); });
  }
  return st.ok() ? 0 : Fail(st);
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto o = std::make_shared<BenchCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Speed of plain inference (llama-bench's pp/tg tests) against a measured roofline");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  cmd->add_option("-t,--threads", o->threads,
                  "thread counts, comma-separated; each test runs with each")
      ->capture_default_str();
  cmd->add_option(
      "--tests", o->tests,
      "comma-separated ppN (prompt of N tokens), tgN (N generated tokens), tgN@dD "
      "(after D tokens of context), ppN@dD (default: pp128,pp512,pp2048,tg128,tg128@d1024,"
      "tg128@d4096,tg128@d16384, the last at most the training context)");
  cmd->add_option("-r,--reps", o->reps, "timed repetitions of each test")->capture_default_str();
  cmd->add_flag("--json", o->json, "one JSON object per line instead of a table");
  cmd->add_option("--ctk,--cache-type-k", o->cache_type_k,
                  "KV cache format of keys: " + kv::KvFormatNames())
      ->capture_default_str();
  cmd->add_option("--ctv,--cache-type-v", o->cache_type_v, "KV cache format of values")
      ->capture_default_str();
  cmd->add_option("--ubatch", o->ubatch, "micro-batch of prompt processing, in tokens")
      ->capture_default_str();
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
