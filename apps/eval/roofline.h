// The machine's limits that `kvmem bench` sets its results against (calm's "achieved GB/s
// against the bandwidth limit"): memory read bandwidth, the bound of decoding, and the fp32 FMA
// peak, the bound of prompt processing. Both are measured, not looked up, with the same thread
// count as the test they judge. Not thread-safe (each measurement owns the whole ThreadPool).
#pragma once

#include <cstddef>
#include <vector>

namespace kvmem::eval {

struct Roofline {
  int threads = 0;
  double bandwidth_gbps = 0;   // read bandwidth, 1e9 bytes/s
  double fma_peak_gflops = 0;  // 2 x FMAs x lanes / s, 1e9/s
  const char* fma_isa = "";    // the vector unit the peak was measured on
};

// The read probe's buffer: max(512 MiB, 2 x the model's weights), far past every cache level.
size_t RooflineBufferBytes(size_t weight_bytes);

// Measures each thread count in turn: the buffer is allocated and touched once, then each count
// reads it (best of several passes, T threads each summing a contiguous share with AVX2 loads)
// and runs independent FMAs (best of several runs, AVX-512F if present, else AVX2+FMA, else
// scalar). About 0.3 s per thread count plus filling the buffer.
std::vector<Roofline> MeasureRooflines(const std::vector<int>& threads, size_t buffer_bytes);

}  // namespace kvmem::eval
