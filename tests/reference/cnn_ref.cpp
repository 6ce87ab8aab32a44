// Plain C++ references for the CNN / tensor ops; see cnn_ref.hpp.
#include "cnn_ref.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cldl::ref {

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (auto v : d) n *= v;
  return n;
}

Dims unravel(int64_t i, const Dims& d) {
  Dims c(d.size());
  for (size_t k = d.size(); k-- > 0;) {
    c[k] = i % d[k];
    i /= d[k];
  }
  return c;
}

int64_t bcast_index(const Dims& c, const Dims& in) {
  int64_t idx = 0;
  size_t off = c.size() - in.size();
  for (size_t k = 0; k < in.size(); ++k) idx = idx * in[k] + (in[k] == 1 ? 0 : c[off + k]);
  return idx;
}

Dims bcast_shape(const Dims& a, const Dims& b) {
  size_t r = std::max(a.size(), b.size());
  Dims o(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    o[i] = x == 1 ? y : x;
  }
  return o;
}

std::vector<float> pool3d(const std::vector<float>& x, int N, int C, std::array<int, 3> in, const PoolParams& p,
                          std::array<int, 3>& out, std::vector<int64_t>* idx) {
  for (int a = 0; a < 3; ++a) {
    int ek = (p.k[a] - 1) * p.d[a] + 1, num = in[a] + p.pb[a] + p.pe[a] - ek;
    int o = (p.ceil_mode ? (num + p.s[a] - 1) / p.s[a] : num / p.s[a]) + 1;
    if (p.ceil_mode && (o - 1) * p.s[a] >= in[a] + p.pb[a]) --o;  // the last window must start inside
    out[a] = o;
  }
  const int64_t plane = int64_t(in[0]) * in[1] * in[2], oplane = int64_t(out[0]) * out[1] * out[2];
  std::vector<float> y(size_t(N) * C * oplane);
  if (idx) idx->assign(y.size(), -1);
  for (int64_t nc = 0; nc < int64_t(N) * C; ++nc)
    for (int64_t o = 0; o < oplane; ++o) {
      int oc[3] = {int(o / (int64_t(out[1]) * out[2])), int(o / out[2] % out[1]), int(o % out[2])};
      const bool mx = p.max && p.lp == 0;
      double acc = mx ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t best = -1;
      int valid = 0;
      for (int a = 0; a < p.k[0]; ++a)
        for (int b = 0; b < p.k[1]; ++b)
          for (int c = 0; c < p.k[2]; ++c) {
            int pos[3] = {oc[0] * p.s[0] - p.pb[0] + a * p.d[0], oc[1] * p.s[1] - p.pb[1] + b * p.d[1],
                          oc[2] * p.s[2] - p.pb[2] + c * p.d[2]};
            bool inside = true;
            for (int q = 0; q < 3; ++q) inside = inside && pos[q] >= 0 && pos[q] < in[q];
            if (!inside) continue;
            int64_t at = (int64_t(pos[0]) * in[1] + pos[1]) * in[2] + pos[2];
            double v = x[nc * plane + at];
            if (p.column_major) at = pos[0] + (int64_t(pos[1]) + int64_t(pos[2]) * in[1]) * in[0];
            if (p.lp) {
              acc += std::pow(std::fabs(v), p.lp);
            } else if (mx) {
              if (v > acc || best < 0) acc = v, best = at;
            } else {
              acc += v;
            }
            ++valid;
          }
      if (p.lp) {
        acc = std::pow(acc, 1.0 / p.lp);
      } else if (!mx) {
        double div = valid;
        if (p.count_include_pad) {
          div = 1;
          for (int q = 0; q < 3; ++q) {  // taps before the padded end
            int s0 = oc[q] * p.s[q] - p.pb[q], t = 0;
            for (int i = 0; i < p.k[q]; ++i) t += s0 + i * p.d[q] < in[q] + p.pe[q];
            div *= t;
          }
        }
        acc /= div;
      }
      y[nc * oplane + o] = float(acc);
      if (idx) (*idx)[nc * oplane + o] = nc * plane + best;
    }
  return y;
}

