// The per-ISA tables behind GetOps() (ops.cpp). Internal to kernels/.
#pragma once

#include "kernels/ops.h"

namespace kvmem::kernels {

const OpsTable& ScalarOpsTable();
// Only valid where CpuSupports(Isa::kAvx2); equals ScalarOpsTable() in builds without x86-64.
const OpsTable& Avx2OpsTable();

}  // namespace kvmem::kernels
