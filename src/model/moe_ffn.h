// The mixture-of-experts FFN (ModelSpec::n_expert > 0), as llama.cpp's build_moe_ffn computes
// it for qwen3moe:
//
//   p = softmax(xn W_router^T)                          (n_expert) per token
//   E = the n_expert_used largest p (ties: lower index)  selection
//   w_e = p_e / max(sum_{E} p, 2^-14) if expert_weights_norm, else p_e
//   out = sum_{e in E} w_e * W_down_e (silu(xn W_gate_e^T) * (xn W_up_e^T))
//
// Tokens are grouped by expert so each selected expert's weights are read once per batch and
// the experts no token chose are not read at all (a decode step reads n_expert_used of them).
// Thread-safety: uses the given pool; one scratch per concurrent forward pass.
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

// The experts token rows chose (n_tokens x n_expert_used ids) and their weights, from router
// probabilities; exposed for tests.
void SelectExperts(const ModelSpec& spec, const float* probs, int n_tokens, int32_t* chosen,
                   float* weights);

}  // namespace kvmem::model