std::vector<float> lrn(const std::vector<float>& x, int N, int C, int64_t spatial, int size, float alpha, float beta,
                       float bias) {
  std::vector<float> y(x.size());
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int64_t i = 0; i < spatial; ++i) {
        double s = 0;
        for (int k = std::max(0, c - (size - 1) / 2); k <= std::min(C - 1, c + size / 2); ++k) {  // ceil((size-1)/2)
          const double v = x[size_t((int64_t(n) * C + k) * spatial + i)];
          s += v * v;
        }
        const size_t at = size_t((int64_t(n) * C + c) * spatial + i);
        y[at] = float(x[at] / std::pow(bias + alpha / size * s, double(beta)));
      }
  return y;
}

std::vector<float> group_norm(const std::vector<float>& x, int N, int C, int64_t spatial, int G,
                              const std::vector<float>& scale, const std::vector<float>& bias, float eps) {
  std::vector<float> y(x.size());
  int64_t cg = C / G, len = cg * spatial;
  for (int n = 0; n < N; ++n)
    for (int g = 0; g < G; ++g) {
      size_t base = (size_t(n) * C + size_t(g) * cg) * spatial;
      double s = 0, ss = 0;
      for (int64_t i = 0; i < len; ++i) s += x[base + i];
      double mean = s / len;
      for (int64_t i = 0; i < len; ++i) ss += (x[base + i] - mean) * (x[base + i] - mean);
      double inv = 1.0 / std::sqrt(ss / len + eps);
      for (int64_t i = 0; i < len; ++i) {
        int c = int(g * cg + i / spatial);
        y[base + i] = float((x[base + i] - mean) * inv * scale[c] + bias[c]);
      }
    }
  return y;
}

std::vector<float> batch_norm(const std::vector<float>& x, int N, int C, int64_t spatial,
                              const std::vector<float>& scale, const std::vector<float>& bias,
                              const std::vector<float>& mean, const std::vector<float>& var, float eps) {
  std::vector<float> y(x.size());
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int64_t i = 0; i < spatial; ++i) {
        size_t k = (size_t(n) * C + c) * spatial + i;
        y[k] = float((x[k] - mean[c]) / std::sqrt(double(var[c]) + eps) * scale[c] + bias[c]);
      }
  return y;
}

std::vector<float> batch_norm_training(const std::vector<float>& x, int N, int C, int64_t spatial,
                                       const std::vector<float>& scale, const std::vector<float>& bias,
                                       const std::vector<float>& mean, const std::vector<float>& var, float eps,
                                       float momentum, std::vector<float>& run_mean, std::vector<float>& run_var) {
  std::vector<float> y(x.size());
  run_mean.assign(size_t(C), 0.0f);
  run_var.assign(size_t(C), 0.0f);
  const double count = double(N) * double(spatial);
  for (int c = 0; c < C; ++c) {
    auto at = [&](int n, int64_t i) { return (size_t(n) * C + c) * spatial + i; };
    double m = 0, v = 0;
    for (int n = 0; n < N; ++n)
      for (int64_t i = 0; i < spatial; ++i) m += x[at(n, i)];
    m /= count;
    for (int n = 0; n < N; ++n)
      for (int64_t i = 0; i < spatial; ++i) v += (x[at(n, i)] - m) * (x[at(n, i)] - m);
    v /= count;
    for (int n = 0; n < N; ++n)
      for (int64_t i = 0; i < spatial; ++i)
        y[at(n, i)] = float((x[at(n, i)] - m) / std::sqrt(v + eps) * scale[c] + bias[c]);
    run_mean[c] = float(mean[c] * double(momentum) + m * (1.0 - momentum));
    run_var[c] = float(var[c] * double(momentum) + v * (1.0 - momentum));
  }
  return y;
}

