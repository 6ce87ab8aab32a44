// Plain C++ references for the transformer family: attention in ONNX Attention order (scale, softcap,
// mask, softmax in double), evaluated element by element with no tiling.
#pragma once
#include <cstdint>
#include <vector>

#include "layers/attention.hpp"

namespace cldl::ref {

// Q, K, V, Y laid out as cfg.layout says (K/V with cfg.eff_capacity() positions). mask_f / mask_b per
// cfg.mask with cfg.mask_shape; kv_lens (as int64) per batch when cfg.kv_lens != none. Fully masked rows
// give zeros, as the op documents.
std::vector<float> attention(const AttentionConfig& cfg, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const std::vector<float>* mask_f = nullptr,
                             const std::vector<uint8_t>* mask_b = nullptr,
                             const std::vector<int64_t>* kv_lens = nullptr);

}  // namespace cldl::ref
