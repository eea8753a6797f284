#include "eval/needle.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <string_view>

#include "engine/forward.h"
#include "kv/kv_sequence.h"

namespace kvmem::eval {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::vector<std::string_view> Lines(const std::string& text) {
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    if (end > begin) lines.push_back(std::string_view(text).substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

// The first n lines with the needle inserted before line k; the char offset of the needle.
std::string Assemble(const std::vector<std::string_view>& lines, size_t n, size_t k,
                     const std::string& needle, size_t* needle_char) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i == k) {
      *needle_char = s.size();
      s += needle;
      s += '\n';
    }
    s.append(lines[i]);
    if (i + 1 < n) s += '\n';
  }
  if (k >= n) {
    *needle_char = s.size() + 1;
    s += '\n' + needle;
  }
  return s;
}

// The line boundary among the first n lines nearest `depth` of their characters (characters
// track tokens far better than line counts do).
size_t NeedleLine(const std::vector<std::string_view>& lines, size_t n, double depth) {
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += lines[i].size() + 1;
  const double target = std::clamp(depth, 0.0, 1.0) * static_cast<double>(total);
  size_t best = 0, before = 0;
  double best_gap = target;
  for (size_t k = 1; k <= n; ++k) {
    before += lines[k - 1].size() + 1;
    const double gap = std::fabs(static_cast<double>(before) - target);
    if (gap < best_gap) {
      best_gap = gap;
      best = k;
    }
  }
  return best;
}

// log softmax of one logits row at `id`.
double LogProb(const float* logits, int n_vocab, int32_t id) {
  const float mx = *std::max_element(logits, logits + n_vocab);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  return static_cast<double>(logits[id] - mx) - std::log(sum);
}

}  // namespace

const std::vector<std::string>& NeedleWords() {
  static const std::vector<std::string> kWords = {
      "tangerine", "walrus",    "obsidian", "marmalade", "zeppelin", "periwinkle",
      "quasar",    "harmonica", "pelican",  "sapphire",  "cinnamon", "kangaroo",
      "lighthouse", "avalanche", "mosaic",  "porcupine"};
  return kWords;
}

std::string NeedleSentence(const std::string& word) {
  return "(Note: the secret code word is " + word + ". Remember it.)";
}

Result<std::vector<std::string>> PickNeedleWords(const std::string& haystack, uint64_t seed,
                                                 int n_controls) {
  const std::string lower = Lower(haystack);
  std::vector<std::string> absent;
  for (const std::string& w : NeedleWords()) {
    if (lower.find(w) == std::string::npos) absent.push_back(w);
  }
  if (static_cast<int>(absent.size()) < n_controls + 1) {
    return InvalidArgument("only " + std::to_string(absent.size()) +
                           " needle words are absent from the haystack; " +
                           std::to_string(n_controls + 1) + " are needed");
  }
  std::mt19937_64 rng(seed);
  std::shuffle(absent.begin(), absent.end(), rng);
  absent.resize(n_controls + 1);
  return absent;
}

Result<NeedlePrompt> BuildNeedlePrompt(const std::string& haystack,
                                       const tokenizer::Tokenizer& tok, int64_t max_tokens,
                                       double depth, const std::string& word) {
  const std::vector<std::string_view> lines = Lines(haystack);
  const std::string needle = NeedleSentence(word);
  auto encode = [&](const std::string& s) {
    return tok.Encode(s, /*add_special=*/true, /*parse_special=*/false);
  };
  auto tokens_with = [&](size_t n) {
    size_t needle_char = 0;
    const std::string body = Assemble(lines, n, NeedleLine(lines, n, depth), needle, &needle_char);
    return static_cast<int64_t>(encode(body + kNeedleQuestion).size());
  };
  // The largest line count that fits (token counts grow with the line count).
  size_t lo = 0, hi = lines.size();
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    if (tokens_with(mid) <= max_tokens) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  NeedlePrompt p;
  size_t needle_char = 0;
  const std::string body = Assemble(lines, lo, NeedleLine(lines, lo, depth), needle, &needle_char);
  p.text = body + kNeedleQuestion;
  p.n_tokens = static_cast<int64_t>(encode(p.text).size());
  if (p.n_tokens < max_tokens - 64) {
    return FailedPrecondition("the haystack holds only " + std::to_string(p.n_tokens) +
                              " tokens; " + std::to_string(max_tokens) + " were asked for");
  }
  // Tokens before the needle: the needle starts a line, so the prefix ends at a line break.
  p.needle_token = static_cast<int64_t>(encode(body.substr(0, needle_char)).size());
  const int64_t body_tokens = static_cast<int64_t>(encode(body).size());
  p.depth = static_cast<double>(p.needle_token) / static_cast<double>(std::max<int64_t>(body_tokens, 1));
  return p;
}

