"""Builds llama.cpp tools from the llama-cpp-python sdist, for the benchmarks that compare kvmem
with llama.cpp (bench/vs_llamacpp: llama-bench; bench/concurrency: llama-server).

The sdist (pip download, PyPI) vendors llama.cpp with its .git, so the commit is known. It is
unpacked under ~/.cache/kvmem/llamacpp/ and each build lives in build-VARIANT/ there; nothing of
it enters the repository. Standard library only, except that the download runs the current
interpreter's pip (run the benchmarks with the project venv's python).
"""
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "kvmem")
LLAMACPP_DIR = os.path.join(CACHE, "llamacpp")
SDIST_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{SDIST_VERSION}"
SOURCE = os.path.join(LLAMACPP_DIR, SDIST_NAME, "vendor", "llama.cpp")

# What llama-cpp-python itself builds here (GGML_NATIVE: -march=native), static, tools only.
BASE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
]
# llama-server in the same build directory as llama-bench's native build (the libraries are
# shared), without its web UI (which would need npm or a download from Hugging Face).
SERVER_FLAGS = [f for f in BASE_FLAGS if not f.startswith("-DLLAMA_BUILD_SERVER=")] + [
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
]


class BuildError(Exception):
    pass


def run_logged(cmd, logf, cwd=None):
    logf.write(f"\n$ {shlex.join(cmd)}\n")
    logf.flush()
    r = subprocess.run(cmd, cwd=cwd, stdout=logf, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise BuildError(f"failed ({r.returncode}): {shlex.join(cmd)}; see {logf.name}")


def source_info(src=SOURCE):
    """llama.cpp's commit (the sdist carries the submodule's .git) and the ggml version."""
    info = {"llama_cpp_python": SDIST_VERSION, "source": src}
    try:
        top, head = subprocess.run(["git", "-C", src, "rev-parse", "--show-toplevel", "HEAD"],
                                   check=True, capture_output=True, text=True).stdout.split()
        if os.path.realpath(top) != os.path.realpath(src):
            raise ValueError("not llama.cpp's own repository")
        info["commit"] = head
    except (OSError, ValueError, subprocess.CalledProcessError):
        # fall back on the changelog: "update llama.cpp to ggml-org/llama.cpp@<hash>"
        try:
            with open(os.path.join(src, "..", "..", "CHANGELOG.md")) as f:
                m = re.search(r"llama\.cpp@([0-9a-f]{7,40})", f.read())
            if m:
                info["commit"] = m.group(1)
        except OSError:
            pass
    try:
        with open(os.path.join(src, "ggml", "CMakeLists.txt")) as f:
            t = f.read()
        v = [re.search(rf"set\(GGML_VERSION_{k} (\d+)\)", t) for k in ("MAJOR", "MINOR", "PATCH")]
        if all(v):
            info["ggml_version"] = ".".join(x.group(1) for x in v)
    except OSError:
        pass
    return info


def binary_version(binary):
    """`TOOL --version`, e.g. "version: 0.5.0-dev (build 1, commit 0c1e570) / built with GNU
    12.2.0 for Linux x86_64"."""
    try:
        r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
        return " / ".join(ln.strip() for ln in (r.stdout + r.stderr).splitlines() if ln.strip())
    except (OSError, subprocess.TimeoutExpired):
        return None


def ensure_source(logf, log):
    """Downloads and unpacks the sdist unless it is there; returns llama.cpp's source dir."""
    tarball = os.path.join(LLAMACPP_DIR, "dl", f"{SDIST_NAME}.tar.gz")
    if not os.path.exists(tarball):
        log(f"downloading the llama-cpp-python {SDIST_VERSION} sdist from PyPI")
        run_logged([sys.executable, "-m", "pip", "download",
                    f"llama-cpp-python=={SDIST_VERSION}", "--no-binary", ":all:", "--no-deps",
                    "-d", os.path.dirname(tarball)], logf)
    if not os.path.isdir(SOURCE):
        log(f"unpacking {tarball}")
        with tarfile.open(tarball) as tf:
            kw = {"filter": "tar"} if hasattr(tarfile, "data_filter") else {}
            tf.extractall(LLAMACPP_DIR, **kw)
        # fresh inodes and times: refresh git's index, or ggml's build calls itself "-dirty"
        subprocess.run(["git", "-C", SOURCE, "update-index", "-q", "--refresh"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return SOURCE


def build_tool(variant, target, cmake_flags, jobs, rebuild, log, info_name, log_name):
    """Path of build-VARIANT/bin/TARGET and its build info (JSON in build-VARIANT/INFO_NAME);
    fetches the sources, configures and builds the one target when missing (or rebuild), with
    its output in LLAMACPP_DIR/LOG_NAME."""
    build = os.path.join(LLAMACPP_DIR, f"build-{variant}")
    binary = os.path.join(build, "bin", target)
    info_path = os.path.join(build, info_name)
    if os.path.exists(binary) and not rebuild:
        try:
            with open(info_path) as f:
                info = json.load(f)
            if info.get("cmake_flags") != cmake_flags:
                log(f"warning: {binary} was configured with other flags than this script's; "
                    "--rebuild builds it anew")
            return binary, info
        except (OSError, ValueError):
            info = source_info() if os.path.isdir(SOURCE) else {}
            info.update({"variant": variant, "cmake_flags": cmake_flags, "binary": binary,
                         "version": binary_version(binary)})
            with open(info_path, "w") as f:
                json.dump(info, f, indent=1)
            return binary, info
    os.makedirs(LLAMACPP_DIR, exist_ok=True)
    log_path = os.path.join(LLAMACPP_DIR, log_name)
    log(f"building {target} (log: {log_path})")
    with open(log_path, "w") as logf:
        src = ensure_source(logf, log)
        if rebuild and os.path.isdir(build):
            run_logged(["rm", "-rf", build], logf)
        gen = ["-G", "Ninja"] if subprocess.run(["sh", "-c", "command -v ninja"],
                                                capture_output=True).returncode == 0 else []
        log("configuring")
        run_logged(["cmake", "-S", src, "-B", build, *gen, *cmake_flags], logf)
        log(f"compiling {target} with -j{jobs}")
        run_logged(["cmake", "--build", build, "--target", target, f"-j{jobs}"], logf)
    info = source_info(src)
    info.update({"variant": variant, "cmake_flags": cmake_flags, "binary": binary,
                 "version": binary_version(binary),
                 "built": datetime.datetime.now().isoformat(timespec="seconds")})
    with open(info_path, "w") as f:
        json.dump(info, f, indent=1)
    log(f"built {binary} (llama.cpp {info.get('commit', '?')[:9]})")
    return binary, info
