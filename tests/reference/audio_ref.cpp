// Audio reference implementations (tests/reference/audio_ref.hpp): plain O(N^2) sums in std::complex<double>.
#include "audio_ref.hpp"

#include <cmath>
#include <complex>
#include <numbers>

namespace cldl::ref {

namespace {
using cd = std::complex<double>;

// exp(sign * 2 pi i * m / n), with m reduced mod n first so that the phase stays exact.
cd twiddle(int64_t m, int64_t n, double sign) {
  const double a = 2.0 * std::numbers::pi * double(m % n) / double(n);
  return {std::cos(a), sign * std::sin(a)};
}
}  // namespace

std::vector<double> dft(const std::vector<double>& x, const Shape& shape, int64_t axis, int64_t length, bool inverse,
                        bool onesided, Shape* out_shape) {
  const size_t r = shape.rank();
  const int64_t c = shape[r - 1], n_in = shape[size_t(axis)];
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < size_t(axis); ++i) outer *= shape[i];
  for (size_t i = size_t(axis) + 1; i + 1 < r; ++i) inner *= shape[i];
  const bool irfft = inverse && onesided;
  const int64_t n = length > 0 ? length : irfft ? 2 * (n_in - 1) : n_in;
  const int64_t m = !inverse && onesided ? n / 2 + 1 : n, cout = irfft ? 1 : 2;
  Shape os = shape;
  os.dims[size_t(axis)] = m;
  os.dims[r - 1] = cout;
  if (out_shape) *out_shape = os;
  std::vector<double> y(size_t(outer * m * inner * cout));
  auto in = [&](int64_t o, int64_t j, int64_t i) {
    const double* p = &x[size_t(((o * n_in + j) * inner + i) * c)];
    return cd(p[0], c == 2 ? p[1] : 0.0);
  };
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      // The length-n signal (or spectrum) this transform reads.
      std::vector<cd> s(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) {
        if (irfft) {  // numpy irfft: bins 0 .. n / 2 from the input, the rest their conjugates
          const int64_t k = t <= n / 2 ? t : n - t;
          const cd v = k < n_in ? in(o, k, i) : cd(0.0);
          s[size_t(t)] = t <= n / 2 ? v : std::conj(v);
        } else {
          s[size_t(t)] = t < n_in ? in(o, t, i) : cd(0.0);
        }
      }
      for (int64_t k = 0; k < m; ++k) {
        cd acc = 0.0;
        for (int64_t t = 0; t < n; ++t) acc += s[size_t(t)] * twiddle(k * t, n, inverse ? 1.0 : -1.0);
        if (inverse) acc /= double(n);
        double* q = &y[size_t(((o * m + k) * inner + i) * cout)];
        q[0] = acc.real();
        if (cout == 2) q[1] = acc.imag();
      }
    }
  return y;
}

std::vector<double> stft(const std::vector<double>& signal, const Shape& shape, int64_t step, int64_t frame_length,
                         const std::vector<double>& window, bool onesided, Shape* out_shape) {
  const int64_t batch = shape[0], len = shape[1], c = shape[2], n = frame_length;
  const int64_t frames = 1 + (len - n) / step;
  // Each frame as a [1, n, c] signal times the window, then a DFT along axis 1.
  std::vector<double> y;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t f = 0; f < frames; ++f) {
      std::vector<double> frame(size_t(n * c));
      for (int64_t t = 0; t < n; ++t)
        for (int64_t k = 0; k < c; ++k)
          frame[size_t(t * c + k)] =
              signal[size_t((b * len + f * step + t) * c + k)] * (window.empty() ? 1.0 : window[size_t(t)]);
      auto d = dft(frame, Shape{1, n, c}, 1, n, false, onesided);
      y.insert(y.end(), d.begin(), d.end());
    }
  if (out_shape) *out_shape = Shape{batch, frames, onesided ? n / 2 + 1 : n, 2};
  return y;
}

std::vector<double> window(int kind, int64_t size, bool periodic) {
  std::vector<double> w(static_cast<size_t>(size));
  const double d = double(periodic ? size : size - 1);
  for (int64_t i = 0; i < size; ++i) {
    if (d == 0) {  // one-point symmetric window
      w[size_t(i)] = 1.0;
      continue;
    }
    const double x = 2.0 * std::numbers::pi * double(i) / d;
    switch (kind) {
      case 0:
        w[size_t(i)] = 0.5 - 0.5 * std::cos(x);
        break;  // sin^2(x / 2)
      case 1:
        w[size_t(i)] = 0.54347826086956519 - 0.45652173913043481 * std::cos(x);
        break;  // 25/46, 21/46
      default:
        w[size_t(i)] = 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2.0 * x);
        break;
    }
  }
  return w;
}

std::vector<double> mel_weight_matrix(int64_t num_mel_bins, int64_t dft_length, int64_t sample_rate, double lower_hz,
                                      double upper_hz) {
  const int64_t bins = dft_length / 2 + 1, points = num_mel_bins + 2;
  const double low = 2595.0 * std::log1p(lower_hz / 700.0) / std::log(10.0);
  const double high = 2595.0 * std::log1p(upper_hz / 700.0) / std::log(10.0);
  const double step = (high - low) / double(points);
  std::vector<int64_t> p(static_cast<size_t>(points));
  for (int64_t i = 0; i < points; ++i) {
    const double hz = 700.0 * std::expm1((double(i) * step + low) / 2595.0 * std::log(10.0));
    p[size_t(i)] = int64_t(std::floor(double(dft_length + 1) * hz / double(sample_rate)));
  }
  std::vector<double> w(size_t(bins * num_mel_bins), 0.0);
  for (int64_t i = 0; i < num_mel_bins; ++i) {
    const int64_t left = p[size_t(i)], centre = p[size_t(i + 1)], right = p[size_t(i + 2)];
    if (centre == left) {
      w[size_t(centre * num_mel_bins + i)] = 1.0;
    } else {
      for (int64_t j = left; j <= centre; ++j)
        w[size_t(j * num_mel_bins + i)] = double(j - left) / double(centre - left);
    }
    for (int64_t j = centre; j < right; ++j)
      w[size_t(j * num_mel_bins + i)] = double(right - j) / double(right - centre);
  }
  return w;
}

}  // namespace cldl::ref
