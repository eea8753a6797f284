// Damaged, missing and hostile model files give a Status naming the problem, never a crash
// (run under ASan/UBSan by scripts/test.sh). Each test damages a copy of the tiny model.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "embed_test_util.h"
#include "memory/embed/sentence_encoder.h"
#include "memory/store/safetensors.h"

namespace kvmem::memory::embed {
namespace {

using testing::ModelCopy;
using testing::ReadAll;
using testing::TinyModelDir;
using testing::WriteAll;

// Loads dir and expects the failure `code` with `needle` in the message.
void ExpectLoadFails(const std::string& dir, ErrorCode code, const std::string& needle) {
  auto enc = SentenceEncoder::Load(dir);
  ASSERT_FALSE(enc.ok()) << "loaded although " << needle;
  EXPECT_EQ(enc.status().code(), code) << enc.status().ToString();
  EXPECT_NE(enc.status().message().find(needle), std::string::npos) << enc.status().ToString();
}

void Replace(const std::string& path, const std::string& from, const std::string& to) {
  std::string s = ReadAll(path);
  const size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << path;
  s.replace(at, from.size(), to);
  WriteAll(path, s);
}

// The tiny model's safetensors rewritten by `edit`, which may change the tensor list.
void RewriteWeights(const ModelCopy& m,
                    const std::function<void(std::vector<store::StTensor>*)>& edit) {
  const std::string bytes = ReadAll(m / "model.safetensors");
  auto view =
      store::ParseSafetensors({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  std::vector<store::StTensor> tensors = view->tensors;
  edit(&tensors);
  store::SafetensorsWriter w;
  for (const auto& t : tensors) ASSERT_TRUE(w.AddTensor(t.name, t.dtype, t.shape, t.data).ok());
  const std::vector<uint8_t> out = w.ToBytes();
  WriteAll(m / "model.safetensors", std::string(out.begin(), out.end()));
}

TEST(EmbedCorruptTest, MissingFiles) {
  ExpectLoadFails("/nonexistent/kvmem-model", ErrorCode::kNotFound, "config.json");
  {
    ModelCopy m(TinyModelDir());
    std::filesystem::remove(m / "model.safetensors");
    ExpectLoadFails(m.path(), ErrorCode::kIo, "model.safetensors");
  }
  {
    ModelCopy m(TinyModelDir());
    std::filesystem::remove(m / "tokenizer.json");
    std::filesystem::remove(m / "vocab.txt");
    ExpectLoadFails(m.path(), ErrorCode::kNotFound, "vocab.txt");
  }
  {  // without tokenizer.json, vocab.txt is used
    ModelCopy m(TinyModelDir());
    std::filesystem::remove(m / "tokenizer.json");
    EXPECT_TRUE(SentenceEncoder::Load(m.path()).ok());
  }
}

TEST(EmbedCorruptTest, TruncatedOrEmptyWeights) {
  ModelCopy m(TinyModelDir());
  const std::string bytes = ReadAll(m / "model.safetensors");
  for (size_t keep : {size_t{0}, size_t{4}, size_t{12}, bytes.size() / 2, bytes.size() - 1}) {
    WriteAll(m / "model.safetensors", bytes.substr(0, keep));
    ExpectLoadFails(m.path(), ErrorCode::kCorrupt, "model.safetensors");
  }
}

TEST(EmbedCorruptTest, BadConfig) {
  {
    ModelCopy m(TinyModelDir());
    WriteAll(m / "config.json", "{not json");
    ExpectLoadFails(m.path(), ErrorCode::kCorrupt, "config.json");
  }
  {
    ModelCopy m(TinyModelDir());
    Replace(m / "config.json", "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\"");
    ExpectLoadFails(m.path(), ErrorCode::kUnsupported, "hidden_act");
  }
  {
    ModelCopy m(TinyModelDir());
    Replace(m / "config.json", "\"num_attention_heads\": 4", "\"num_attention_heads\": 5");
    ExpectLoadFails(m.path(), ErrorCode::kCorrupt, "num_attention_heads");
  }
  {
    ModelCopy m(TinyModelDir());
    Replace(m / "config.json", "\"hidden_size\": 32", "\"hidden_size\": 64");
    ExpectLoadFails(m.path(), ErrorCode::kCorrupt, "shape");
  }
  {
    ModelCopy m(TinyModelDir());
    Replace(m / "config.json", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
    ExpectLoadFails(m.path(), ErrorCode::kNotFound, "encoder.layer.2.");
  }
  {
    ModelCopy m(TinyModelDir());
    Replace(m / "config.json", "\"hidden_size\": 32", "\"hidden_size\": -32");
    ExpectLoadFails(m.path(), ErrorCode::kCorrupt, "hidden_size");
  }
  {
    ModelCopy m(TinyModelDir());
    Replace(m / "config.json", "\"model_type\": \"bert\"", "\"model_type\": \"roberta\"");
    ExpectLoadFails(m.path(), ErrorCode::kUnsupported, "model_type");
  }
  {  // the tokenizer has more pieces than the model has embeddings
    ModelCopy m(TinyModelDir());
    Replace(m / "config.json", "\"vocab_size\": 78", "\"vocab_size\": 20");
    ExpectLoadFails(m.path(), ErrorCode::kCorrupt, "pieces");
  }
}

TEST(EmbedCorruptTest, BadTokenizerAndSentenceConfig) {
  {
    ModelCopy m(TinyModelDir());
    WriteAll(m / "tokenizer.json", "[[[[");
    ExpectLoadFails(m.path(), ErrorCode::kCorrupt, "tokenizer.json");
  }
  {
    ModelCopy m(TinyModelDir());
    Replace(m / "tokenizer.json", "\"model\": {\n    \"type\": \"WordPiece\"",
            "\"model\": {\n    \"type\": \"BPE\"");
    ExpectLoadFails(m.path(), ErrorCode::kUnsupported, "BPE");
  }
  {
    ModelCopy m(TinyModelDir());
    Replace(m / "tokenizer.json", "\"[CLS]\": 2", "\"[XLS]\": 2");
    ExpectLoadFails(m.path(), ErrorCode::kUnsupported, "added_tokens");
  }
  {
    ModelCopy m(TinyModelDir());
    WriteAll(m / "sentence_bert_config.json", "{\"max_seq_length\": \"long\"}");
    ExpectLoadFails(m.path(), ErrorCode::kCorrupt, "max_seq_length");
  }
  {
    ModelCopy m(TinyModelDir());
    Replace(m / "1_Pooling/config.json", "\"pooling_mode_cls_token\": false",
            "\"pooling_mode_cls_token\": true");
    ExpectLoadFails(m.path(), ErrorCode::kUnsupported, "pooling_mode_cls_token");
  }
}

TEST(EmbedCorruptTest, BadTensors) {
  {
    ModelCopy m(TinyModelDir());
    RewriteWeights(m, [](std::vector<store::StTensor>* ts) {
      std::erase_if(*ts,
                    [](const auto& t) { return t.name == "encoder.layer.1.output.dense.bias"; });
    });
    ExpectLoadFails(m.path(), ErrorCode::kNotFound, "encoder.layer.1.output.dense.bias");
  }
  {
    ModelCopy m(TinyModelDir());
    RewriteWeights(m, [](std::vector<store::StTensor>* ts) {
      for (auto& t : *ts) {
        if (t.name == "embeddings.LayerNorm.bias") {
          t.dtype = store::StDType::kI16;  // same size as F16
        }
      }
    });
    ExpectLoadFails(m.path(), ErrorCode::kUnsupported, "embeddings.LayerNorm.bias");
  }
  {
    ModelCopy m(TinyModelDir());
    std::vector<uint8_t> nan_bytes;
    RewriteWeights(m, [&](std::vector<store::StTensor>* ts) {
      for (auto& t : *ts) {
        if (t.name == "encoder.layer.0.attention.self.key.weight") {
          nan_bytes.assign(t.data.begin(), t.data.end());
          nan_bytes[6] = 0x00;
          nan_bytes[7] = 0x7E;  // f16 NaN
          t.data = nan_bytes;
        }
      }
    });
    ExpectLoadFails(m.path(), ErrorCode::kCorrupt, "non-finite");
  }
}

// Random damage to every file never crashes the loader; whatever loads still embeds.
TEST(EmbedCorruptTest, RandomDamageNeverCrashes) {
  std::mt19937 rng(1234);
  const std::vector<std::string> files = {"model.safetensors", "config.json", "tokenizer.json",
                                          "sentence_bert_config.json", "1_Pooling/config.json"};
  ModelCopy m(TinyModelDir());
  std::vector<std::string> originals;
  for (const auto& f : files) originals.push_back(ReadAll(m / f));
  int failed = 0;
  for (int iter = 0; iter < 200; ++iter) {
    const size_t which = rng() % files.size();
    std::string bytes = originals[which];
    // Header bytes of the weights are the interesting ones; anywhere in the small JSON files.
    const size_t span = which == 0 ? std::min<size_t>(bytes.size(), 4096) : bytes.size();
    for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) {
      bytes[rng() % span] = static_cast<char>(rng());
    }
    if (rng() % 4 == 0) bytes.resize(rng() % (bytes.size() + 1));
    WriteAll(m / files[which], bytes);
    auto enc = SentenceEncoder::Load(m.path());
    if (enc.ok()) {
      const std::vector<std::string> texts = {"the cat sat on the mat", ""};
      EXPECT_EQ(enc->Embed(texts, nullptr).size(), 2u * static_cast<size_t>(enc->dim()));
    } else {
      ++failed;
      EXPECT_FALSE(enc.status().message().empty());
    }
    WriteAll(m / files[which], originals[which]);
  }
  EXPECT_GT(failed, 50);
}

}  // namespace
}  // namespace kvmem::memory::embed
