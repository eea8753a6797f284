#include "model/moe_ffn.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace kvmem::model {
namespace {

// ggml's clamp of the weights' sum before renormalizing: the smallest normal f16.
constexpr float kMinWeightSum = 6.103515625e-5f;

}  // namespace

void SelectExperts(const ModelSpec& spec, const float* probs, int n_tokens, int32_t* chosen,
                   float* weights) {
  const int ne = spec.n_expert, k = spec.n_expert_used;
  std::vector<int32_t> order(ne);
  for (int t = 0; t < n_tokens; ++t) {
    const float* p = probs + static_cast<size_t>(t) * ne;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    int32_t* c = chosen + static_cast<size_t>(t) * k;
    float* w = weights + static_cast<size_t>(t) * k;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      c[j] = order[j];
      w[j] = p[order[j]];
      sum += w[j];
    }
    if (spec.expert_weights_norm) {
      const float d = std::max(sum, kMinWeightSum);
      for (int j = 0; j < k; ++j) w[j] /= d;
    }
  }
}

void MoeFfn(const ModelSpec& spec, const LayerWeights& w, const float* xn, int n_tokens, float* out,
            MoeScratch& s, ThreadPool* pool) {
  const int ne = spec.n_expert, k = spec.n_expert_used, d = spec.n_embd, nf = spec.n_ff_exp;
  const size_t n = static_cast<size_t>(n_tokens);
  s.router.resize(n * ne);
  s.chosen.resize(n * k);
  s.weights.resize(n * k);
  kernels::MatMul(w.router, xn, n_tokens, s.router.data(), pool);
  const auto& ops = kernels::Ops();
  for (size_t t = 0; t < n; ++t) ops.softmax(s.router.data() + t * ne, ne);
  SelectExperts(spec, s.router.data(), n_tokens, s.chosen.data(), s.weights.data());

  // Per expert, the (token, slot) pairs that chose it, in token order.
  std::vector<std::vector<int32_t>> slots(ne);
  for (size_t i = 0; i < n * k; ++i) slots[s.chosen[i]].push_back(static_cast<int32_t>(i));
  std::memset(out, 0, n * d * sizeof(float));
  s.x.resize(n * d);
  s.gate.resize(n * nf);
  s.up.resize(n * nf);
  s.y.resize(n * d);
  for (int e = 0; e < ne; ++e) {
    const std::vector<int32_t>& mine = slots[e];
    if (mine.empty()) continue;
    const int m = static_cast<int>(mine.size());
    for (int r = 0; r < m; ++r) {
      std::memcpy(s.x.data() + static_cast<size_t>(r) * d, xn + (mine[r] / k) * size_t(d),
                  d * sizeof(float));
    }
    const kernels::MatMulOut gate_up[] = {{&w.exp_gate[e], s.gate.data()},
                                          {&w.exp_up[e], s.up.data()}};
    kernels::MatMuls(gate_up, s.x.data(), m, pool);
    ops.swiglu(s.gate.data(), s.up.data(), s.gate.data(), static_cast<int64_t>(m) * nf);
    kernels::MatMul(w.exp_down[e], s.gate.data(), m, s.y.data(), pool);
    for (int r = 0; r < m; ++r) {
      ops.axpy(s.weights[mine[r]], s.y.data() + static_cast<size_t>(r) * d,
               out + (mine[r] / k) * size_t(d), d);
    }
  }
}

}  // namespace kvmem::model