std::vector<float> softmax(const std::vector<float>& x, const Dims& d, int axis, bool log) {
  int64_t outer = 1, inner = 1, len = d[axis];
  for (int i = 0; i < axis; ++i) outer *= d[i];
  for (size_t i = axis + 1; i < d.size(); ++i) inner *= d[i];
  std::vector<float> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t k) { return size_t((o * len + k) * inner + in); };
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (int64_t k = 0; k < len; ++k) m = std::max(m, double(x[at(k)]));
      for (int64_t k = 0; k < len; ++k) s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < len; ++k)
        y[at(k)] = float(log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s);
    }
  return y;
}

std::vector<float> matmul(const std::vector<float>& a, const Dims& da0, const std::vector<float>& b, const Dims& db0,
                          Dims& od) {
  Dims da = da0, db = db0;
  bool a1 = da.size() == 1, b1 = db.size() == 1;
  if (a1) da.insert(da.begin(), 1);
  if (b1) db.push_back(1);
  int64_t M = da[da.size() - 2], K = da.back(), N = db.back();
  Dims ba(da.begin(), da.end() - 2), bb(db.begin(), db.end() - 2);
  Dims bo = bcast_shape(ba, bb);
  std::vector<float> y(numel(bo) * M * N);
  for (int64_t bi = 0; bi < numel(bo); ++bi) {
    Dims c = unravel(bi, bo);
    int64_t ia = bcast_index(c, ba), ib = bcast_index(c, bb);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(a[(ia * M + m) * K + k]) * b[(ib * K + k) * N + n];
        y[(bi * M + m) * N + n] = float(acc);
      }
  }
  od = bo;
  if (!a1) od.push_back(M);
  if (!b1) od.push_back(N);
  return y;
}

std::vector<float> transpose(const std::vector<float>& x, const Dims& d, const std::vector<int>& perm, Dims& od) {
  od.resize(d.size());
  for (size_t i = 0; i < d.size(); ++i) od[i] = d[perm[i]];
  std::vector<float> y(x.size());
  for (int64_t i = 0; i < numel(od); ++i) {
    Dims c = unravel(i, od), ci(d.size());
    for (size_t k = 0; k < d.size(); ++k) ci[perm[k]] = c[k];
    int64_t src = 0;
    for (size_t k = 0; k < d.size(); ++k) src = src * d[k] + ci[k];
    y[i] = x[src];
  }
  return y;
}

std::vector<float> slice(const std::vector<float>& x, const Dims& d, const Dims& starts, const Dims& ends,
                         const Dims& axes, const Dims& steps, Dims& od) {
  Dims st(d.size(), 0), sp(d.size(), 1);
  od = d;
  for (size_t k = 0; k < axes.size(); ++k) {
    int ax = int(axes[k] < 0 ? axes[k] + int64_t(d.size()) : axes[k]);
    int64_t n = d[ax], step = steps.empty() ? 1 : steps[k];
    int64_t s = starts[k] < 0 ? starts[k] + n : starts[k], e = ends[k] < 0 ? ends[k] + n : ends[k];
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
      od[ax] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, n - 1);
      e = std::clamp<int64_t>(e, -1, n - 1);
      od[ax] = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    st[ax] = s;
    sp[ax] = step;
  }
  std::vector<float> y(numel(od));
  for (int64_t i = 0; i < numel(od); ++i) {
    Dims c = unravel(i, od);
    int64_t src = 0;
    for (size_t k = 0; k < d.size(); ++k) src = src * d[k] + st[k] + c[k] * sp[k];
    y[i] = x[src];
  }
  return y;
}

