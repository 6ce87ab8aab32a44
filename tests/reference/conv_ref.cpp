// Reference convolutions: direct loops in double, as written in the ONNX operator definitions.
#include "tests/reference/conv_ref.hpp"

#include <cmath>
#include <stdexcept>

namespace cldl::ref {

double act_ref(const Activation& a, double v) {
  switch (a.kind) {
    case Act::none: return v;
    case Act::relu: return v > 0 ? v : 0;
    case Act::leaky_relu: return v >= 0 ? v : a.alpha * v;
    case Act::sigmoid: return 1.0 / (1.0 + std::exp(-v));
    case Act::silu: return v / (1.0 + std::exp(-v));                                 // x * sigmoid(x)
    case Act::hard_swish: return v * std::fmin(1.0, std::fmax(0.0, v / 6.0 + 0.5));  // ONNX HardSwish
    case Act::clip: return std::fmin(std::fmax(v, double(a.alpha)), double(a.beta));  // alpha = min, beta = max
    default: throw std::runtime_error("conv reference: activation not covered");
  }
}

std::vector<float> conv2d(const ConvParams& p, const float* x, const float* w, const float* bias, const Activation& act,
                          int64_t& OH, int64_t& OW) {
  OH = (p.H + p.PT + p.PB - ((p.KH - 1) * p.DH + 1)) / p.SH + 1;
  OW = (p.W + p.PL + p.PR - ((p.KW - 1) * p.DW + 1)) / p.SW + 1;
  const int64_t CG = p.C / p.groups, KG = p.K / p.groups;
  std::vector<float> y(size_t(p.N * p.K * OH * OW));
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t k = 0; k < p.K; ++k)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias ? bias[k] : 0.0;
          const int64_t grp = k / KG;
          for (int64_t cl = 0; cl < CG; ++cl)
            for (int64_t i = 0; i < p.KH; ++i)
              for (int64_t j = 0; j < p.KW; ++j) {
                const int64_t ih = oh * p.SH - p.PT + i * p.DH, iw = ow * p.SW - p.PL + j * p.DW;
                if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) continue;
                const int64_t c = grp * CG + cl;
                acc += double(x[((n * p.C + c) * p.H + ih) * p.W + iw]) * w[((k * CG + cl) * p.KH + i) * p.KW + j];
              }
          y[size_t(((n * p.K + k) * OH + oh) * OW + ow)] = float(act_ref(act, acc));
        }
  return y;
}

std::vector<float> conv_transpose2d(const ConvParams& p, const float* x, const float* w, const float* bias,
                                    const Activation& act, int64_t& OH, int64_t& OW) {
  int64_t OD = 0;
  return conv_transpose3d(p, x, w, bias, act, OD, OH, OW);
}

std::vector<float> conv_transpose3d(const ConvParams& p, const float* x, const float* w, const float* bias,
                                    const Activation& act, int64_t& OD, int64_t& OH, int64_t& OW) {
  OD = p.SD * (p.D - 1) + p.OPD + (p.KD - 1) * p.DD + 1 - p.PF - p.PBK;
  OH = p.SH * (p.H - 1) + p.OPH + (p.KH - 1) * p.DH + 1 - p.PT - p.PB;
  OW = p.SW * (p.W - 1) + p.OPW + (p.KW - 1) * p.DW + 1 - p.PL - p.PR;
  const int64_t CG = p.C / p.groups, KG = p.K / p.groups;
  std::vector<double> acc(size_t(p.N * p.K * OD * OH * OW), 0.0);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t c = 0; c < p.C; ++c)
      for (int64_t id = 0; id < p.D; ++id)
        for (int64_t ih = 0; ih < p.H; ++ih)
          for (int64_t iw = 0; iw < p.W; ++iw) {
            const double xv = x[(((n * p.C + c) * p.D + id) * p.H + ih) * p.W + iw];
            const int64_t grp = c / CG;
            for (int64_t kl = 0; kl < KG; ++kl)
              for (int64_t a = 0; a < p.KD; ++a)
                for (int64_t i = 0; i < p.KH; ++i)
                  for (int64_t j = 0; j < p.KW; ++j) {
                    const int64_t od = id * p.SD - p.PF + a * p.DD, oh = ih * p.SH - p.PT + i * p.DH,
                                  ow = iw * p.SW - p.PL + j * p.DW;
                    if (od < 0 || od >= OD || oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                    const int64_t k = grp * KG + kl;
                    acc[size_t((((n * p.K + k) * OD + od) * OH + oh) * OW + ow)] +=
                        xv * w[(((c * KG + kl) * p.KD + a) * p.KH + i) * p.KW + j];
                  }
          }
  std::vector<float> y(acc.size());
  const int64_t plane = OD * OH * OW;
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t k = int64_t(i) / plane % p.K;
    y[i] = float(act_ref(act, acc[i] + (bias ? bias[k] : 0.0)));
  }
  return y;
}

std::vector<float> batch_norm(const std::vector<float>& x, int64_t N, int64_t K, int64_t plane, const float* scale,
                              const float* b, const float* mean, const float* var, float eps) {
  std::vector<float> y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < plane; ++i) {
        const size_t at = size_t((n * K + k) * plane + i);
        y[at] = float(scale[k] * (double(x[at]) - mean[k]) / std::sqrt(double(var[k]) + eps) + b[k]);
      }
  return y;
}

}  // namespace cldl::ref
