"""Build a HuggingFace `tokenizers` BPE tokenizer from a GGUF file's
tokenizer.ggml.* metadata (test tooling only; independent of llama.cpp and
of the C++ engine).

Supports tokenizer.ggml.model == "gpt2" (byte-level BPE) with the
pre-tokenizers used by the models we test:
  * "smollm" / "starcoder" / "refact": split digits individually, then the
    GPT-2 regex (ByteLevel use_regex=True)
  * "gpt2": GPT-2 regex
  * "default" (or no tokenizer.ggml.pre): llama.cpp's fallback, four regexes
    each splitting the pieces of the one before (as kvmem's kDefault)
  * "qwen2": the Qwen2 regex (digits individually, contractions case-insens.)
    after Qwen2's NFC normalizer
  * "gpt-4o": the o200k regex (GPT-OSS)
Special tokens: every token whose token_type is CONTROL (3) or
USER_DEFINED (4) is registered as an added token, so "<|im_start|>" etc. in
the text are matched as single tokens (like llama.cpp with special=True).
No BOS is added (tokenizer.ggml.add_bos_token is False for SmolLM2).

tokenizer.ggml.model == "llama" (SentencePiece BPE: Gemma-3) goes through
transformers' own GGUF tokenizer converter (convert_gguf_tokenizer, which
needs transformers but not torch), fed the metadata read here with the gguf
package.  Again no BOS is added by encode().
"""
from __future__ import annotations

from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


O200K_RE = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
            r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEFAULT_RES = [r"[\p{P}\$\+<=>\^~\|]+",
               r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
               r"\p{N}+", r"[0-9][0-9][0-9]"]


def _splits(regexes):
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(x), behavior="isolated") for x in regexes] +
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _get(r: GGUFReader, k, default=None):
    f = r.fields.get(k)
    return default if f is None else f.contents()


def _spm_from_gguf(r: GGUFReader) -> Tokenizer:
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    d = {"tokenizer_type": _get(r, "tokenizer.ggml.model"),
         "pre_tokenizer_type": _get(r, "tokenizer.ggml.pre"),
         "tokens": _get(r, "tokenizer.ggml.tokens"),
         "scores": _get(r, "tokenizer.ggml.scores"),
         "token_type": _get(r, "tokenizer.ggml.token_type"),
         "add_prefix_space": _get(r, "tokenizer.ggml.add_space_prefix", False)}
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                      ("unknown_token_id", "unk_token_id"),
                      ("padding_token_id", "pad_token_id")):
        v = _get(r, f"tokenizer.ggml.{key}")
        if v is not None:
            d[name] = int(v)
    tok, _ = convert_gguf_tokenizer(str(_get(r, "general.architecture")), d)
    return tok


def from_gguf(path: str) -> Tokenizer:
    r = GGUFReader(path)
    model = _get(r, "tokenizer.ggml.model")
    if model == "llama":
        return _spm_from_gguf(r)
    if model != "gpt2":
        raise NotImplementedError(f"tokenizer model {model!r}")
    pre = _get(r, "tokenizer.ggml.pre", "default")
    tokens = _get(r, "tokenizer.ggml.tokens")
    types = _get(r, "tokenizer.ggml.token_type", [1] * len(tokens))
    merges = _get(r, "tokenizer.ggml.merges", [])
    vocab = {t: i for i, t in enumerate(tokens)}
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merge_pairs,
                               ignore_merges=False, fuse_unk=False))
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), bl])
    elif pre in ("qwen2",):
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = _splits([QWEN2_RE])
    elif pre == "gpt-4o":
        tok.pre_tokenizer = _splits([O200K_RE])
    elif pre in ("default", ""):
        tok.pre_tokenizer = _splits(DEFAULT_RES)
    else:
        tok.pre_tokenizer = bl
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False)
                for t, ty in zip(tokens, types) if int(ty) in (3, 4)]
    tok.add_special_tokens(specials)
    return tok


def encode(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids
