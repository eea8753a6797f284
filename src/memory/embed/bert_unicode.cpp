#include "memory/embed/bert_unicode.h"

#include <algorithm>

namespace kvmem::memory::embed {
namespace {

// Hangul syllable decomposition (Unicode ch. 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = 11172;

// Index of the triple whose first element is cp in a sorted triple table, or -1.
ptrdiff_t FindTriple(const uint32_t* table, size_t size, uint32_t cp) {
  size_t lo = 0, hi = size / 3;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (table[3 * mid] < cp) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < size / 3 && table[3 * lo] == cp) return static_cast<ptrdiff_t>(3 * lo);
  return -1;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const ptrdiff_t i = FindTriple(internal::kDecomp, internal::kDecompSize, cp);
  if (i < 0) {
    out->push_back(cp);
    return;
  }
  // One canonical step is at most two code points; only the first can decompose further
  // (Unicode's normalization stability rules), but recursing on both costs nothing.
  Decompose(internal::kDecomp[i + 1], out);
  if (internal::kDecomp[i + 2] != 0) Decompose(internal::kDecomp[i + 2], out);
}

// Whether cp lies in one of the sorted (first, last) pairs of `pairs` (size = 2 * pair count).
bool InRanges(const uint32_t* pairs, size_t size, uint32_t cp) {
  size_t lo = 0, hi = size / 2;  // the first pair whose last >= cp
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (pairs[2 * mid + 1] < cp) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < size / 2 && pairs[2 * lo] <= cp;
}

}  // namespace

uint8_t CombiningClass(uint32_t cp) {
  if (cp > 0x10FFFF) return 0;
  const uint32_t* end = internal::kCccRanges + internal::kCccRangesSize;
  // The last range whose first code point is <= cp.
  const uint32_t* it =
      std::upper_bound(internal::kCccRanges, end, cp,
                       [](uint32_t c, uint32_t entry) { return c < (entry & 0xFFFFFF); });
  if (it == internal::kCccRanges) return 0;
  return static_cast<uint8_t>(*(it - 1) >> 24);
}

void AppendNfd(const uint32_t* first, const uint32_t* last, std::vector<uint32_t>* out) {
  const size_t start = out->size();
  for (const uint32_t* p = first; p != last; ++p) Decompose(*p, out);
  // Canonical ordering: stable sort of each maximal run of non-starters by combining class.
  auto it = out->begin() + static_cast<ptrdiff_t>(start);
  while (it != out->end()) {
    if (CombiningClass(*it) == 0) {
      ++it;
      continue;
    }
    auto run_end = it;
    while (run_end != out->end() && CombiningClass(*run_end) != 0) ++run_end;
    std::stable_sort(it, run_end,
                     [](uint32_t a, uint32_t b) { return CombiningClass(a) < CombiningClass(b); });
    it = run_end;
  }
}

bool IsNonspacingMark(uint32_t cp) {
  if (cp < 0x300) return false;  // fast path: nothing below U+0300 is Mn
  return InRanges(internal::kMnRanges, internal::kMnRangesSize, cp);
}

bool IsControlFormatOrPrivate(uint32_t cp) {
  return InRanges(internal::kOtherRanges, internal::kOtherRangesSize, cp);
}

bool IsPunctuationCategory(uint32_t cp) {
  return InRanges(internal::kPunctRanges, internal::kPunctRangesSize, cp);
}

void AppendLowercase(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp < 0x80) {
    out->push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  const ptrdiff_t i = FindTriple(internal::kLower, internal::kLowerSize, cp);
  if (i < 0) {
    out->push_back(cp);
    return;
  }
  out->push_back(internal::kLower[i + 1]);
  if (internal::kLower[i + 2] != 0) out->push_back(internal::kLower[i + 2]);
}

// Hugging Face's ranges: Google BERT's, except that the block after Extension D starts at
// U+2B920 (BERT: U+2B820).
bool IsCjkIdeograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace kvmem::memory::embed
