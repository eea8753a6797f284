#include "model/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace kvmem::model {
namespace {

// ggml's clamp of the weights' sum before renormalizing: the smallest normal f16.
constexpr float kMinWeightSum = 6.103515625e-5f;

}  // namespace

void SelectExperts(const ModelSpec& spec, const float* logits, int n_tokens, int32_t* chosen,
                   float* weights) {
  const int ne = spec.n_expert, k = spec.n_expert_used;
  const auto& ops = kernels::Ops();
  std::vector<int32_t> order(ne);
  std::vector<float> probs(ne);
  for (int t = 0; t < n_tokens; ++t) {
    const float* z = logits + static_cast<size_t>(t) * ne;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    int32_t* c = chosen + static_cast<size_t>(t) * k;
    float* w = weights + static_cast<size_t>(t) * k;
    for (int j = 0; j < k; ++j) c[j] = order[j];
    if (spec.expert_gating == ExpertGating::kSoftmaxOfChosen) {
      for (int j = 0; j < k; ++j) w[j] = z[c[j]];
      ops.softmax(w, k);
      continue;
    }
    std::copy(z, z + ne, probs.begin());
    ops.softmax(probs.data(), ne);
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += w[j] = probs[c[j]];
    const float d = std::max(sum, kMinWeightSum);
    for (int j = 0; j < k; ++j) w[j] /= d;
  }
}

namespace {

void AddBias(const std::vector<float>& bias, int expert, int n, int rows, float* x) {
  if (bias.empty()) return;
  const float* b = bias.data() + static_cast<size_t>(expert) * n;
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(r) * n + i] += b[i];
  }
}

// GPT-OSS's clamped SwiGLU (ggml's swiglu_oai, alpha 1.702, limit 7), into gate.
void SwigluOai(float* gate, const float* up, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], kLimit);
    const float y = std::clamp(up[i], -kLimit, kLimit);
    gate[i] = x / (1.0f + std::exp(kAlpha * -x)) * (y + 1.0f);
  }
}

}  // namespace

void MoeFfn(const ModelSpec& spec, const LayerWeights& w, const float* xn, int n_tokens, float* out,
            MoeScratch& s, ThreadPool* pool) {
  const int ne = spec.n_expert, k = spec.n_expert_used, d = spec.n_embd, nf = spec.n_ff_exp;
  const size_t n = static_cast<size_t>(n_tokens);
  s.router.resize(n * ne);
  s.chosen.resize(n * k);
  s.weights.resize(n * k);
  kernels::MatMul(w.router, xn, n_tokens, s.router.data(), pool);
  const auto& ops = kernels::Ops();
  AddBias(w.router_bias, 0, ne, n_tokens, s.router.data());
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
    AddBias(w.exp_gate_bias, e, nf, m, s.gate.data());
    AddBias(w.exp_up_bias, e, nf, m, s.up.data());
    if (spec.ffn_act == FfnActivation::kSwigluOai) {
      SwigluOai(s.gate.data(), s.up.data(), static_cast<int64_t>(m) * nf);
    } else {
      ops.swiglu(s.gate.data(), s.up.data(), s.gate.data(), static_cast<int64_t>(m) * nf);
    }
    kernels::MatMul(w.exp_down[e], s.gate.data(), m, s.y.data(), pool);
    AddBias(w.exp_down_bias, e, d, m, s.y.data());
    for (int r = 0; r < m; ++r) {
      ops.axpy(s.weights[mine[r]], s.y.data() + static_cast<size_t>(r) * d,
               out + (mine[r] / k) * size_t(d), d);
    }
  }
}

}  // namespace kvmem::model
