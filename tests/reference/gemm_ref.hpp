// Plain C++ reference GEMM (double accumulation) with the exact semantics of cldl::Gemm: transposes,
// leading dimensions, strided batch (stride 0 = broadcast), alpha/beta, bias per column/row, activation.
#pragma once
#include <vector>

#include "layers/gemm.hpp"

namespace cldl::ref {

// `c` is read (beta) and written in place; `bias` may be null when cfg.bias is none.
void gemm(const GemmConfig& cfg, const float* a, const float* b, float* c, const float* bias);

}  // namespace cldl::ref
