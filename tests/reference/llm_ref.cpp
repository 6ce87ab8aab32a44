// References for the language-model ops: see llm_ref.hpp.
#include "llm_ref.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace cldl::ref {

std::vector<double> tensor_scatter(const std::vector<double>& cache, const std::vector<double>& update, int64_t batch,
                                   int64_t outer, int64_t L, int64_t S, int64_t inner,
                                   const std::vector<int64_t>& write_indices, bool circular) {
  std::vector<double> out = cache;
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t b = o / (outer / batch);
    for (int64_t j = 0; j < S; ++j) {
      int64_t pos = (write_indices.empty() ? 0 : write_indices[size_t(b)]) + j;
      if (circular) pos = ((pos % L) + L) % L;
      if (pos < 0 || pos >= L) throw std::out_of_range("tensor_scatter: linear write past the cache");
      for (int64_t i = 0; i < inner; ++i)
        out[size_t((o * L + pos) * inner + i)] = update[size_t((o * S + j) * inner + i)];
    }
  }
  return out;
}

std::vector<double> swiglu(const std::vector<double>& a, const std::vector<double>& b, double alpha) {
  std::vector<double> y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] / (1.0 + std::exp(-alpha * a[i])) * b[i];
  return y;
}

std::vector<double> causal_conv_with_state(const std::vector<double>& x, int64_t B, int64_t C, int64_t L,
                                           const std::vector<double>& w, int64_t K, const std::vector<double>& bias,
                                           const std::vector<double>& past, bool silu) {
  std::vector<double> y(size_t(B * C * L)), state(size_t(B * C * (K - 1)));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      // The padded sequence: past (or zeros), then x.
      std::vector<double> padded(size_t(K - 1 + L), 0.0);
      for (int64_t j = 0; j < K - 1; ++j)
        padded[size_t(j)] = past.empty() ? 0.0 : past[size_t((b * C + c) * (K - 1) + j)];
      for (int64_t l = 0; l < L; ++l) padded[size_t(K - 1 + l)] = x[size_t((b * C + c) * L + l)];
      for (int64_t l = 0; l < L; ++l) {
        double s = bias.empty() ? 0.0 : bias[size_t(c)];
        for (int64_t j = 0; j < K; ++j) s += w[size_t(c * K + j)] * padded[size_t(l + j)];
        y[size_t((b * C + c) * L + l)] = silu ? s / (1.0 + std::exp(-s)) : s;
      }
      for (int64_t j = 0; j < K - 1; ++j) state[size_t((b * C + c) * (K - 1) + j)] = padded[size_t(L + j)];
    }
  y.insert(y.end(), state.begin(), state.end());
  return y;
}

std::vector<double> linear_attention(const LinearAttentionRef& p, const std::vector<double>& q,
                                     const std::vector<double>& k, const std::vector<double>& v,
                                     const std::vector<double>& past, const std::vector<double>& decay,
                                     const std::vector<double>& beta) {
  const bool gated = p.rule == "gated" || p.rule == "gated_delta";
  const bool delta = p.rule == "delta" || p.rule == "gated_delta";
  const int64_t B = p.B, T = p.T, Hq = p.Hq, Hkv = p.Hkv, dk = p.dk, dv = p.dv, G = Hq / Hkv;
  const double scale = p.scale == 0 ? 1.0 / std::sqrt(double(dk)) : p.scale;
  std::vector<double> out(size_t(B * T * Hq * dv));
  std::vector<double> state = past.empty() ? std::vector<double>(size_t(B * Hkv * dk * dv), 0.0) : past;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hkv; ++h) {
      double* S = &state[size_t((b * Hkv + h) * dk * dv)];  // S[d * dv + m]
      for (int64_t t = 0; t < T; ++t) {
        const double* kt = &k[size_t(((b * T + t) * Hkv + h) * dk)];
        const double* vt = &v[size_t(((b * T + t) * Hkv + h) * dv)];
        if (gated)
          for (int64_t d = 0; d < dk; ++d) {
            const double g = p.decay_per_key ? decay[size_t(((b * T + t) * Hkv + h) * dk + d)]
                                             : decay[size_t((b * T + t) * Hkv + h)];
            for (int64_t m = 0; m < dv; ++m) S[d * dv + m] *= std::exp(g);
          }
        std::vector<double> u(vt, vt + dv);
        if (delta) {
          const double bt = beta[size_t((b * T + t) * p.beta_heads + (p.beta_heads == 1 ? 0 : h))];
          for (int64_t m = 0; m < dv; ++m) {
            double r = 0;  // (S^T k)[m]
            for (int64_t d = 0; d < dk; ++d) r += S[d * dv + m] * kt[d];
            u[size_t(m)] = bt * (vt[m] - r);
          }
        }
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t m = 0; m < dv; ++m) S[d * dv + m] += kt[d] * u[size_t(m)];
        for (int64_t hq = h * G; hq < (h + 1) * G; ++hq) {  // the query heads reading this KV head's state
          const double* qt = &q[size_t(((b * T + t) * Hq + hq) * dk)];
          for (int64_t m = 0; m < dv; ++m) {
            double o = 0;
            for (int64_t d = 0; d < dk; ++d) o += qt[d] * S[d * dv + m];
            out[size_t(((b * T + t) * Hq + hq) * dv + m)] = scale * o;
          }
        }
      }
    }
  out.insert(out.end(), state.begin(), state.end());
  return out;
}

std::vector<double> flex_attention(const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, int64_t B, int64_t Hq, int64_t Hkv, int64_t L,
                                   int64_t S, int64_t E, int64_t Ev, double scale, const FlexMod& score_mod,
                                   const FlexMod& prob_mod) {
  std::vector<double> y(size_t(B * Hq * L * Ev), 0.0);
  std::vector<double> p(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hkv);  // GQA: contiguous groups of query heads share a KV head
      for (int64_t i = 0; i < L; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          double s = 0;
          for (int64_t e = 0; e < E; ++e)
            s += q[size_t(((b * Hq + h) * L + i) * E + e)] * k[size_t(((b * Hkv + hk) * S + j) * E + e)];
          s *= scale;
          if (score_mod) s = score_mod(b, h, i, j, s);
          p[size_t(j)] = s;
          mx = std::max(mx, s);
        }
        double sum = 0;
        for (auto& x : p) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < S; ++j) {
          double pr = p[size_t(j)] / sum;
          if (prob_mod) pr = prob_mod(b, h, i, j, pr);
          for (int64_t e = 0; e < Ev; ++e)
            y[size_t(((b * Hq + h) * L + i) * Ev + e)] += pr * v[size_t(((b * Hkv + hk) * S + j) * Ev + e)];
        }
      }
    }
  return y;
}

}  // namespace cldl::ref
