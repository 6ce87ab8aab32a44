// Quantization references (see quant_ref.hpp).
#include "quant_ref.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/minifloat.hpp"

namespace cldl::ref {

int64_t quant_param_index(int64_t i, const Dims& xd, const Dims& sd, int axis, int block) {
  if (numel(sd) == 1) return 0;
  const int r = int(xd.size());
  const int ax = axis < 0 ? axis + r : axis;
  Dims c = unravel(i, xd);
  if (block == 0) return c[size_t(ax)];
  c[size_t(ax)] /= block;
  int64_t k = 0;
  for (size_t d = 0; d < sd.size(); ++d) k = k * sd[d] + c[d];
  return k;
}

std::vector<int> quantize_int(const std::vector<float>& x, const Dims& xd, const std::vector<float>& scale,
                              const Dims& sd, const std::vector<int>& zp, int axis, int block, int lo, int hi) {
  std::vector<int> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t p = quant_param_index(int64_t(i), xd, sd, axis, block);
    const double q = std::nearbyint(double(x[i] / scale[size_t(p)])) + (zp.empty() ? 0 : zp[size_t(p)]);
    y[i] = std::isnan(q) ? lo : int(std::clamp(q, double(lo), double(hi)));
  }
  return y;
}

std::vector<uint8_t> quantize_minifloat(const std::vector<float>& x, const Dims& xd, const std::vector<float>& scale,
                                        const Dims& sd, DType t, bool saturate, int axis, int block) {
  std::vector<uint8_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = float_to_minifloat(t, x[i] / scale[size_t(quant_param_index(int64_t(i), xd, sd, axis, block))], saturate);
  return y;
}

std::vector<float> dequantize(const std::vector<double>& x, const Dims& xd, const std::vector<float>& scale,
                              const Dims& sd, const std::vector<double>& zp, int axis, int block) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t p = quant_param_index(int64_t(i), xd, sd, axis, block);
    y[i] = float(x[i] - (zp.empty() ? 0.0 : zp[size_t(p)])) * scale[size_t(p)];
  }
  return y;
}

std::vector<int32_t> matmul_integer(const std::vector<int>& a, const Dims& da, const std::vector<int>& b,
                                    const Dims& db, const std::vector<int>& azp, const std::vector<int>& bzp,
                                    Dims& out_dims) {
  // Promote 1-D operands, broadcast the batch dims, then drop the promoted dims from the result.
  Dims a2 = da.size() == 1 ? Dims{1, da[0]} : da, b2 = db.size() == 1 ? Dims{db[0], 1} : db;
  const int64_t M = a2[a2.size() - 2], K = a2.back(), N = b2.back();
  Dims ab(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2);
  Dims batch = bcast_shape(ab, bb);
  std::vector<int32_t> out(size_t(numel(batch) * M * N));
  for (int64_t t = 0; t < numel(batch); ++t) {
    Dims c = unravel(t, batch);
    const int64_t oa = bcast_index(c, ab) * M * K, ob = bcast_index(c, bb) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        int64_t s = 0;
        const int za = azp.empty() ? 0 : azp[azp.size() == 1 ? 0 : size_t(m)];
        const int zb = bzp.empty() ? 0 : bzp[bzp.size() == 1 ? 0 : size_t(n)];
        for (int64_t k = 0; k < K; ++k) s += int64_t(a[size_t(oa + m * K + k)] - za) * (b[size_t(ob + k * N + n)] - zb);
        out[size_t((t * M + m) * N + n)] = int32_t(s);
      }
  }
  out_dims = batch;
  if (da.size() > 1) out_dims.push_back(M);
  if (db.size() > 1) out_dims.push_back(N);
  return out;
}

std::vector<int32_t> conv_integer(const std::vector<int>& x, const Dims& xd, const std::vector<int>& w, const Dims& wd,
                                  int xzp, const std::vector<int>& wzp, const Dims& strides, const Dims& dilations,
                                  const Dims& pads, int group, Dims& out_dims) {
  const size_t n = xd.size() - 2;
  // Right-align the spatial dims into (D, H, W).
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, o[3] = {1, 1, 1};
  out_dims = {xd[0], wd[0]};
  for (size_t i = 0; i < n; ++i) {
    const size_t a = 3 - n + i;
    in[a] = xd[2 + i];
    k[a] = wd[2 + i];
    s[a] = strides[i];
    d[a] = dilations[i];
    pb[a] = pads[i];
    o[a] = (in[a] + pads[i] + pads[i + n] - ((k[a] - 1) * d[a] + 1)) / s[a] + 1;
    out_dims.push_back(o[a]);
  }
  const int64_t N = xd[0], C = xd[1], M = wd[0], cpg = C / group, mpg = M / group;
  std::vector<int32_t> y(size_t(numel(out_dims)));
  size_t at = 0;
  for (int64_t b = 0; b < N; ++b)
    for (int64_t m = 0; m < M; ++m) {
      const int zw = wzp.empty() ? 0 : wzp[wzp.size() == 1 ? 0 : size_t(m)];
      for (int64_t od = 0; od < o[0]; ++od)
        for (int64_t oh = 0; oh < o[1]; ++oh)
          for (int64_t ow = 0; ow < o[2]; ++ow) {
            int64_t acc = 0;
            for (int64_t c = 0; c < cpg; ++c)
              for (int64_t i = 0; i < k[0]; ++i)
                for (int64_t j = 0; j < k[1]; ++j)
                  for (int64_t l = 0; l < k[2]; ++l) {
                    const int64_t zd = od * s[0] - pb[0] + i * d[0], zh = oh * s[1] - pb[1] + j * d[1],
                                  zx = ow * s[2] - pb[2] + l * d[2];
                    if (zd < 0 || zd >= in[0] || zh < 0 || zh >= in[1] || zx < 0 || zx >= in[2]) continue;
                    const int64_t ci = (m / mpg) * cpg + c;
                    const int xv = x[size_t((((b * C + ci) * in[0] + zd) * in[1] + zh) * in[2] + zx)] - xzp;
                    const int wv = w[size_t((((m * cpg + c) * k[0] + i) * k[1] + j) * k[2] + l)] - zw;
                    acc += int64_t(xv) * wv;
                  }
            y[at++] = int32_t(acc);
          }
    }
  return y;
}

int requantize(int32_t acc, float m, int zp, int lo, int hi) {
  const double v = std::nearbyint(double(acc) * double(m)) + zp;
  return int(std::clamp(v, double(lo), double(hi)));
}

}  // namespace cldl::ref