std::vector<float> pad(const std::vector<float>& x, const Dims& d, const Dims& pads, int mode, float value, Dims& od) {
  size_t r = d.size();
  od = d;
  for (size_t k = 0; k < r; ++k) od[k] += pads[k] + pads[k + r];
  std::vector<float> y(numel(od));
  for (int64_t i = 0; i < numel(od); ++i) {
    Dims c = unravel(i, od);
    int64_t src = 0;
    bool out = false;
    for (size_t k = 0; k < r; ++k) {
      int64_t v = c[k] - pads[k];
      if (v < 0 || v >= d[k]) {
        if (mode == 0) out = true;
        else if (mode == 1) v = v < 0 ? -v : 2 * (d[k] - 1) - v;
        else if (mode == 3)
          v -= d[k] * int64_t(std::floor(double(v) / double(d[k])));  // as if tiled
        else v = v < 0 ? 0 : d[k] - 1;
      }
      src = src * d[k] + v;
    }
    y[i] = out ? value : x[src];
  }
  return y;
}

std::vector<float> gather(const std::vector<float>& x, const Dims& d, const std::vector<int64_t>& idx, const Dims& id,
                          int axis, Dims& od) {
  od.assign(d.begin(), d.begin() + axis);
  od.insert(od.end(), id.begin(), id.end());
  od.insert(od.end(), d.begin() + axis + 1, d.end());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= d[i];
  for (size_t i = axis + 1; i < d.size(); ++i) inner *= d[i];
  int64_t ni = numel(id);
  std::vector<float> y(numel(od));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < ni; ++j) {
      int64_t k = idx[j] < 0 ? idx[j] + d[axis] : idx[j];
      for (int64_t in = 0; in < inner; ++in) y[(o * ni + j) * inner + in] = x[(o * d[axis] + k) * inner + in];
    }
  return y;
}

std::vector<double> cumsum(const std::vector<double>& x, const Dims& d, int axis, bool exclusive, bool reverse) {
  int64_t outer = 1, inner = 1, len = d[size_t(axis)];
  for (int i = 0; i < axis; ++i) outer *= d[size_t(i)];
  for (size_t i = size_t(axis) + 1; i < d.size(); ++i) inner *= d[i];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      double acc = 0;
      for (int64_t t = 0; t < len; ++t) {
        int64_t k = reverse ? len - 1 - t : t, p = (o * len + k) * inner + in;
        if (exclusive) y[size_t(p)] = acc;
        acc += x[size_t(p)];
        if (!exclusive) y[size_t(p)] = acc;
      }
    }
  return y;
}

std::vector<float> gather_elements(const std::vector<float>& x, const Dims& d, const std::vector<int64_t>& idx,
                                   const Dims& id, int axis) {
  std::vector<float> y(size_t(numel(id)));
  std::vector<int64_t> c(id.size(), 0);
  for (size_t p = 0; p < y.size(); ++p) {
    int64_t rem = int64_t(p);
    for (size_t k = id.size(); k-- > 0;) c[k] = rem % id[k], rem /= id[k];
    int64_t j = idx[p] < 0 ? idx[p] + d[size_t(axis)] : idx[p];
    int64_t off = 0;
    for (size_t k = 0; k < d.size(); ++k) off = off * d[k] + (int(k) == axis ? j : c[k]);
    y[p] = x[size_t(off)];
  }
  return y;
}

std::vector<float> tile(const std::vector<float>& x, const Dims& d, const Dims& reps, Dims& od) {
  od = d;
  for (size_t k = 0; k < d.size(); ++k) od[k] *= reps[k];
  std::vector<float> y(numel(od));
  for (int64_t i = 0; i < numel(od); ++i) {
    Dims c = unravel(i, od);
    int64_t src = 0;
    for (size_t k = 0; k < d.size(); ++k) src = src * d[k] + c[k] % d[k];
    y[i] = x[src];
  }
  return y;
}

