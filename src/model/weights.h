// Views of a model's tensors: matrices point into the mmap'd GGUF (no copy); 1-D tensors (norm
// weights, biases) are converted once to owned float vectors since they are tiny and read every
// token. Thread-safe for concurrent reads.
#pragma once

#include <vector>

#include "kernels/matmul.h"

namespace kvmem::model {

struct LayerWeights {
  std::vector<float> attn_norm;       // (n_embd)
  kernels::WeightMatrix wq;           // (q_dim, n_embd)
  kernels::WeightMatrix wk;           // (k_dim, n_embd)
  kernels::WeightMatrix wv;           // (v_dim, n_embd)
  kernels::WeightMatrix wo;           // (n_embd, n_heads * head_dim_v)
  std::vector<float> bq, bk, bv;      // (q_dim), (k_dim), (v_dim); empty unless spec.qkv_bias
  std::vector<float> bo;              // (n_embd); empty unless spec.attn_out_bias
  std::vector<float> attn_sinks;      // (n_heads); empty unless spec.attn_sinks
  std::vector<float> q_norm, k_norm;  // (head_dim_k); empty unless spec.qk_norm
  std::vector<float> attn_post_norm;  // (n_embd); empty unless spec.post_norms
  std::vector<float> ffn_norm;        // (n_embd)
  std::vector<float> ffn_post_norm;   // (n_embd); empty unless spec.post_norms
  kernels::WeightMatrix w_gate;       // (n_ff, n_embd)
  kernels::WeightMatrix w_up;         // (n_ff, n_embd)
  kernels::WeightMatrix w_down;       // (n_embd, n_ff)
  // Mixture of experts (spec.n_expert > 0) instead of w_gate/w_up/w_down: the router and, per
  // expert, its slice of the 3-D ffn_{gate,up,down}_exps tensors.
  kernels::WeightMatrix router;                 // (n_expert, n_embd)
  std::vector<kernels::WeightMatrix> exp_gate;  // (n_expert) x (n_ff_exp, n_embd)
  std::vector<kernels::WeightMatrix> exp_up;    // (n_expert) x (n_ff_exp, n_embd)
  std::vector<kernels::WeightMatrix> exp_down;  // (n_expert) x (n_embd, n_ff_exp)
  // spec.moe_bias: (n_expert), (n_expert, n_ff_exp) twice, (n_expert, n_embd); else empty.
  std::vector<float> router_bias, exp_gate_bias, exp_up_bias, exp_down_bias;
};

struct ModelWeights {
  kernels::WeightMatrix tok_embd;  // (n_vocab, n_embd)
  std::vector<float> output_norm;  // (n_embd)
  kernels::WeightMatrix output;    // (n_vocab, n_embd); == tok_embd when tied
  std::vector<LayerWeights> layers;
};

}  // namespace kvmem::model
