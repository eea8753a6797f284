// Needle in a haystack over a long context: a sentence naming a code word is planted at a chosen
// depth of a long dialogue (LoCoMo conversations, one after another, cut at a line so the prompt
// fits the context), and a question at the end asks for the word. Each case reports whether
// greedy decoding answers it and, for models too weak to answer, how much more probable the
// planted word is than control words that appear nowhere in the prompt (teacher-forced
// log-probabilities of the answer tokens; the controls share the prompt's KV and leave nothing
// behind). `kvmem eval needle` runs this.
//
// Thread-safety: plain values and functions; RunNeedleCase uses the ThreadPool it is given.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::eval {

// The code words a needle can carry: uncommon enough not to occur in LoCoMo dialogue.
const std::vector<std::string>& NeedleWords();

inline constexpr const char* kNeedleQuestion =
    "\n\nQuestion: What is the secret code word mentioned in the conversation above?\n"
    "Answer: The secret code word is";

std::string NeedleSentence(const std::string& word);

struct NeedlePrompt {
  std::string text;          // haystack with the needle line, then kNeedleQuestion
  int64_t n_tokens = 0;      // text encoded with BOS
  int64_t needle_token = 0;  // index of the needle line's first token
  double depth = 0;          // needle_token / tokens before the question
};

// The longest prompt of whole haystack lines, with the needle as its own line at the line
// boundary nearest `depth` (0..1) of them, that encodes to at most max_tokens tokens.
// FailedPrecondition when the haystack is too short to fill max_tokens - 64 tokens.
Result<NeedlePrompt> BuildNeedlePrompt(const std::string& haystack,
                                       const tokenizer::Tokenizer& tok, int64_t max_tokens,
                                       double depth, const std::string& word);

// The planted word and the controls for one case, drawn (seeded) from the words that occur
// nowhere in the haystack (case-insensitive). InvalidArgument if fewer than n_controls + 1 do.
Result<std::vector<std::string>> PickNeedleWords(const std::string& haystack, uint64_t seed,
                                                 int n_controls);

struct NeedleResult {
  int64_t context = 0;  // prompt tokens
  double depth = 0;
  int64_t needle_token = 0;
  std::string word;
  double logp_word = 0;         // log P(" word" | prompt), summed over its tokens
  double logp_control_mean = 0;
  double logp_control_max = 0;
  int rank = 0;                 // 1 = the planted word is the most probable candidate
  std::string greedy;           // the greedy continuation
  bool answered = false;        // the greedy continuation contains the word
  double seconds = 0;
};

// Prefills the prompt (micro-batches of max_batch), scores the planted word and each control,
// then decodes answer_tokens greedy tokens. progress(tokens_done) runs after each micro-batch.
Result<NeedleResult> RunNeedleCase(const model::Model& model, const tokenizer::Tokenizer& tok,
                                   ThreadPool* threads, const NeedlePrompt& prompt,
                                   const std::vector<std::string>& words, int max_batch,
                                   int answer_tokens,
                                   const std::function<void(int64_t)>& progress);

}  // namespace kvmem::eval
