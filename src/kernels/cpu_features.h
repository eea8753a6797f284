// Which kernel variant runs: detected once from CPUID, overridable (KVMEM_ISA=scalar) so every
// compiled variant can be exercised. Thread-safe: the detection result is immutable after first use.
#pragma once

namespace kvmem::kernels {

enum class Isa { kScalar = 0, kAvx2 = 1 };

const char* IsaName(Isa isa);
// True if this CPU can run code compiled for `isa`.
bool CpuSupports(Isa isa);
// The best supported ISA, or the one named by the environment variable KVMEM_ISA if set and
// supported. Computed once.
Isa ActiveIsa();

// True if this CPU runs the AVX-512 (F, BW, VL, DQ, VNNI) kernels and KVMEM_ISA does not cap
// the ISA at scalar or avx2. Computed once.
bool Avx512Enabled();
// Avx512Enabled() and KVMEM_PACK is not 0: weights are repacked at load for the VNNI kernels
// (kernels/packed_matrix.h).
bool PackedKernelsEnabled();

}  // namespace kvmem::kernels
