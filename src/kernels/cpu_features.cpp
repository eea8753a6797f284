#include "kernels/cpu_features.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kvmem::kernels {
namespace {

#if defined(__x86_64__)
// F16C is CPUID leaf 1, ECX bit 29. Read directly: clang (14) rejects "f16c" in
// __builtin_cpu_supports, and the fuzz build (fuzz/) compiles this file with clang. Read once:
// CPUID traps to the hypervisor in a VM, and GetTypeTraits asks on every matmul (a per-call
// CPUID measured 6.6% of a decode step's time).
bool HasF16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has;
}
#endif

}  // namespace

const char* IsaName(Isa isa) { return isa == Isa::kAvx2 ? "avx2" : "scalar"; }

bool CpuSupports(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
#if defined(__x86_64__)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
#else
      return false;
#endif
  }
  return false;
}

Isa ActiveIsa() {
  static const Isa isa = [] {
    const char* env = std::getenv("KVMEM_ISA");
    if (env != nullptr && std::strcmp(env, "scalar") == 0) return Isa::kScalar;
    return CpuSupports(Isa::kAvx2) ? Isa::kAvx2 : Isa::kScalar;
  }();
  return isa;
}

bool Avx512Enabled() {
  static const bool enabled = [] {
#if defined(__x86_64__)
    const char* isa = std::getenv("KVMEM_ISA");
    if (isa != nullptr && (std::strcmp(isa, "scalar") == 0 || std::strcmp(isa, "avx2") == 0)) {
      return false;
    }
    return ActiveIsa() == Isa::kAvx2 && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
  }();
  return enabled;
}

bool PackedKernelsEnabled() {
  static const bool enabled = [] {
    const char* pack = std::getenv("KVMEM_PACK");
    return Avx512Enabled() && !(pack != nullptr && std::strcmp(pack, "0") == 0);
  }();
  return enabled;
}

}  // namespace kvmem::kernels
