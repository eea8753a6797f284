// GetOps(): the OpsTable for an ISA (the tables live in ops_<isa>.cpp).
#include "kernels/ops.h"

#include "kernels/ops_internal.h"

namespace kvmem::kernels {

const OpsTable& GetOps(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return Avx2OpsTable();
    case Isa::kScalar:
      break;
  }
  return ScalarOpsTable();
}

}  // namespace kvmem::kernels
