"""Helpers around llama-cpp-python for building oracle data (test tooling only).

Workaround: the locally built wheel (llama-cpp-python 0.3.36, ggml 0.25.3)
is compiled with GGML_NATIVE on a host with AMX-INT8; the AMX "extra buffer
type" weight path segfaults in ggml_backend_amx_mul_mat for batches of >1
token.  We therefore load models with use_extra_bufts=False (equivalent to
llama.cpp's --no-repack), which keeps the regular CPU (AVX512/VNNI,
llamafile sgemm) kernels.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

DEFAULT_MODEL = os.path.expanduser(
    "~/.cache/kvmem/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def model_path() -> str:
    return os.environ.get("KVMEM_MODEL", DEFAULT_MODEL)


def _patch_default_params():
    import llama_cpp
    import llama_cpp.llama as LL
    if getattr(llama_cpp, "_kvmem_patched", False):
        return
    orig = llama_cpp.llama_model_default_params

    def patched():
        p = orig()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama_model_default_params = patched
    LL.llama_cpp.llama_model_default_params = patched
    llama_cpp._kvmem_patched = True


def open_model(path: str | None = None, n_ctx: int = 2048, n_threads: int = 2,
               logits_all: bool = True, flash_attn: bool = False):
    _patch_default_params()
    from llama_cpp import Llama
    return Llama(path or model_path(), n_ctx=n_ctx, n_threads=n_threads,
                 n_threads_batch=n_threads, logits_all=logits_all,
                 flash_attn=flash_attn, verbose=False, seed=0)


def tokenize(llm, text: str) -> list[int]:
    """llama.cpp tokenizer, special tokens parsed, no automatic BOS."""
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))


def eval_logits(llm, ids) -> np.ndarray:
    """float32 (n_tokens, vocab) logits at every position (fresh context)."""
    llm.reset()
    llm.eval(list(ids))
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def versions() -> dict:
    import llama_cpp
    lib = os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so")
    info = {"llama_cpp_python": llama_cpp.__version__}
    try:
        l = ctypes.CDLL(lib)
        l.ggml_commit.restype = ctypes.c_char_p
        l.ggml_version.restype = ctypes.c_char_p
        info["ggml_commit"] = l.ggml_commit().decode()
        info["ggml_version"] = l.ggml_version().decode()
    except Exception as e:  # pragma: no cover
        info["ggml_commit"] = f"unknown ({e})"
    info["system_info"] = llama_cpp.llama_print_system_info().decode().strip()
    info["use_extra_bufts"] = False
    return info
