// Answer-quality metrics of QA benchmarks (LoCoMo, after SQuAD's evaluation script): answers are
// normalized — lower-cased, ASCII punctuation removed, the articles a/an/the dropped, split on
// whitespace — then compared as bags of tokens. No stemming (the LoCoMo release stems with
// Porter's stemmer; these figures are therefore slightly lower than stemmed ones).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvmem::eval {

std::vector<std::string> NormalizedTokens(std::string_view text);

// Token F1: harmonic mean of precision and recall of the common tokens (multiset). 1 when both
// are empty, 0 when only one is.
double TokenF1(std::string_view prediction, std::string_view gold);

// BLEU-1 of one sentence: clipped unigram precision times the brevity penalty
// exp(1 - |gold| / |prediction|) when the prediction is shorter. 0 for an empty prediction.
double Bleu1(std::string_view prediction, std::string_view gold);

}  // namespace kvmem::eval
