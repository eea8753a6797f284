// Progress of the long evaluation harnesses on stderr, with an ETA that holds for long contexts.
// Not thread-safe.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "model/model_spec.h"

namespace kvmem::eval {

// Forward-pass work of the first p positions of a window, in multiply-adds, to turn token rows
// into an ETA that holds at 8K: weights cost the same per token, attention grows with the
// position (token i reads i + 1 rows).
class WorkModel {
 public:
  explicit WorkModel(const model::ModelSpec& s)
      : per_token_(static_cast<double>(s.n_layers) *
                       (static_cast<double>(s.n_embd) * (s.q_dim() + s.k_dim() + s.v_dim()) +
                        static_cast<double>(s.n_heads) * s.head_dim_v * s.n_embd +
                        static_cast<double>(s.ffn_params_per_token())) +
                   static_cast<double>(s.n_vocab) * s.n_embd),
        per_row_(static_cast<double>(s.n_layers) * s.n_heads * (s.head_dim_k + s.head_dim_v)) {}

  double Positions(double p) const { return p * per_token_ + per_row_ * p * (p + 1) / 2; }

 private:
  double per_token_;
  double per_row_;
};

// Token rows done / total, elapsed and ETA (from WorkModel units) on stderr: rewritten in place
// on a terminal, a line every 30 s otherwise (logs).
class ProgressLine {
 public:
  ProgressLine(std::string label, int64_t total_rows, double total_work)
      : label_(std::move(label)),
        total_rows_(total_rows),
        total_work_(total_work),
        tty_(isatty(STDERR_FILENO) != 0),
        start_(Clock::now()),
        last_(start_) {}

  void Update(int64_t rows, double work, const std::string& what) {
    const auto now = Clock::now();
    if (!tty_ && now - last_ < std::chrono::seconds(30) && rows < total_rows_) return;
    last_ = now;
    const double s = Seconds();
    const double eta = work > 0 ? s * std::max(0.0, total_work_ - work) / work : 0.0;
    std::fprintf(stderr, "%s%s: %s | %lld/%lld token rows | %.0f s | ETA %.0f s%s",
                 tty_ ? "\r\033[K" : "", label_.c_str(), what.c_str(), static_cast<long long>(rows),
                 static_cast<long long>(total_rows_), s, eta, tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  // The same for work counted in equal steps (questions, turns): done/total, ETA linear in steps.
  void Steps(int64_t done, int64_t total, const std::string& what) {
    const auto now = Clock::now();
    if (!tty_ && now - last_ < std::chrono::seconds(30) && done < total) return;
    last_ = now;
    const double s = Seconds();
    const double eta =
        done > 0 ? s * static_cast<double>(std::max<int64_t>(0, total - done)) / done : 0.0;
    std::fprintf(stderr, "%s%s: %s | %lld/%lld steps | %.0f s | ETA %.0f s%s",
                 tty_ ? "\r\033[K" : "", label_.c_str(), what.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), s, eta, tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  void Finish() {
    if (tty_) std::fputc('\n', stderr);
  }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  int64_t total_rows_;
  double total_work_;
  bool tty_;
  Clock::time_point start_, last_;
};

}  // namespace kvmem::eval