namespace {
// In float, as the ONNX runtimes compute it: a coordinate that lands within rounding of an integer
// must floor / ceil the same way.
// align_corners divides by the output length before rounding (in * scale), as ONNX defines it;
// tf_crop_and_resize (6) is computed in double by the caller.
float resize_coord(int coord, float x, double scale_d, int in, int out) {
  const float scale = float(scale_d);
  switch (coord) {
    case 5: {
      float adj = float(out) / (scale * float(in));
      return float(in) * 0.5f * (1.0f - adj) + (x + 0.5f) / scale - 0.5f;
    }
    case 1: return x / scale;
    case 2: {
      const double len = double(in) * scale_d;
      return len == 1.0 ? 0.0f : float(double(x) * double(in - 1) / (len - 1.0));
    }
    case 3: return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
    case 4: return (x + 0.5f) / scale;
    default: return (x + 0.5f) / scale - 0.5f;
  }
}

int resize_nearest(int mode, float x, int in) {
  float r;
  const bool tie = x - std::floor(x) == 0.5f;
  switch (mode) {
    case 1: r = tie ? std::ceil(x) : std::round(x); break;
    case 2: r = std::floor(x); break;
    case 3: r = std::ceil(x); break;
    default: r = tie ? std::floor(x) : std::round(x); break;
  }
  return std::clamp(int(r), 0, in - 1);
}

// Keys cubic convolution weight at distance t.
double cubic_weight(double t, double a) {
  t = std::fabs(t);
  if (t <= 1) return (a + 2) * t * t * t - (a + 3) * t * t + 1;
  if (t < 2) return a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a;
  return 0;
}
}  // namespace

std::vector<float> resize2d(const std::vector<float>& x, int64_t planes, int H, int W, int OH, int OW, double sh,
                            double sw, int mode, int coord, int nearest, float cubic_a, bool exclude,
                            const ResizeExtra& ex) {
  // tf_crop_and_resize: source coordinate in double; outside [0, in - 1] (beyond rounding) is extrapolated.
  auto crop = [](int o, double scale, int in, float r0, float r1, bool& outside) {
    const double len = double(in) * scale, span = double(r1) - double(r0);
    double f = len == 1.0 ? span * (in - 1) / 2.0 : o * span * (in - 1) / (len - 1.0);
    f += double(r0) * (in - 1);
    outside = outside || f < -1e-9 || f > in - 1 + 1e-9;
    return float(f);
  };
  // Antialias: every input within the stretched filter's support, edge-clamped (or dropped with
  // exclude_outside), weights normalised to sum 1.
  auto filter = [&](double t) {
    t = std::fabs(t);
    return mode == 1 ? std::max(0.0, 1.0 - t) : cubic_weight(t, cubic_a);
  };
  auto aa_taps = [&](float f, double scale, int n, std::vector<int>& idx, std::vector<double>& w) {
    const double s = std::min(scale, 1.0), reach = (mode == 1 ? 1.0 : 2.0) / s;
    idx.clear(), w.clear();
    double sum = 0;
    for (int j = int(std::floor(f - reach)) - 1; j <= int(std::ceil(f + reach)) + 1; ++j) {
      if (exclude && (j < 0 || j >= n)) continue;
      const double wj = filter((j - double(f)) * s);
      idx.push_back(std::clamp(j, 0, n - 1)), w.push_back(wj), sum += wj;
    }
    for (auto& v : w) v /= sum;
  };
  std::vector<float> y(size_t(planes) * OH * OW);
  for (int64_t p = 0; p < planes; ++p)
    for (int oh = 0; oh < OH; ++oh)
      for (int ow = 0; ow < OW; ++ow) {
        const float* in = &x[size_t(p) * H * W];
        float fy, fx;
        bool outside = false;
        if (coord == 6) {
          fy = crop(oh, sh, H, ex.roi[0], ex.roi[2], outside);
          fx = crop(ow, sw, W, ex.roi[1], ex.roi[3], outside);
        } else {
          fy = resize_coord(coord, float(oh), sh, H, OH), fx = resize_coord(coord, float(ow), sw, W, OW);
        }
        double v;
        if (outside) {
          v = ex.extrapolation;
        } else if (mode == 0) {
          v = in[resize_nearest(nearest, fy, H) * W + resize_nearest(nearest, fx, W)];
        } else if (mode == 2 && !ex.antialias) {
          // Separable 4x4 taps; edge-clamped, or outside taps dropped and weights renormalised.
          auto taps = [&](float f, int n, int& i0, double* w) {
            double fl = std::floor(f), t = f - fl;
            i0 = int(fl) - 1;
            double sum = 0;
            for (int k = 0; k < 4; ++k) {
              w[k] = cubic_weight(t + 1 - k, cubic_a);
              if (exclude && (i0 + k < 0 || i0 + k >= n)) w[k] = 0;
              sum += w[k];
            }
            if (exclude)
              for (int k = 0; k < 4; ++k) w[k] /= sum;
          };
          int y0, x0;
          double wy[4], wx[4];
          taps(fy, H, y0, wy);
          taps(fx, W, x0, wx);
          v = 0;
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j)
              v += wy[i] * wx[j] * in[std::clamp(y0 + i, 0, H - 1) * W + std::clamp(x0 + j, 0, W - 1)];
        } else if (ex.antialias) {
          std::vector<int> iy, ix;
          std::vector<double> wy, wx;
          aa_taps(fy, sh, H, iy, wy);
          aa_taps(fx, sw, W, ix, wx);
          v = 0;
          for (size_t i = 0; i < iy.size(); ++i)
            for (size_t j = 0; j < ix.size(); ++j) v += wy[i] * wx[j] * in[iy[i] * W + ix[j]];
        } else {
          fy = std::clamp(fy, 0.0f, float(H - 1));
          fx = std::clamp(fx, 0.0f, float(W - 1));
          int y0 = int(fy), x0 = int(fx), y1 = std::min(y0 + 1, H - 1), x1 = std::min(x0 + 1, W - 1);
          double ly = fy - y0, lx = fx - x0;
          v = (in[y0 * W + x0] * (1 - lx) + in[y0 * W + x1] * lx) * (1 - ly) +
              (in[y1 * W + x0] * (1 - lx) + in[y1 * W + x1] * lx) * ly;
        }
        y[(size_t(p) * OH + oh) * OW + ow] = float(v);
      }
  return y;
}

