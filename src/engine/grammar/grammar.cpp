#include "engine/grammar/grammar.h"

#include <algorithm>
#include <cstdio>

namespace kvmem::engine::grammar {

bool CharClass::Contains(uint32_t cp) const {
  // First range whose end is >= cp.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), cp,
                             [](const auto& r, uint32_t v) { return r.second < v; });
  const bool in = it != ranges.end() && it->first <= cp;
  return in != negated;
}

bool CharClass::Intersects(uint32_t lo, uint32_t hi) const {
  auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                             [](const auto& r, uint32_t v) { return r.second < v; });
  if (!negated) return it != ranges.end() && it->first <= hi;
  // Ranges are merged (adjacent ones joined), so [lo, hi] is covered only by a single range.
  const bool covered = it != ranges.end() && it->first <= lo && it->second >= hi;
  return !covered;
}

namespace {

void AppendChar(uint32_t cp, bool in_class, std::string* out) {
  char buf[16];
  if (cp == '\n') {
    *out += "\\n";
  } else if (cp == '\t') {
    *out += "\\t";
  } else if (cp == '\\' || cp == '"' || (in_class && (cp == ']' || cp == '-' || cp == '^'))) {
    *out += '\\';
    *out += static_cast<char>(cp);
  } else if (cp >= 0x20 && cp < 0x7F) {
    *out += static_cast<char>(cp);
  } else {
    std::snprintf(buf, sizeof(buf), cp <= 0xFF ? "\\x%02X" : cp <= 0xFFFF ? "\\u%04X" : "\\U%08X",
                  cp);
    *out += buf;
  }
}

}  // namespace

std::string Grammar::ToString() const {
  std::string out;
  for (int32_t r = 0; r < n_rules(); ++r) {
    out += rule_names_[r] + " ::=";
    bool first_alt = true;
    for (int32_t start : rule_alts_[r]) {
      if (!first_alt) out += " |";
      first_alt = false;
      for (int32_t p = start; elements_[p].kind != Element::Kind::kEnd; ++p) {
        const Element& e = elements_[p];
        out += ' ';
        if (e.kind == Element::Kind::kRule) {
          out += rule_names_[e.value];
          continue;
        }
        const CharClass& c = classes_[e.value];
        if (!c.negated && c.ranges.size() == 1 && c.ranges[0].first == c.ranges[0].second) {
          out += '"';
          AppendChar(c.ranges[0].first, false, &out);
          out += '"';
          continue;
        }
        if (c.negated && c.ranges.empty()) {
          out += '.';
          continue;
        }
        out += c.negated ? "[^" : "[";
        for (const auto& [lo, hi] : c.ranges) {
          AppendChar(lo, true, &out);
          if (hi != lo) {
            out += '-';
            AppendChar(hi, true, &out);
          }
        }
        out += ']';
      }
      if (elements_[start].kind == Element::Kind::kEnd) out += " \"\"";
    }
    out += '\n';
  }
  return out;
}

}  // namespace kvmem::engine::grammar
