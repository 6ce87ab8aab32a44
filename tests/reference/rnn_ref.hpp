// Plain C++ reference for ONNX RNN / LSTM / GRU (one layer, ONNX layouts, double accumulation), written
// from the ONNX operator formulas, independent of the kernels' weight re-layout and bias folding.
#pragma once
#include <cstdint>
#include <vector>

#include "layers/rnn.hpp"

namespace cldl::ref {

struct RnnOutputs {
  std::vector<float> Y, Yh, Yc;  // ONNX shapes for cfg.layout
};

// lens / h0 / c0 may be null (ONNX defaults: length T, zero states).
RnnOutputs rnn_layer(const RnnConfig& cfg, const RnnWeights& w, const std::vector<float>& X,
                     const std::vector<int32_t>* lens, const std::vector<float>* h0, const std::vector<float>* c0);

// Y of a layout-0 layer [T, D, B, H] as the next stacked layer's X [T, B, D*H].
std::vector<float> concat_directions(const std::vector<float>& Y, int64_t T, int64_t D, int64_t B, int64_t H);

}  // namespace cldl::ref
