// Plain C++ references for the language-model ops (TensorScatter, SwiGLU of two inputs, CausalConvWithState,
// LinearAttention), written from the ONNX 1.23 spec, in double, independent of kernels/llm.cl: each follows
// the spec's formulation (the scatter as its pseudocode's loop, the conv over the concatenated sequence, the
// recurrence on the whole state matrix with the GQA read by head repetition).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cldl::ref {

// cache [outer..., L, inner...] viewed as [outer, L, inner]; update [outer, S, inner]; write index per batch entry
// (outer / batch rows each; empty = zeros). Linear writes past L are an error (throws); circular wraps.
std::vector<double> tensor_scatter(const std::vector<double>& cache, const std::vector<double>& update, int64_t batch,
                                   int64_t outer, int64_t L, int64_t S, int64_t inner,
                                   const std::vector<int64_t>& write_indices, bool circular);

// a * sigmoid(alpha * a) * b.
std::vector<double> swiglu(const std::vector<double>& a, const std::vector<double>& b, double alpha);

// x [B, C, L], w [C, 1, K], bias [C] (empty: none), past [B, C, K - 1] (empty: zeros). Returns output [B, C, L]
// followed by present_state [B, C, K - 1] in one vector.
std::vector<double> causal_conv_with_state(const std::vector<double>& x, int64_t B, int64_t C, int64_t L,
                                           const std::vector<double>& w, int64_t K, const std::vector<double>& bias,
                                           const std::vector<double>& past, bool silu);

struct LinearAttentionRef {
  int64_t B = 1, T = 1, Hq = 1, Hkv = 1, dk = 1, dv = 1;
  std::string rule = "gated_delta";
  bool decay_per_key = true;  // decay [B, T, Hkv * dk], else [B, T, Hkv]
  int64_t beta_heads = 1;     // beta [B, T, beta_heads]
  double scale = 0;           // 0: 1 / sqrt(dk)
};
// q [B, T, Hq * dk], k [B, T, Hkv * dk], v [B, T, Hkv * dv], past [B, Hkv, dk, dv] (empty: zeros). Returns
// output [B, T, Hq * dv] followed by present_state [B, Hkv, dk, dv].
std::vector<double> linear_attention(const LinearAttentionRef& p, const std::vector<double>& q,
                                     const std::vector<double>& k, const std::vector<double>& v,
                                     const std::vector<double>& past, const std::vector<double>& decay,
                                     const std::vector<double>& beta);

// FlexAttention: q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev] -> [B, Hq, L, Ev]. score_mod / prob_mod
// (empty: none) map (b, h, i, j, value) to the modified score / probability.
using FlexMod = std::function<double(int64_t b, int64_t h, int64_t i, int64_t j, double x)>;
std::vector<double> flex_attention(const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, int64_t B, int64_t Hq, int64_t Hkv, int64_t L,
                                   int64_t S, int64_t E, int64_t Ev, double scale, const FlexMod& score_mod,
                                   const FlexMod& prob_mod);

}  // namespace cldl::ref
