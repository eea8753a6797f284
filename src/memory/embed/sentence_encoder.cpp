#include "memory/embed/sentence_encoder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/mapped_file.h"
#include "memory/store/json_util.h"
#include "memory/store/safetensors.h"

namespace kvmem::memory::embed {
namespace {

using store::Json;

// Config and vocabulary files are small; anything larger is not one of them.
constexpr uint64_t kMaxSideFileBytes = 64ull << 20;
// Tokens per forward pass: bounds the activations ((tokens, intermediate) floats) while keeping
// each weight matrix read once for many tokens.
constexpr int64_t kChunkTokens = 2048;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The whole of a regular file of at most max_bytes.
Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return NotFound(path + " does not exist");
    return IoError("open '" + path + "': " + std::strerror(e));
  }
  std::string out;
  struct stat st;
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = IoError("stat '" + path + "': " + std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    status = InvalidArgument(path + " is not a regular file");
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    status = Corrupt(path + " is larger than " + std::to_string(max_bytes) + " bytes");
  } else {
    out.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t r = ::read(fd, out.data() + done, out.size() - done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        status = r < 0 ? IoError("read '" + path + "': " + std::strerror(errno))
                       : Corrupt(path + " shrank while being read");
        break;
      }
      done += static_cast<size_t>(r);
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return out;
}

Result<WordPieceTokenizer> LoadTokenizer(const std::string& dir) {
  const std::string json_path = dir + "/tokenizer.json";
  if (Exists(json_path)) {
    KVMEM_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(json_path, kMaxSideFileBytes));
    auto t = WordPieceTokenizer::FromTokenizerJson(text);
    if (!t.ok()) return t.status().WithContext(json_path);
    return t;
  }
  const std::string vocab_path = dir + "/vocab.txt";
  if (!Exists(vocab_path)) {
    return NotFound("neither " + json_path + " nor " + vocab_path + " exists");
  }
  KVMEM_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(vocab_path, kMaxSideFileBytes));
  WordPieceConfig config;  // BERT uncased, unless tokenizer_config.json says otherwise
  const std::string tc_path = dir + "/tokenizer_config.json";
  if (Exists(tc_path)) {
    KVMEM_ASSIGN_OR_RETURN(std::string tc_text, ReadSmallFile(tc_path, kMaxSideFileBytes));
    auto tc = store::ParseUntrustedJson(tc_text, 16, tc_path);
    if (!tc.ok()) return tc.status();
    auto lower = tc->find("do_lower_case");
    if (lower != tc->end() && lower->is_boolean()) {
      config.lowercase = config.strip_accents = lower->get<bool>();
    }
  }
  auto t = WordPieceTokenizer::FromVocabTxt(text, std::move(config));
  if (!t.ok()) return t.status().WithContext(vocab_path);
  return t;
}

// max_seq_length from sentence_bert_config.json, or `dflt` without one.
Result<int> LoadMaxSeqLength(const std::string& dir, int dflt) {
  const std::string path = dir + "/sentence_bert_config.json";
  if (!Exists(path)) return dflt;
  KVMEM_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxSideFileBytes));
  KVMEM_ASSIGN_OR_RETURN(Json j, store::ParseUntrustedJson(text, 16, path));
  if (!j.is_object()) return Corrupt(path + " is not a JSON object");
  auto lower = j.find("do_lower_case");
  if (lower != j.end() && lower->is_boolean() && lower->get<bool>()) {
    return Unsupported(path + ": do_lower_case = true");
  }
  if (!j.contains("max_seq_length")) return dflt;
  auto n = store::JsonInt(j, "max_seq_length", "", 2, 1 << 20);
  if (!n.ok()) return n.status().WithContext(path);
  return static_cast<int>(*n);
}

