#!/usr/bin/env python3
"""Writes tests/data/embed/: goldens for the sentence encoder (src/memory/embed/) from
independent implementations, checked by tests/memory/embed/*_test.cpp.

  minilm_tokens.json      token ids of varied texts (Unicode, accents, punctuation, digits, CJK,
                          added tokens, a long text cut to 256) from Hugging Face `tokenizers`
                          over the model's tokenizer.json, with sentence-transformers'
                          truncation (max_seq_length); also checked equal to
                          SentenceTransformer.tokenize when sentence-transformers is importable
  bert_normalize.json     BertNormalizer output, and the words BertPreTokenizer makes of it,
                          for every code point of chosen blocks (joined by spaces), from
                          `tokenizers`
  minilm_embed.json/.f32  sentences and their all-MiniLM-L6-v2 embeddings (n, 384) float32 LE
                          from sentence-transformers (torch, CPU, float32)
  tiny/                   a tiny random-weight BERT sentence-transformers model (F16 weights,
                          max_seq_length 16) that the tests can always run, and
  tiny_embed.json/.f32    its sentence-transformers embeddings

The tokenizer goldens need only `tokenizers` (in the test venv); the embedding goldens need
sentence-transformers and torch, which are not test dependencies: install them into any venv
(`pip install sentence-transformers`) and run this script with it.

Usage: make_embed_goldens.py [--model DIR] [--out tests/data/embed] [--tokens-only]
  DIR defaults to $KVMEM_HOME/models/all-MiniLM-L6-v2 (scripts/install_deps.sh --model minilm).
"""
import argparse
import json
import os
import random
import sys

import numpy as np
from tokenizers import Tokenizer
from tokenizers import normalizers as hf_normalizers

# Blocks whose every code point the normalizer golden covers.
NORMALIZE_BLOCKS = [
    (0x0000, 0x2FFF),    # Latin, IPA, combining marks, Greek, Cyrillic, ..., General Punctuation
    (0x3000, 0x30FF),    # CJK punctuation, kana
    (0xAC00, 0xAC3F),    # Hangul syllables (algorithmic NFD)
    (0xFB00, 0xFFFF),    # presentation forms, fullwidth forms, specials
    (0x1D400, 0x1D4FF),  # mathematical alphanumerics
    (0x1F300, 0x1F3FF),  # emoji
    (0x2B810, 0x2B92F),  # around the CJK extension boundary where HF differs from BERT
]
CHUNK = 256
# Code points of those blocks where kvmem's tables (Python's unicodedata, categories cut to
# Unicode 8.0) and the Rust crates behind `tokenizers` disagree: general categories changed
# since Unicode 8.0 (U+1734 Mn -> Mc, U+1885/U+1886 Lo -> Mn) and a case pair newer than
# Python's tables (U+1C89). Left out of the inputs; the rest must match exactly.
NORMALIZE_SKIP = {0x1734, 0x1885, 0x1886, 0x1C89}

TEXTS = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm gonna need 3.14159 slices of π — and 1,000,000 dollars (USD) by 12/25/2024.",
    "Café naïve façade résumé coöperate Ångström Øresund straße ΣΊΣΥΦΟΣ",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ and ﬁ ligatures ﬂ",
    "東京は日本の首都です。我喜欢学习中文！",
    "한국어 텍스트도 처리합니다. ハローワールド カタカナ",
    "Emoji 😀🎉👍🏽 and symbols ★ ♥ © ® ™ ∑ ∫ √ ≠ ≤",
    "tabs\tand\nnewlines\r\nand  multiple   spaces\u00a0nbsp\u2003em-space",
    "zero\u200bwidth\u200djoiner\ufeffbom\u00adsoft-hyphen",
    "[CLS] already has special tokens [SEP] and [MASK] inside [PAD][UNK]",
    "not special: [cls] [Sep] [MASK [ MASK]",
    "unaffable antidisestablishmentarianism supercalifragilisticexpialidocious",
    "a" * 120 + " " + "b" * 100 + " x",
    "Ünïcödé ÀÉÎÕÜ àéîõü Ççñ ǅǈǋ ﬀ İstanbul ΐ",
    "email@example.com http://www.example.org/path?q=1&r=2#frag $100 50% #hashtag",
    "Привет, мир! Ελληνικά κείμενα. مرحبا بالعالم. "
    "שלום עולם. नमस्ते दुनिया",
    "\"quotes\" 'single' «guillemets» „low” ‘curly’ … – — ¿¡",
    "Mixed CASE wOrDs WITH Numbers123 and_underscores-and-dashes",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That's awesome! What happened at the meeting? Did you talk to anyone new?",
]

