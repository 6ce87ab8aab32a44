// Reference RNN / LSTM / GRU: a direct transcription of the ONNX operator definitions.
#include "tests/reference/rnn_ref.hpp"

#include <algorithm>

namespace cldl::ref {

RnnOutputs rnn_layer(const RnnConfig& c, const RnnWeights& w, const std::vector<float>& X,
                     const std::vector<int32_t>* lens, const std::vector<float>* h0, const std::vector<float>* c0) {
  const int64_t T = c.seq_length, B = c.batch, I = c.input_size, H = c.hidden_size, D = c.dirs(), G = c.gates();
  const std::vector<Activation> acts = c.resolved_activations();
  const float* W = w.W.as<float>();
  const float* R = w.R.as<float>();
  const float* Bi = w.B ? w.B->as<float>() : nullptr;
  const float* P = w.P ? w.P->as<float>() : nullptr;
  auto xat = [&](int64_t t, int64_t b, int64_t k) { return c.layout == 0 ? X[size_t((t * B + b) * I + k)] : X[size_t((b * T + t) * I + k)]; };
  auto yidx = [&](int64_t t, int64_t d, int64_t b, int64_t j) {
    return size_t(c.layout == 0 ? ((t * D + d) * B + b) * H + j : ((b * T + t) * D + d) * H + j);
  };
  auto sidx = [&](int64_t d, int64_t b, int64_t j) { return size_t(c.layout == 0 ? (d * B + b) * H + j : (b * D + d) * H + j); };
  RnnOutputs o;
  o.Y.assign(size_t(T * D * B * H), 0.0f);
  o.Yh.assign(size_t(D * B * H), 0.0f);
  o.Yc.assign(size_t(D * B * H), 0.0f);
  auto clip = [&](double v) { return c.clip > 0 ? std::clamp(v, -double(c.clip), double(c.clip)) : v; };
  auto f = [&](const Activation& a, double v) { return double(apply(a, float(v))); };
  for (int64_t d = 0; d < D; ++d) {
    const bool reverse = c.direction == RnnDirection::reverse || d == 1;
    const Activation* act = &acts[size_t(d * c.acts_per_dir())];
    const float* Wd = W + d * G * H * I;
    const float* Rd = R + d * G * H * H;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = lens ? (*lens)[size_t(b)] : T;
      std::vector<double> h(static_cast<size_t>(H), 0.0), cs(static_cast<size_t>(H), 0.0);
      for (int64_t j = 0; j < H; ++j) {
        if (h0) h[size_t(j)] = (*h0)[sidx(d, b, j)];
        if (c0) cs[size_t(j)] = (*c0)[sidx(d, b, j)];
      }
      // gate pre-activation parts: x W_g^T + Wb_g and h R_g^T + Rb_g
      auto xw = [&](int64_t t, int64_t row) {
        double s = 0;
        for (int64_t k = 0; k < I; ++k) s += double(xat(t, b, k)) * Wd[row * I + k];
        return s + (Bi ? Bi[d * 2 * G * H + row] : 0.0);
      };
      auto hr = [&](const std::vector<double>& hv, int64_t row) {
        double s = 0;
        for (int64_t k = 0; k < H; ++k) s += hv[size_t(k)] * Rd[row * H + k];
        return s + (Bi ? Bi[d * 2 * G * H + G * H + row] : 0.0);
      };
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = reverse ? len - 1 - step : step;
        std::vector<double> hn(static_cast<size_t>(H)), cn(static_cast<size_t>(H));
        for (int64_t j = 0; j < H; ++j) {
          if (c.cell == RnnCell::rnn) {
            hn[size_t(j)] = f(act[0], clip(xw(t, j) + hr(h, j)));
          } else if (c.cell == RnnCell::gru) {
            double z = f(act[0], clip(xw(t, j) + hr(h, j)));
            double r = f(act[0], clip(xw(t, H + j) + hr(h, H + j)));
            double hh;
            if (c.linear_before_reset) {
              hh = f(act[1], clip(xw(t, 2 * H + j) + r * hr(h, 2 * H + j)));
            } else {
              std::vector<double> rh(static_cast<size_t>(H));
              for (int64_t k = 0; k < H; ++k) {
                double rk = f(act[0], clip(xw(t, H + k) + hr(h, H + k)));
                rh[size_t(k)] = rk * h[size_t(k)];
              }
              hh = f(act[1], clip(xw(t, 2 * H + j) + hr(rh, 2 * H + j)));
            }
            hn[size_t(j)] = (1 - z) * hh + z * h[size_t(j)];
          } else {
            const double pi = P ? P[d * 3 * H + j] : 0, po = P ? P[d * 3 * H + H + j] : 0, pf = P ? P[d * 3 * H + 2 * H + j] : 0;
            double i = f(act[0], clip(xw(t, j) + hr(h, j) + pi * cs[size_t(j)]));
            double fg = c.input_forget ? 1 - i : f(act[0], clip(xw(t, 2 * H + j) + hr(h, 2 * H + j) + pf * cs[size_t(j)]));
            double g = f(act[1], clip(xw(t, 3 * H + j) + hr(h, 3 * H + j)));
            double cc = fg * cs[size_t(j)] + i * g;
            double og = f(act[0], clip(xw(t, H + j) + hr(h, H + j) + po * cc));
            cn[size_t(j)] = cc;
            hn[size_t(j)] = og * f(act[2], cc);
          }
        }
        h = hn;
        if (c.cell == RnnCell::lstm) cs = cn;
        for (int64_t j = 0; j < H; ++j) o.Y[yidx(t, d, b, j)] = float(h[size_t(j)]);
      }
      for (int64_t j = 0; j < H; ++j) {
        o.Yh[sidx(d, b, j)] = float(h[size_t(j)]);
        o.Yc[sidx(d, b, j)] = float(cs[size_t(j)]);
      }
    }
  }
  return o;
}

std::vector<float> concat_directions(const std::vector<float>& Y, int64_t T, int64_t D, int64_t B, int64_t H) {
  std::vector<float> out(Y.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j) out[size_t(((t * B + b) * D + d) * H + j)] = Y[size_t(((t * D + d) * B + b) * H + j)];
  return out;
}

}  // namespace cldl::ref
