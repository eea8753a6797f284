#include "memory/embed/bert_unicode.h"

#include <algorithm>

namespace kvmem::memory::embed {
namespace {

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
