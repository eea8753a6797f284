// Per-ISA quantization kernels behind kernels/type_traits.h. Internal to kernels/: everything else
// reaches them through GetTypeTraits(). Signatures are ToFloatFn / FromFloatFn / VecDotFn; n is
// a multiple of the type's block size. Thread-safe: pure functions of their arguments.
//
// scalar:: follows ggml's reference code (ggml-quants.c *_ref, ggml-cpu quants.c *_generic):
// the same rounding, integer sums per block scaled afterwards. avx2:: follows ggml's x86 AVX2
// paths (arch/x86/quants.c), including their accumulation order, so results match llama.cpp's
// CPU backend. Where the two ggml paths differ by design (Q8_0/Q8_1 activation rounding: the
// reference rounds x * (1/d) half away from zero, AVX2 rounds x * (127/amax) half to even), each
// kvmem variant follows its ggml counterpart.
#pragma once

#include <cstdint>

namespace kvmem::kernels {

namespace scalar {

void ToFloatF32(const void* src, float* dst, int64_t n);
void FromFloatF32(const float* src, void* dst, int64_t n);
float VecDotF32(int64_t n, const void* x, const void* y);
void ToFloatF16(const void* src, float* dst, int64_t n);
void FromFloatF16(const float* src, void* dst, int64_t n);
float VecDotF16(int64_t n, const void* x, const void* y);
void ToFloatBF16(const void* src, float* dst, int64_t n);
void FromFloatBF16(const float* src, void* dst, int64_t n);
float VecDotBF16(int64_t n, const void* x, const void* y);

void ToFloatQ4_0(const void* src, float* dst, int64_t n);
void FromFloatQ4_0(const float* src, void* dst, int64_t n);
float VecDotQ4_0Q8_0(int64_t n, const void* x, const void* y);
void ToFloatQ4_1(const void* src, float* dst, int64_t n);
void FromFloatQ4_1(const float* src, void* dst, int64_t n);
float VecDotQ4_1Q8_1(int64_t n, const void* x, const void* y);
void ToFloatQ5_0(const void* src, float* dst, int64_t n);
void FromFloatQ5_0(const float* src, void* dst, int64_t n);
float VecDotQ5_0Q8_0(int64_t n, const void* x, const void* y);
void ToFloatQ5_1(const void* src, float* dst, int64_t n);
void FromFloatQ5_1(const float* src, void* dst, int64_t n);
float VecDotQ5_1Q8_1(int64_t n, const void* x, const void* y);
void ToFloatQ8_0(const void* src, float* dst, int64_t n);
void FromFloatQ8_0(const float* src, void* dst, int64_t n);
float VecDotQ8_0Q8_0(int64_t n, const void* x, const void* y);
void ToFloatQ8_1(const void* src, float* dst, int64_t n);
void FromFloatQ8_1(const float* src, void* dst, int64_t n);

void ToFloatQ2_K(const void* src, float* dst, int64_t n);
float VecDotQ2_KQ8_K(int64_t n, const void* x, const void* y);
void ToFloatQ3_K(const void* src, float* dst, int64_t n);
float VecDotQ3_KQ8_K(int64_t n, const void* x, const void* y);
void ToFloatQ4_K(const void* src, float* dst, int64_t n);
float VecDotQ4_KQ8_K(int64_t n, const void* x, const void* y);
void ToFloatQ5_K(const void* src, float* dst, int64_t n);
float VecDotQ5_KQ8_K(int64_t n, const void* x, const void* y);
void ToFloatQ6_K(const void* src, float* dst, int64_t n);
float VecDotQ6_KQ8_K(int64_t n, const void* x, const void* y);
void ToFloatQ8_K(const void* src, float* dst, int64_t n);
void FromFloatQ8_K(const float* src, void* dst, int64_t n);

// 2^(e - 128): MXFP4's E8M0 scale, halved to match kMxfp4Values (quant_blocks.h).
float Mxfp4Scale(uint8_t e);
void ToFloatMxfp4(const void* src, float* dst, int64_t n);
float VecDotMxfp4Q8_0(int64_t n, const void* x, const void* y);

}  // namespace scalar

// Defined only in x86-64 builds (quant_avx2.cpp, quant_k_avx2.cpp); call only where
// CpuSupports(Isa::kAvx2).
namespace avx2 {

float VecDotF32(int64_t n, const void* x, const void* y);
void ToFloatF16(const void* src, float* dst, int64_t n);
void FromFloatF16(const float* src, void* dst, int64_t n);
float VecDotF16(int64_t n, const void* x, const void* y);
void ToFloatBF16(const void* src, float* dst, int64_t n);
float VecDotBF16(int64_t n, const void* x, const void* y);

void ToFloatQ4_0(const void* src, float* dst, int64_t n);
float VecDotQ4_0Q8_0(int64_t n, const void* x, const void* y);
void ToFloatQ4_1(const void* src, float* dst, int64_t n);
float VecDotQ4_1Q8_1(int64_t n, const void* x, const void* y);
float VecDotQ5_0Q8_0(int64_t n, const void* x, const void* y);
float VecDotQ5_1Q8_1(int64_t n, const void* x, const void* y);
void ToFloatQ8_0(const void* src, float* dst, int64_t n);
void FromFloatQ8_0(const float* src, void* dst, int64_t n);
float VecDotQ8_0Q8_0(int64_t n, const void* x, const void* y);
void FromFloatQ8_1(const float* src, void* dst, int64_t n);

float VecDotQ4_KQ8_K(int64_t n, const void* x, const void* y);
float VecDotQ5_KQ8_K(int64_t n, const void* x, const void* y);
float VecDotQ6_KQ8_K(int64_t n, const void* x, const void* y);
void FromFloatQ8_K(const float* src, void* dst, int64_t n);

void ToFloatMxfp4(const void* src, float* dst, int64_t n);
float VecDotMxfp4Q8_0(int64_t n, const void* x, const void* y);

}  // namespace avx2

}  // namespace kvmem::kernels
