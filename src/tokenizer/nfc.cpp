#include "tokenizer/nfc.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "tokenizer/unicode.h"

namespace kvmem::tokenizer {
namespace {

// Hangul syllables decompose and compose by arithmetic (Unicode ch. 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An invalid UTF-8 byte travels as a value past U+10FFFF: no class, no mapping, a starter.
constexpr uint32_t kRawByteBase = 0x110000;

const internal::CanonicalDecomposition* FindDecomposition(uint32_t cp) {
  const auto* begin = internal::kCanonicalDecompositions;
  const auto* end = begin + internal::kNumCanonicalDecompositions;
  const auto* it = std::lower_bound(
      begin, end, cp,
      [](const internal::CanonicalDecomposition& d, uint32_t v) { return d.cp < v; });
  return it != end && it->cp == cp ? it : nullptr;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const internal::CanonicalDecomposition* d = FindDecomposition(cp);
  if (d == nullptr) {
    out->push_back(cp);
    return;
  }
  Decompose(d->first, out);
  if (d->second != 0) Decompose(d->second, out);
}

uint64_t PairKey(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

// The primary composite of starter + c, or 0.
uint32_t Compose(uint32_t starter, uint32_t c) {
  if (starter >= kLBase && starter < kLBase + kLCount && c >= kVBase && c < kVBase + kVCount) {
    return kSBase + ((starter - kLBase) * kVCount + (c - kVBase)) * kTCount;
  }
  if (starter >= kSBase && starter < kSBase + kSCount && (starter - kSBase) % kTCount == 0 &&
      c > kTBase && c < kTBase + kTCount) {
    return starter + (c - kTBase);
  }
  static const std::unordered_map<uint64_t, uint32_t> pairs = [] {
    std::unordered_map<uint64_t, uint32_t> m;
    for (size_t i = 0; i < internal::kNumCanonicalDecompositions; ++i) {
      const auto& d = internal::kCanonicalDecompositions[i];
      if (d.composes) m.emplace(PairKey(d.first, d.second), d.cp);
    }
    return m;
  }();
  auto it = pairs.find(PairKey(starter, c));
  return it == pairs.end() ? 0 : it->second;
}

// Stable sort of each run of non-starters from cps[from] on by combining class (canonical
// ordering).
void CanonicalOrder(std::vector<uint32_t>* cps, size_t from = 0) {
  auto& v = *cps;
  for (size_t i = from; i < v.size();) {
    if (CanonicalCombiningClass(v[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < v.size() && CanonicalCombiningClass(v[j]) != 0) ++j;
    std::stable_sort(v.begin() + i, v.begin() + j, [](uint32_t a, uint32_t b) {
      return CanonicalCombiningClass(a) < CanonicalCombiningClass(b);
    });
    i = j;
  }
}

// Canonical composition in place (UAX #15's algorithm: a mark joins the last starter unless a
// mark of the same or higher class, or a starter, stands between them).
void ComposeAll(std::vector<uint32_t>* cps) {
  auto& v = *cps;
  if (v.empty()) return;
  size_t starter = 0;
  int last_class = CanonicalCombiningClass(v[0]) == 0 ? 0 : 256;
  size_t kept = 1;
  for (size_t i = 1; i < v.size(); ++i) {
    const uint32_t c = v[i];
    const int cls = CanonicalCombiningClass(c);
    const uint32_t composite = last_class == 256 ? 0 : Compose(v[starter], c);
    if (composite != 0 && (last_class < cls || last_class == 0)) {
      v[starter] = composite;
      continue;
    }
    if (cls == 0) starter = kept;
    last_class = cls;
    v[kept++] = c;
  }
  v.resize(kept);
}

}  // namespace

void AppendNfd(const uint32_t* first, const uint32_t* last, std::vector<uint32_t>* out) {
  const size_t start = out->size();
  for (const uint32_t* p = first; p != last; ++p) Decompose(*p, out);
  CanonicalOrder(out, start);
}

uint8_t CanonicalCombiningClass(uint32_t cp) {
  if (cp < 0x300 || cp > 0x10FFFF) return 0;
  const uint32_t* begin = internal::kCanonicalCombiningClasses;
  const uint32_t* end = begin + internal::kNumCanonicalCombiningClasses;
  const uint32_t* it = std::upper_bound(
      begin, end, cp, [](uint32_t value, uint32_t entry) { return value < (entry >> 8); });
  return it == begin ? 0 : static_cast<uint8_t>(*(it - 1) & 0xFF);
}

std::string NormalizeNfc(std::string_view text) {
  // Lead bytes below 0xCC start code points below U+0300, which are all NFC starters.
  if (std::none_of(text.begin(), text.end(),
                   [](char c) { return static_cast<uint8_t>(c) >= 0xCC; })) {
    return std::string(text);
  }
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char u = DecodeUtf8(text, pos);
    if (u.valid) {
      Decompose(u.cp, &cps);
    } else {
      cps.push_back(kRawByteBase + u.cp);
    }
    pos += u.len;
  }
  CanonicalOrder(&cps);
  ComposeAll(&cps);
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : cps) {
    if (cp >= kRawByteBase) {
      out.push_back(static_cast<char>(cp - kRawByteBase));
    } else {
      AppendUtf8(cp, &out);
    }
  }
  return out;
}

}  // namespace kvmem::tokenizer