EMBED_TEXTS = [
    "",
    "Hello, world!",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "The cat sat on the mat.",
    "A cat was sitting on a rug.",
    "Stock markets fell sharply after the announcement.",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That's awesome! What happened at the meeting?",
    "When did Caroline go to the support group?",
    "Café naïve façade résumé — Ångström straße.",
    "東京は日本の首都です。我喜欢学习中文！",
    "Emoji 😀🎉 and symbols ★ ♥ © ∑",
    "[CLS] already has special tokens [SEP] inside",
]


def write_json(path, head, key, items):
    """head's fields, then `key`: items one per line (small diffs when goldens change)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in head.items():
            f.write("%s: %s,\n" % (json.dumps(k), json.dumps(v, ensure_ascii=False)))
        f.write('%s: [\n' % json.dumps(key))
        f.write(",\n".join(json.dumps(x, ensure_ascii=False) for x in items))
        f.write("\n]}\n")


def long_text(n_words):
    rng = random.Random(7)
    words = ["memory", "agent", "cache", "token", "retrieval", "episode", "quantized",
             "Caroline", "said", "the", "a", "of", "photographs", "1999", "!", "?", "naïve"]
    return " ".join(rng.choice(words) for _ in range(n_words))


def normalize_inputs():
    for lo, hi in NORMALIZE_BLOCKS:
        for start in range(lo, hi + 1, CHUNK):
            end = min(start + CHUNK - 1, hi)
            cps = [cp for cp in range(start, end + 1)
                   if not 0xD800 <= cp <= 0xDFFF and cp not in NORMALIZE_SKIP]
            yield start, end, " ".join(chr(cp) for cp in cps)


def write_tokens(model_dir, out_dir, max_len):
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_len)
    texts = TEXTS + [long_text(400), long_text(40) + " " + "🎉" * 300]
    cases = [{"text": t, "ids": tok.encode(t).ids} for t in texts]
    write_json(os.path.join(out_dir, "minilm_tokens.json"),
               {"source": "tokenizers %s over tokenizer.json, truncation %d" % (
                   __import__("tokenizers").__version__, max_len), "max_len": max_len},
               "cases", cases)
    norm = tok.normalizer
    pre = tok.pre_tokenizer
    blocks = []
    for s, e, text in normalize_inputs():
        normalized = norm.normalize_str(text)
        words = [w for w, _ in pre.pre_tokenize_str(normalized)]
        blocks.append({"first": s, "last": e, "normalized": normalized, "words": " ".join(words)})
    write_json(os.path.join(out_dir, "bert_normalize.json"),
               {"source": "tokenizers %s BertNormalizer of each block's code points joined by "
                          "spaces (surrogates and `skip` left out); words: BertPreTokenizer's "
                          "words of it, joined by spaces"
                          % __import__("tokenizers").__version__,
                "skip": sorted(NORMALIZE_SKIP)},
               "blocks", blocks)
    return texts, tok


def st_model(path):
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(2)
    m = SentenceTransformer(path, device="cpu")
    m.float()  # F16 checkpoints compute in float32, as kvmem does
    return m


def write_embeddings(model, texts, out_dir, stem):
    e = model.encode(texts, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)
    e = np.asarray(e, dtype="<f4")
    norms = np.linalg.norm(e, axis=1)
    assert np.allclose(norms, 1, atol=1e-5), norms  # the model's Normalize module
    e.tofile(os.path.join(out_dir, stem + ".f32"))
    import sentence_transformers
    import torch
    cases = [{"text": t, "ids": model.tokenize([t])["input_ids"][0].tolist()} for t in texts]
    write_json(os.path.join(out_dir, stem + ".json"),
               {"source": "sentence-transformers %s, torch %s, CPU float32" % (
                   sentence_transformers.__version__, torch.__version__),
                "dim": int(e.shape[1]), "embeddings": stem + ".f32"}, "cases", cases)


def make_tiny(out_dir):
    """A random BERT (hidden 32, 2 layers, 4 heads) with a small real-ish vocabulary."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import decoders, models, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    d = os.path.join(out_dir, "tiny")
    os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
    words = ("the a of and to in is was cat dog sat on mat man eating food bread horse "
             "riding play ##s ##ing ##ed ##er ##ly un ##able ##a ##b ##c ##d ##e").split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(
        "abcdefghijklmnopqrstuvwxyz0123456789.,!?'-") + words
    vocab = list(dict.fromkeys(vocab))
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(vocab)}, unk_token="[UNK]",
                                     max_input_chars_per_word=100))
    tok.normalizer = hf_normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                   strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.save(os.path.join(d, "tokenizer.json"))
    json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer", "model_max_length": 64,
               "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
               "cls_token": "[CLS]", "mask_token": "[MASK]"},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                     type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12)
    torch.manual_seed(1)
    m = BertModel(cfg, add_pooling_layer=False)
    with torch.no_grad():  # large random weights so that every part of the pass matters
        for name, p in m.named_parameters():
            if "LayerNorm.weight" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, 0.3)
    state = {k: v.to(torch.float16).contiguous() for k, v in m.state_dict().items()
             if "position_ids" not in k}
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(d, "model.safetensors"), 0o644)
    cfg_json = cfg.to_dict()
    cfg_json["architectures"] = ["BertModel"]
    cfg_json["model_type"] = "bert"
    json.dump(cfg_json, open(os.path.join(d, "config.json"), "w"), indent=1)
    json.dump({"max_seq_length": 16, "do_lower_case": False},
              open(os.path.join(d, "sentence_bert_config.json"), "w"))
    json.dump({"word_embedding_dimension": 32, "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False},
              open(os.path.join(d, "1_Pooling", "config.json"), "w"))
    json.dump([{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize"}],
              open(os.path.join(d, "modules.json"), "w"))
    return d


def main():
    ap = argparse.ArgumentParser()
    home = os.environ.get("KVMEM_HOME", os.path.expanduser("~/.cache/kvmem"))
    ap.add_argument("--model", default=os.path.join(home, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "data", "embed"))
    ap.add_argument("--tokens-only", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    max_len = json.load(open(os.path.join(args.model, "sentence_bert_config.json")))[
        "max_seq_length"]
    texts, tok = write_tokens(args.model, args.out, max_len)
    if args.tokens_only:
        return
    model = st_model(args.model)
    assert model.max_seq_length == max_len
    for t in texts:  # sentence-transformers' own tokenization agrees with the goldens
        assert model.tokenize([t])["input_ids"][0].tolist() == tok.encode(t).ids, t
    write_embeddings(model, EMBED_TEXTS + [long_text(400)], args.out, "minilm_embed")
    tiny_dir = make_tiny(args.out)
    tiny = st_model(tiny_dir)
    assert tiny.max_seq_length == 16
    write_embeddings(tiny, EMBED_TEXTS[:12] + ["The cat sat on the mat, the dog sat on the "
                                               "mat, the man was eating bread and riding."],
                     args.out, "tiny_embed")
    print("wrote", args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
