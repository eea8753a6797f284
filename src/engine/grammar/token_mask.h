// The set of tokens a grammar allows next: one bit per vocabulary id.
// Not thread-safe for writes; a filled mask may be read from any thread.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace kvmem::engine::grammar {

class TokenMask {
 public:
  // All `n_vocab` bits cleared.
  void Reset(int32_t n_vocab) {
    n_ = n_vocab;
    words_.assign((static_cast<size_t>(n_vocab) + 63) / 64, 0);
  }
  void Set(int32_t id) { words_[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
  bool Test(int32_t id) const { return (words_[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
  int32_t size() const { return n_; }
  int32_t Count() const {
    int32_t c = 0;
    for (uint64_t w : words_) c += std::popcount(w);
    return c;
  }
  std::span<const uint64_t> words() const { return words_; }

  // Sets the logits of tokens not in the mask to -infinity. logits.size() may exceed size()
  // (padded vocabularies): the ids past it are masked too.
  void Apply(std::span<float> logits) const {
    const float ninf = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < logits.size(); ++i) {
      if (i >= static_cast<size_t>(n_) || !Test(static_cast<int32_t>(i))) logits[i] = ninf;
    }
  }

 private:
  int32_t n_ = 0;
  std::vector<uint64_t> words_;
};

}  // namespace kvmem::engine::grammar
