// The per-ISA AttendF16 kernels behind the dispatch in attention.cpp. Internal to kernels/.
#pragma once

#include "kernels/attention.h"

namespace kvmem::kernels {

// Largest head_dim whose accumulator lives on the stack; larger ones allocate.
inline constexpr int kAttendStackDim = 512;

void AttendF16Scalar(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
                     float* out);
// Requires head_dim % 8 == 0, head_dim <= kAttendStackDim and CpuSupports(Isa::kAvx2).
void AttendF16Avx2(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
                   float* out);

}  // namespace kvmem::kernels