Result<NeedleResult> RunNeedleCase(const model::Model& model, const tokenizer::Tokenizer& tok,
                                   ThreadPool* threads, const NeedlePrompt& prompt,
                                   const std::vector<std::string>& words, int max_batch,
                                   int answer_tokens,
                                   const std::function<void(int64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.Encode(prompt.text, true, false);
  const int n_vocab = model.spec().n_vocab;
  const int block_rows = 256;
  const int64_t n_max = static_cast<int64_t>(ids.size()) + answer_tokens + 64;
  kv::KvPool pool(model.kv_geometry(block_rows),
                  static_cast<int>((n_max + block_rows - 1) / block_rows) + 1);
  kv::KvSequence seq(&pool);

  std::vector<float> last;  // logits after the prompt
  for (size_t begin = 0; begin < ids.size(); begin += max_batch) {
    const size_t end = std::min(ids.size(), begin + max_batch);
    KVMEM_RETURN_IF_ERROR(engine::Forward(model, threads, &seq,
                                          std::span(ids).subspan(begin, end - begin),
                                          static_cast<int64_t>(begin), false, &last, max_batch));
    if (progress) progress(static_cast<int64_t>(end));
  }
  const int64_t n = static_cast<int64_t>(ids.size());

  // Each candidate's answer tokens: what " word" adds to the prompt's tokens.
  std::vector<double> logps;
  for (const std::string& w : words) {
    std::vector<int32_t> full = tok.Encode(prompt.text + " " + w, true, false);
    std::vector<int32_t> cand;
    if (full.size() > ids.size() && std::equal(ids.begin(), ids.end(), full.begin())) {
      cand.assign(full.begin() + n, full.end());
    } else {
      cand = tok.Encode(" " + w, false, false);
    }
    if (cand.empty()) return Internal("needle word '" + w + "' encodes to nothing");
    double lp = LogProb(last.data(), n_vocab, cand[0]);
    if (cand.size() > 1) {
      engine::Batch b;
      b.tokens.assign(cand.begin(), cand.end() - 1);
      for (size_t i = 0; i + 1 < cand.size(); ++i) b.positions.push_back(n + i);
      b.all_logits = true;
      b.persist = false;  // scored on top of the prompt's KV, leaving nothing behind
      engine::ForwardPass fp(model, threads);
      KVMEM_RETURN_IF_ERROR(fp.Begin(b, &seq));
      while (!fp.done()) fp.StepLayer();
      std::vector<float> logits;
      fp.Finish(&logits);
      for (size_t i = 1; i < cand.size(); ++i) {
        lp += LogProb(logits.data() + (i - 1) * n_vocab, n_vocab, cand[i]);
      }
    }
    logps.push_back(lp);
  }

  NeedleResult r;
  r.context = n;
  r.depth = prompt.depth;
  r.needle_token = prompt.needle_token;
  r.word = words[0];
  r.logp_word = logps[0];
  const std::vector<double> controls(logps.begin() + 1, logps.end());
  r.logp_control_mean =
      controls.empty() ? 0 : std::accumulate(controls.begin(), controls.end(), 0.0) / controls.size();
  r.logp_control_max = controls.empty() ? -INFINITY : *std::max_element(controls.begin(), controls.end());
  r.rank = 1 + static_cast<int>(std::count_if(controls.begin(), controls.end(),
                                              [&](double c) { return c >= r.logp_word; }));

  // Greedy answer.
  std::vector<int32_t> answer;
  std::vector<float> logits = last;
  for (int i = 0; i < answer_tokens; ++i) {
    const int32_t t = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.begin() + n_vocab) - logits.begin());
    if (tok.IsEndOfGeneration(t)) break;
    answer.push_back(t);
    if (i + 1 == answer_tokens) break;
    const int32_t one[] = {t};
    KVMEM_RETURN_IF_ERROR(engine::Forward(model, threads, &seq, one, n + i, false, &logits));
  }
  auto text = tok.Decode(answer);
  r.greedy = text.ok() ? *text : "";
  r.answered = Lower(r.greedy).find(r.word) != std::string::npos;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace kvmem::eval
