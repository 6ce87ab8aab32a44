// Det and DynamicQuantizeLinear references.
#include "math_ref.hpp"

#include <algorithm>
#include <cmath>

namespace cldl::ref {

std::vector<double> det(const std::vector<double>& x, const Dims& d) {
  const int64_t n = d.back(), batch = int64_t(x.size()) / std::max<int64_t>(n * n, 1);
  std::vector<double> out(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> a(x.begin() + b * n * n, x.begin() + (b + 1) * n * n);
    double r = 1.0;
    for (int64_t c = 0; c < n; ++c) {
      int64_t p = c;
      for (int64_t i = c + 1; i < n; ++i)
        if (std::fabs(a[size_t(i * n + c)]) > std::fabs(a[size_t(p * n + c)])) p = i;
      if (a[size_t(p * n + c)] == 0.0) {
        r = 0.0;
        break;
      }
      if (p != c) {
        for (int64_t j = 0; j < n; ++j) std::swap(a[size_t(p * n + j)], a[size_t(c * n + j)]);
        r = -r;
      }
      r *= a[size_t(c * n + c)];
      for (int64_t i = c + 1; i < n; ++i) {
        const double f = a[size_t(i * n + c)] / a[size_t(c * n + c)];
        for (int64_t j = c; j < n; ++j) a[size_t(i * n + j)] -= f * a[size_t(c * n + j)];
      }
    }
    out[size_t(b)] = r;
  }
  return out;
}

void dynamic_quantize(const std::vector<float>& x, std::vector<uint8_t>& y, float& scale, uint8_t& zero_point) {
  float lo = 0.0f, hi = 0.0f;
  for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
  // f32 operations, each correctly rounded (the division in double, then rounded once: exact for f32 inputs).
  scale = float(double(hi - lo) / 255.0);
  auto sat = [](double v) { return uint8_t(std::clamp(v, 0.0, 255.0)); };
  zero_point = scale == 0.0f ? 0 : sat(std::nearbyint(0.0 - double(float(double(lo) / double(scale)))));
  y.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = scale == 0.0f ? zero_point : sat(std::nearbyint(double(float(double(x[i]) / double(scale)))) + zero_point);
}

}  // namespace cldl::ref