std::vector<float> reduce(const std::vector<float>& x, const Dims& d, std::vector<int> axes, bool keepdims, int op,
                          Dims& od) {
  if (axes.empty())
    for (size_t k = 0; k < d.size(); ++k) axes.push_back(int(k));
  std::vector<bool> red(d.size(), false);
  for (int a : axes) red[a < 0 ? a + d.size() : a] = true;
  Dims kd = d;
  for (size_t k = 0; k < d.size(); ++k)
    if (red[k]) kd[k] = 1;
  int64_t n_out = numel(kd), count = numel(d) / std::max<int64_t>(1, n_out);
  std::vector<double> acc(n_out, op == 2 ? -INFINITY : op == 3 ? INFINITY : op == 4 ? 1.0 : 0.0);
  for (int64_t i = 0; i < numel(d); ++i) {
    Dims c = unravel(i, d);
    int64_t o = 0;
    for (size_t k = 0; k < d.size(); ++k) o = o * kd[k] + (red[k] ? 0 : c[k]);
    double v = x[i];
    switch (op) {
      case 2: acc[o] = std::max(acc[o], v); break;
      case 3: acc[o] = std::min(acc[o], v); break;
      case 4: acc[o] *= v; break;
      case 5: case 6: acc[o] += v * v; break;
      case 7: acc[o] += std::fabs(v); break;
      default: acc[o] += v;
    }
  }
  std::vector<float> y(n_out);
  for (int64_t o = 0; o < n_out; ++o)
    y[o] = float(op == 1 ? acc[o] / count : op == 6 ? std::sqrt(acc[o]) : acc[o]);
  od.clear();
  for (size_t k = 0; k < d.size(); ++k)
    if (!red[k] || keepdims) od.push_back(kd[k]);
  return y;
}

}  // namespace cldl::ref
