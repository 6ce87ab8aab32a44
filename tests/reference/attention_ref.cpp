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
