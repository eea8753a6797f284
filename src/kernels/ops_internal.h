// The per-ISA tables behind GetOps() (ops.cpp). Internal to kernels/.
#pragma once

#include "kernels/ops.h"

namespace kvmem::kernels {

const OpsTable& ScalarOpsTable();
// Only valid where CpuSupports(Isa::kAvx2); equals ScalarOpsTable() in builds without x86-64.
const OpsTable& Avx2OpsTable();

// OpsTable::rope_rotate per ISA (rope.cpp, rope_avx2.cpp).
void RopeRotateScalar(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_t,
                      const float* sin_t, RopeMode mode);
void RopeRotateAvx2(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_t,
                    const float* sin_t, RopeMode mode);

}  // namespace kvmem::kernels
