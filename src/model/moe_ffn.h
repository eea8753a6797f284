// The mixture-of-experts FFN (ModelSpec::n_expert > 0), as llama.cpp's build_moe_ffn computes
// it for qwen3moe and GPT-OSS:
//
//   z = xn W_router^T (+ b_router)                       (n_expert) logits per token
//   E = the n_expert_used largest z (ties: lower index)  selection
//   w = softmax(z)_E / max(sum of them, 2^-14)           kSoftmaxNormalized (qwen3moe)
//     = softmax(z_E)                                     kSoftmaxOfChosen (GPT-OSS)
//   out = sum_{e in E} w_e (W_down_e act(xn W_gate_e^T + b, xn W_up_e^T + b) + b_down_e)
//
// act: SwiGLU, or GPT-OSS's clamped swiglu_oai (model_spec.h). Tokens are grouped by expert so
// each chosen expert's weights are read once per batch and the experts no token chose are not
// read at all (a decode step reads n_expert_used of them). Thread-safety: uses the given pool;
// one scratch per concurrent forward pass.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace kvmem::model {

struct MoeScratch {
  std::vector<float> router;    // (n_tokens, n_expert) logits, then probabilities
  std::vector<int32_t> chosen;  // (n_tokens, n_expert_used) expert ids
  std::vector<float> weights;   // (n_tokens, n_expert_used)
  std::vector<float> x;         // (n_tokens, n_embd) rows of the tokens of one expert
  std::vector<float> gate, up;  // (n_tokens, n_ff_exp)
  std::vector<float> y;         // (n_tokens, n_embd)
};

// out (n_tokens, n_embd) = the MoE FFN of xn (n_tokens, n_embd).
void MoeFfn(const ModelSpec& spec, const LayerWeights& w, const float* xn, int n_tokens, float* out,
            MoeScratch& s, ThreadPool* pool);

// The experts each token chose (n_tokens x n_expert_used ids) and their weights, from the
// router's logits (n_tokens x n_expert), per spec.expert_gating; exposed for tests.
void SelectExperts(const ModelSpec& spec, const float* logits, int n_tokens, int32_t* chosen,
                   float* weights);

}  // namespace kvmem::model
