// Never a silent wrong answer (issue "model families"): a GGUF whose math kvmem would not
// compute as written is refused by name instead of run as some other model. After the loader
// has read a file, every tensor must have been consumed, and every metadata key of the family's
// namespace that bears on the computation (rope, scaling, attention, experts, soft-capping,
// norms, ...) must be one the loader reads (the shared hyper-parameters and the family's own,
// Architecture::family_keys). Informational keys (general.*, tokenizer.*, and family keys such
// as tensor_data_layout) are left alone. Thread-safe: pure functions.
#pragma once

#include <set>
#include <string>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "model/architecture.h"

namespace kvmem::model {

// Unsupported naming the first tensor of `f` not in `consumed`, or the first math-bearing key of
// the family's namespace the loader does not read; the parts the family ignores on purpose
// (Architecture::ignored_prefixes) are counted in *ignored_tensors instead.
Status CheckNothingIgnored(const gguf::GgufFile& f, const Architecture& a,
                           const std::set<std::string>& consumed, int* ignored_tensors);

}  // namespace kvmem::model
