// Plain C++ references for the transformer family: attention in ONNX Attention order (scale, softcap,
// mask, softmax in double), evaluated element by element with no tiling.
#pragma once
#include <cstdint>
#include <vector>

#include "layers/attention.hpp"
#include "layers/transformer.hpp"

namespace cldl::ref {

// Q, K, V, Y laid out as cfg.layout says (K/V with cfg.eff_capacity() positions). mask_f / mask_b per
// cfg.mask with cfg.mask_shape; kv_lens (as int64) per batch when cfg.kv_lens != none. Fully masked rows
// give zeros, as the op documents.
std::vector<float> attention(const AttentionConfig& cfg, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const std::vector<float>* mask_f = nullptr,
                             const std::vector<uint8_t>* mask_b = nullptr,
                             const std::vector<int64_t>* kv_lens = nullptr);

// LayerNorm / RMSNorm of x (+ residual when given) over cfg.cols() per row, in double.
std::vector<float> norm(const LayerNormConfig& cfg, const std::vector<float>& x, const std::vector<float>* residual,
                        const std::vector<float>& scale, const std::vector<float>* bias);
// Rotary embedding, ONNX formulas applied pair by pair.
std::vector<float> rotary(const RotaryConfig& cfg, const std::vector<float>& x, const std::vector<float>& cos_cache,
                          const std::vector<float>& sin_cache, const std::vector<int64_t>* position_ids);
// Gather rows of table [V, E]; negative ids wrap once.
std::vector<float> embedding(const std::vector<float>& table, int64_t vocab, int64_t dim,
                             const std::vector<int64_t>& ids);
// silu(a) * b over [rows, 2F] -> [rows, F].
std::vector<float> swiglu(const std::vector<float>& x, int64_t rows, int64_t F);

}  // namespace cldl::ref
