// Reference attention: materialises each score row, in double.
#include "attention_ref.hpp"

#include <cmath>
#include <limits>

namespace cldl::ref {

std::vector<float> attention(const AttentionConfig& c, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const std::vector<float>* mask_f,
                             const std::vector<uint8_t>* mask_b, const std::vector<int64_t>* kv_lens) {
  const int64_t B = c.batch, Hq = c.q_heads, Hk = c.eff_kv_heads(), Sq = c.q_len, Skv = c.kv_len;
  const int64_t D = c.head_size, Dv = c.eff_v_head_size(), C = c.eff_capacity();
  const bool bhsd = c.layout == AttentionLayout::bhsd, kv_bhsd = c.eff_kv_layout() == AttentionLayout::bhsd;
  auto at = [&](int64_t b, int64_t h, int64_t s, int64_t H, int64_t S, int64_t dim) {
    return bhsd ? ((b * H + h) * S + s) * dim : (b * S + s) * H * dim + h * dim;
  };
  auto kv_at = [&](int64_t b, int64_t h, int64_t s, int64_t H, int64_t S, int64_t dim) {
    return kv_bhsd ? ((b * H + h) * S + s) * dim : (b * S + s) * H * dim + h * dim;
  };
  Shape m = c.mask_shape;
  while (c.mask != AttentionMask::none && m.rank() < 4) m.dims.insert(m.dims.begin(), 1);
  const double scale = c.eff_scale();
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<float> y(size_t(B * Hq * Sq * Dv));
  std::vector<double> s(static_cast<size_t>(Skv));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = kv_lens ? std::min<int64_t>(Skv, (*kv_lens)[size_t(b)]) : Skv;
    const int64_t coff = c.causal_offset_from_lens ? len - Sq : c.causal_offset;
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hk);
      for (int64_t i = 0; i < Sq; ++i) {
        double mx = ninf;
        for (int64_t j = 0; j < Skv; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(q[size_t(at(b, h, i, Hq, Sq, D) + d)]) * double(k[size_t(kv_at(b, hk, j, Hk, C, D) + d)]);
          double x = dot * scale;
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          bool ok = j < len && (!c.causal || j <= i + coff);
          if (c.mask != AttentionMask::none) {
            if (j >= m[3]) {
              ok = false;
            } else {
              size_t mi = size_t(((m[0] == 1 ? 0 : b) * m[1] + (m[1] == 1 ? 0 : h)) * m[2] * m[3] +
                                 (m[2] == 1 ? 0 : i) * m[3] + j);
              if (c.mask == AttentionMask::additive) x += (*mask_f)[mi];
              else ok = ok && (*mask_b)[mi] != 0;
            }
          }
          s[size_t(j)] = ok ? x : ninf;
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Skv; ++j) {
          s[size_t(j)] = mx == ninf ? 0.0 : std::exp(s[size_t(j)] - mx);
          sum += s[size_t(j)];
        }
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < Skv; ++j)
            if (s[size_t(j)] != 0) acc += s[size_t(j)] * double(v[size_t(kv_at(b, hk, j, Hk, C, Dv) + d)]);
          y[size_t(at(b, h, i, Hq, Sq, Dv) + d)] = float(sum > 0 ? acc / sum : 0.0);
        }
      }
    }
  }
  return y;
}

}  // namespace cldl::ref

namespace cldl::ref {

std::vector<float> norm(const LayerNormConfig& cfg, const std::vector<float>& x, const std::vector<float>* residual,
                        const std::vector<float>& scale, const std::vector<float>* bias) {
  const int64_t R = cfg.rows(), N = cfg.cols();
  std::vector<float> y(x.size());
  std::vector<double> v(static_cast<size_t>(N));
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < N; ++i) {
      size_t k = size_t(r * N + i);
      v[size_t(i)] = double(x[k]) + (residual ? double((*residual)[k]) : 0.0);
      mean += v[size_t(i)];
    }
    mean = cfg.rms ? 0.0 : mean / double(N);
    for (int64_t i = 0; i < N; ++i) var += (v[size_t(i)] - mean) * (v[size_t(i)] - mean);
    const double inv = 1.0 / std::sqrt(var / double(N) + double(cfg.epsilon));
    for (int64_t i = 0; i < N; ++i) {
      double o = (v[size_t(i)] - mean) * inv * double(scale[size_t(i)]);
      if (bias && !cfg.rms) o += double((*bias)[size_t(i)]);
      y[size_t(r * N + i)] = float(o);
    }
  }
  return y;
}

std::vector<float> rotary(const RotaryConfig& c, const std::vector<float>& x, const std::vector<float>& cos_cache,
                          const std::vector<float>& sin_cache, const std::vector<int64_t>* position_ids) {
  std::vector<float> y = x;
  const int64_t H = c.heads, S = c.seq, D = c.head_size, rot = c.rotary_dim ? c.rotary_dim : D, half = rot / 2;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t base = c.seq_first ? (b * S + s) * H * D + h * D : ((b * H + h) * S + s) * D;
        const int64_t row = position_ids ? (*position_ids)[size_t(b * S + s)] : b * S + s;
        for (int64_t i = 0; i < half; ++i) {
          const double cs = cos_cache[size_t(row * half + i)], sn = sin_cache[size_t(row * half + i)];
          const int64_t i0 = c.interleaved ? 2 * i : i, i1 = c.interleaved ? 2 * i + 1 : i + half;
          const double x0 = x[size_t(base + i0)], x1 = x[size_t(base + i1)];
          y[size_t(base + i0)] = float(x0 * cs - x1 * sn);
          y[size_t(base + i1)] = float(x1 * cs + x0 * sn);
        }
      }
  return y;
}

std::vector<float> embedding(const std::vector<float>& table, int64_t vocab, int64_t dim,
                             const std::vector<int64_t>& ids) {
  std::vector<float> y;
  for (int64_t id : ids) {
    if (id < 0) id += vocab;
    for (int64_t e = 0; e < dim; ++e) y.push_back(id >= 0 && id < vocab ? table[size_t(id * dim + e)] : 0.0f);
  }
  return y;
}

std::vector<float> swiglu(const std::vector<float>& x, int64_t rows, int64_t F) {
  std::vector<float> y(size_t(rows * F));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t f = 0; f < F; ++f) {
      double a = x[size_t(r * 2 * F + f)], g = x[size_t(r * 2 * F + F + f)];
      y[size_t(r * F + f)] = float(a / (1.0 + std::exp(-a)) * g);
    }
  return y;
}

}  // namespace cldl::ref
