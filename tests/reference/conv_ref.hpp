// Plain C++ references for Conv, ConvTranspose and BatchNorm (inference), double accumulation, NCHW.
// Geometry is given fully resolved (explicit pads) so the references share no code with layers/conv.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "layers/activation.hpp"

namespace cldl::ref {

struct ConvParams {
  int64_t N = 1, C = 1, H = 1, W = 1, K = 1, KH = 1, KW = 1;
  int64_t SH = 1, SW = 1, DH = 1, DW = 1, PT = 0, PL = 0, PB = 0, PR = 0, groups = 1;
  int64_t OPH = 0, OPW = 0;  // ConvTranspose output_padding
  // Depth of 3-D ConvTranspose (x [N][C][D][H][W], weight [C][K/groups][KD][KH][KW]); 1 / 0 for 2-D.
  int64_t D = 1, KD = 1, SD = 1, DD = 1, PF = 0, PBK = 0, OPD = 0;
};

// Activations the conv tests fuse (none, relu, leaky_relu, sigmoid), written out independently.
double act_ref(const Activation& a, double v);

// y[N][K][OH][OW]; weight [K][C/groups][KH][KW]; bias may be null.
std::vector<float> conv2d(const ConvParams& p, const float* x, const float* w, const float* bias, const Activation& act,
                          int64_t& OH, int64_t& OW);
// y[N][K][OH][OW]; weight [C][K/groups][KH][KW]; scatter formulation (each input tap adds to outputs).
std::vector<float> conv_transpose2d(const ConvParams& p, const float* x, const float* w, const float* bias,
                                    const Activation& act, int64_t& OH, int64_t& OW);
// The same over depth too: y[N][K][OD][OH][OW].
std::vector<float> conv_transpose3d(const ConvParams& p, const float* x, const float* w, const float* bias,
                                    const Activation& act, int64_t& OD, int64_t& OH, int64_t& OW);
// y = scale * (x - mean) / sqrt(var + eps) + b per channel of x[N][K][plane].
std::vector<float> batch_norm(const std::vector<float>& x, int64_t N, int64_t K, int64_t plane, const float* scale,
                              const float* b, const float* mean, const float* var, float eps);

}  // namespace cldl::ref
