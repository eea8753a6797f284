// The identity of a model's weights, recorded with every stored KV block: a cache computed by
// one model is garbage to another (even a requantization of the same model), so loads compare
// fingerprints before touching a byte of KV data.
//
// Choice: XXH3-128 over the whole GGUF file, streamed with read() in 4 MiB chunks. Hashing
// only metadata and the tensor table would be cheaper but would miss files that differ in weight
// bytes alone (a fine-tune or requantization written with identical headers); a whole-file hash
// is exact and costs one sequential read. Measured from the page cache on the 2-core dev box:
// SmolLM2-135M Q4_1 (98 MB) 22-54 ms, Gemma-3-270M Q4_K_M (253 MB) ~52 ms, i.e. 2-5 GB/s, the
// same as hashing an mmap of the file (18-31 / 50-57 ms); a cold file costs a disk read of it.
// read() rather than a mapping: bounded memory and no SIGBUS if the file is truncated meanwhile.
// Callers compute it once per model load. XXH3 is not cryptographic: it identifies, it does not
// authenticate.
// Thread-safe: pure functions.
#pragma once

#include <string>

#include "core/status.h"

namespace kvmem::memory::store {

// 32 lowercase hex characters.
Result<std::string> ModelFingerprint(const std::string& gguf_path);

}  // namespace kvmem::memory::store