// 1_Pooling/config.json, when present, must ask for mean pooling alone.
Status CheckPooling(const std::string& dir) {
  const std::string path = dir + "/1_Pooling/config.json";
  if (!Exists(path)) return Status::Ok();
  KVMEM_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxSideFileBytes));
  KVMEM_ASSIGN_OR_RETURN(Json j, store::ParseUntrustedJson(text, 16, path));
  if (!j.is_object()) return Corrupt(path + " is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.key().starts_with("pooling_mode_") || !it->is_boolean()) continue;
    const bool want = it.key() == "pooling_mode_mean_tokens";
    if (it->get<bool>() != want) {
      return Unsupported(path + ": " + it.key() + " = " + (want ? "false" : "true") +
                         " (only mean pooling)");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<SentenceEncoder> SentenceEncoder::Load(const std::string& dir_or_file) {
  std::error_code ec;
  const bool is_dir = std::filesystem::is_directory(dir_or_file, ec);
  std::string dir =
      is_dir ? dir_or_file : std::filesystem::path(dir_or_file).parent_path().string();
  if (dir.empty()) dir = ".";
  const std::string weights = is_dir ? dir + "/model.safetensors" : dir_or_file;
  const std::string where = "sentence encoder " + dir_or_file;
  auto fail = [&](const Status& s) { return s.WithContext(where); };

  auto config_text = ReadSmallFile(dir + "/config.json", kMaxSideFileBytes);
  if (!config_text.ok()) return fail(config_text.status());
  auto config = BertConfig::FromJson(*config_text);
  if (!config.ok()) return fail(config.status().WithContext(dir + "/config.json"));

  auto tokenizer = LoadTokenizer(dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  if (tokenizer->vocab_size() > config->vocab_size) {
    return fail(Corrupt("the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                        " pieces but the model only " + std::to_string(config->vocab_size) +
                        " embeddings"));
  }
  auto max_len = LoadMaxSeqLength(dir, config->max_positions);
  if (!max_len.ok()) return fail(max_len.status());
  if (Status s = CheckPooling(dir); !s.ok()) return fail(s);

  auto file = MappedFile::Open(weights);
  if (!file.ok()) return fail(file.status());
  auto view = store::ParseSafetensors(file->bytes());
  if (!view.ok()) return fail(view.status().WithContext(weights));
  auto model = BertModel::FromSafetensors(*config, *view);
  if (!model.ok()) return fail(model.status().WithContext(weights));
  // sentence-transformers cuts to max_seq_length, which a model cannot exceed.
  const int max_seq = std::min(*max_len, config->max_positions);
  return SentenceEncoder(std::move(tokenizer).value(), std::move(model).value(), max_seq);
}

std::vector<int32_t> SentenceEncoder::Tokenize(std::string_view text) const {
  return tokenizer_.Encode(text, static_cast<size_t>(max_seq_length_));
}

std::vector<float> SentenceEncoder::Embed(std::span<const std::string> texts,
                                          ThreadPool* pool) const {
  const int h = dim();
  const size_t n = texts.size();
  std::vector<float> out(n * static_cast<size_t>(h), 0.0f);
  std::vector<std::vector<int32_t>> ids(n);
  auto tokenize = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) ids[static_cast<size_t>(i)] = Tokenize(texts[i]);
  };
  if (pool != nullptr && n > 1) {
    pool->ParallelFor(static_cast<int64_t>(n), 8, tokenize);
  } else {
    tokenize(0, static_cast<int64_t>(n));
  }

  std::vector<int32_t> flat;  // (chunk tokens)
  std::vector<int> lens;      // (chunk sentences)
  std::vector<float> hidden;  // (chunk tokens, hidden)
  for (size_t first = 0; first < n;) {
    flat.clear();
    lens.clear();
    size_t last = first;
    while (last < n && (last == first ||
                        static_cast<int64_t>(flat.size() + ids[last].size()) <= kChunkTokens)) {
      flat.insert(flat.end(), ids[last].begin(), ids[last].end());
      lens.push_back(static_cast<int>(ids[last].size()));
      ++last;
    }
    hidden.resize(flat.size() * static_cast<size_t>(h));
    model_.Forward(flat, lens, hidden.data(), pool);
    // Mean over each sentence's tokens, then v / max(|v|, 1e-12) (torch.nn.functional.normalize).
    const float* row = hidden.data();
    for (size_t s = first; s < last; ++s) {
      float* v = out.data() + s * static_cast<size_t>(h);
      const int len = lens[s - first];
      for (int t = 0; t < len; ++t, row += h) {
        for (int i = 0; i < h; ++i) v[i] += row[i];
      }
      double norm2 = 0;
      for (int i = 0; i < h; ++i) {
        v[i] /= static_cast<float>(len);
        norm2 += static_cast<double>(v[i]) * v[i];
      }
      const float inv = 1.0f / std::max(static_cast<float>(std::sqrt(norm2)), 1e-12f);
      for (int i = 0; i < h; ++i) v[i] *= inv;
    }
    first = last;
  }
  return out;
}

}  // namespace kvmem::memory::embed
