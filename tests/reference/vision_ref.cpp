// Vision references: loops over every element in the ONNX reference's order, in double (NMS in float).
#include "vision_ref.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>

namespace cldl::ref {

// ---------------------------------------------------------------- NonMaxSuppression
namespace {
// IoU of two boxes as the spec computes it, false for empty intersections or degenerate boxes.
bool over_threshold(const float* a, const float* b, bool center, float threshold) {
  float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
  if (center) {
    ax0 = a[0] - a[2] / 2, ax1 = a[0] + a[2] / 2, ay0 = a[1] - a[3] / 2, ay1 = a[1] + a[3] / 2;
    bx0 = b[0] - b[2] / 2, bx1 = b[0] + b[2] / 2, by0 = b[1] - b[3] / 2, by1 = b[1] + b[3] / 2;
  } else {
    ax0 = std::min(a[1], a[3]), ax1 = std::max(a[1], a[3]), ay0 = std::min(a[0], a[2]), ay1 = std::max(a[0], a[2]);
    bx0 = std::min(b[1], b[3]), bx1 = std::max(b[1], b[3]), by0 = std::min(b[0], b[2]), by1 = std::max(b[0], b[2]);
  }
  const float iw = std::min(ax1, bx1) - std::max(ax0, bx0), ih = std::min(ay1, by1) - std::max(ay0, by0);
  if (!(std::min(ax1, bx1) > std::max(ax0, bx0)) || !(std::min(ay1, by1) > std::max(ay0, by0))) return false;
  const float inter = iw * ih;
  const float area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
  const float uni = area_a + area_b - inter;
  if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > threshold;
}
}  // namespace

std::vector<int64_t> nms(const std::vector<float>& boxes, const std::vector<float>& scores, int64_t batches,
                         int64_t classes, int64_t n, int64_t max_per_class, float iou_threshold,
                         std::optional<float> score_threshold, bool center_point_box) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t c = 0; c < classes; ++c) {
      const float* s = &scores[size_t((b * classes + c) * n)];
      std::vector<std::pair<float, int64_t>> order;  // (score, index): highest score, then lowest index
      for (int64_t i = 0; i < n; ++i)
        if (!score_threshold || s[i] > *score_threshold) order.push_back({s[i], i});
      // NaN scores after every number; equal scores by index.
      std::sort(order.begin(), order.end(), [](auto& p, auto& q) {
        const bool pn = std::isnan(p.first), qn = std::isnan(q.first);
        if (pn || qn) return pn != qn ? qn : p.second < q.second;
        return p.first != q.first ? p.first > q.first : p.second < q.second;
      });
      std::vector<int64_t> kept;
      for (auto& [score, i] : order) {
        if (int64_t(kept.size()) >= max_per_class) break;
        bool suppressed = false;
        for (int64_t k : kept)
          suppressed = suppressed || over_threshold(&boxes[size_t((b * n + i) * 4)], &boxes[size_t((b * n + k) * 4)],
                                                    center_point_box, iou_threshold);
        if (suppressed) continue;
        kept.push_back(i);
        out.insert(out.end(), {b, c, i});
      }
    }
  return out;
}

// ---------------------------------------------------------------- RoiAlign
std::vector<double> roi_align(const std::vector<double>& x, const Dims& xd, const std::vector<double>& rois,
                              const std::vector<int64_t>& batch, int64_t oh, int64_t ow, int64_t sampling_ratio,
                              double spatial_scale, bool half_pixel, bool max_mode) {
  const int64_t C = xd[1], H = xd[2], W = xd[3], R = int64_t(batch.size());
  std::vector<double> y(size_t(R * C * oh * ow), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const double off = half_pixel ? 0.5 : 0.0;
    const double x0 = rois[size_t(r * 4)] * spatial_scale - off, y0 = rois[size_t(r * 4 + 1)] * spatial_scale - off;
    const double x1 = rois[size_t(r * 4 + 2)] * spatial_scale - off, y1 = rois[size_t(r * 4 + 3)] * spatial_scale - off;
    double rw = x1 - x0, rh = y1 - y0;
    if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    const double bh = rh / double(oh), bw = rw / double(ow);
    const int64_t gh = sampling_ratio > 0 ? sampling_ratio : int64_t(std::ceil(rh / double(oh)));
    const int64_t gw = sampling_ratio > 0 ? sampling_ratio : int64_t(std::ceil(rw / double(ow)));
    const double count = double(std::max<int64_t>(gh * gw, 1));
    for (int64_t c = 0; c < C; ++c) {
      const double* plane = &x[size_t((batch[size_t(r)] * C + c) * H * W)];
      auto at = [&](int64_t yy, int64_t xx) { return plane[size_t(yy * W + xx)]; };
      for (int64_t ph = 0; ph < oh; ++ph)
        for (int64_t pw = 0; pw < ow; ++pw) {
          double acc = 0.0;
          bool first = true;
          for (int64_t iy = 0; iy < gh; ++iy)
            for (int64_t ix = 0; ix < gw; ++ix) {
              double sy = y0 + double(ph) * bh + (double(iy) + 0.5) * bh / double(gh);
              double sx = x0 + double(pw) * bw + (double(ix) + 0.5) * bw / double(gw);
              double v = 0.0;
              if (!(sy < -1.0 || sy > double(H) || sx < -1.0 || sx > double(W))) {
                sy = std::max(sy, 0.0), sx = std::max(sx, 0.0);
                int64_t ylo = int64_t(sy), xlo = int64_t(sx), yhi, xhi;
                if (ylo >= H - 1)
                  yhi = ylo = H - 1, sy = double(ylo);
                else
                  yhi = ylo + 1;
                if (xlo >= W - 1)
                  xhi = xlo = W - 1, sx = double(xlo);
                else
                  xhi = xlo + 1;
                const double ly = sy - double(ylo), lx = sx - double(xlo), hy = 1 - ly, hx = 1 - lx;
                const double v1 = hy * hx * at(ylo, xlo), v2 = hy * lx * at(ylo, xhi), v3 = ly * hx * at(yhi, xlo),
                             v4 = ly * lx * at(yhi, xhi);
                v = max_mode ? std::max({v1, v2, v3, v4}) : v1 + v2 + v3 + v4;
              }
              acc = max_mode ? (first ? v : std::max(acc, v)) : acc + v;
              first = false;
            }
          y[size_t(((r * C + c) * oh + ph) * ow + pw)] = max_mode ? acc : acc / count;
        }
    }
  }
  return y;
}

// ---------------------------------------------------------------- GridSample
namespace {
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const int64_t n = int64_t(dx / range);
    const double r = dx - double(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const int64_t n = int64_t(dx / range);
    const double r = dx - double(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

void cubic_coeffs(double t, double* w) {
  const double a = -0.75;
  auto far = [&](double s) { return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a; };
  auto near = [&](double s) { return ((a + 2) * s - (a + 3)) * s * s + 1; };
  w[0] = far(t + 1), w[1] = near(t), w[2] = near(1 - t), w[3] = far(2 - t);
}
}  // namespace

std::vector<double> grid_sample(const std::vector<double>& x, const Dims& xd, const std::vector<double>& grid,
                                const Dims& gd, const std::string& mode, const std::string& padding,
                                bool align_corners) {
  const int nd = int(xd.size()) - 2;
  const int64_t N = xd[0], C = xd[1];
  Dims dims(xd.begin() + 2, xd.end());
  int64_t plane = 1, points = 1;
  for (auto d : dims) plane *= d;
  for (int i = 1; i <= nd; ++i) points *= gd[size_t(i)];
  std::vector<double> lo(static_cast<size_t>(nd)), hi(static_cast<size_t>(nd));
  for (int i = 0; i < nd; ++i) {
    lo[size_t(i)] = align_corners ? 0.0 : -0.5;
    hi[size_t(i)] = align_corners ? double(dims[size_t(i)]) - 1 : double(dims[size_t(i)]) - 0.5;
  }
  // The value at integer index j along dim i under the padding mode, or nothing (zero).
  auto tap = [&](int i, int64_t j) -> int64_t {
    const int64_t d = dims[size_t(i)];
    if (padding == "zeros") return j >= 0 && j < d ? j : -1;
    if (padding == "border") return std::clamp<int64_t>(j, 0, d - 1);
    return int64_t(reflect(double(j), lo[size_t(i)], hi[size_t(i)]));
  };
  std::vector<double> y(size_t(N * C * points));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const double* src = &x[size_t((n * C + c) * plane)];
      for (int64_t p = 0; p < points; ++p) {
        std::vector<double> co(static_cast<size_t>(nd));
        for (int i = 0; i < nd; ++i) {
          const double g = grid[size_t((n * points + p) * nd + (nd - 1 - i))], d = double(dims[size_t(i)]);
          double v = align_corners ? (g + 1) / 2 * (d - 1) : ((g + 1) * d - 1) / 2;
          if (mode == "nearest") v = std::nearbyint(v);
          if (v < lo[size_t(i)] || v > hi[size_t(i)]) {
            if (padding == "border" && mode != "cubic")  // cubic clamps only the taps (PyTorch, ONNX Runtime)
              v = std::clamp(v, 0.0, d - 1);
            else if (padding == "reflection")
              v = reflect(v, lo[size_t(i)], hi[size_t(i)]);
          }
          co[size_t(i)] = v;
        }
        // Interpolates dim i onward at the sub-array starting at `base` (nested 1-D interpolations, as the
        // ONNX reference; nearest picks one index per dim).
        std::function<double(int, int64_t)> interp = [&](int i, int64_t base) -> double {
          int64_t stride = 1;
          for (int q = i + 1; q < nd; ++q) stride *= dims[size_t(q)];
          if (mode == "nearest") {
            const int64_t j = tap(i, int64_t(co[size_t(i)]));
            if (j < 0) return 0.0;
            return i + 1 == nd ? src[size_t(base + j)] : interp(i + 1, base + j * stride);
          }
          const double f = std::floor(co[size_t(i)]), t = co[size_t(i)] - f;
          const int taps = mode == "linear" ? 2 : 4;
          double w[4];
          if (taps == 2)
            w[0] = 1 - t, w[1] = t;
          else
            cubic_coeffs(t, w);
          const int64_t first = int64_t(f) - (taps == 4 ? 1 : 0);
          double acc = 0.0;
          for (int k = 0; k < taps; ++k) {
            const int64_t j = tap(i, first + k);
            if (j < 0) continue;
            acc += w[k] * (i + 1 == nd ? src[size_t(base + j)] : interp(i + 1, base + j * stride));
          }
          return acc;
        };
        y[size_t((n * C + c) * points + p)] = interp(0, 0);
      }
    }
  return y;
}

// ---------------------------------------------------------------- AffineGrid
std::vector<double> affine_grid(const std::vector<double>& theta, const Dims& size, bool align_corners) {
  const int nd = int(size.size()) - 2;
  const int64_t N = size[0];
  Dims dims(size.begin() + 2, size.end());
  const int64_t points = numel(dims);
  std::vector<double> y(size_t(N * points * nd));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < points; ++p) {
      Dims at = unravel(p, dims);
      std::vector<double> h(static_cast<size_t>(nd + 1), 1.0);  // (x, y[, z], 1)
      for (int i = 0; i < nd; ++i) {
        const double d = double(dims[size_t(i)]), j = double(at[size_t(i)]);
        h[size_t(nd - 1 - i)] = align_corners ? (d > 1 ? -1 + 2 * j / (d - 1) : -1.0) : -1 + (2 * j + 1) / d;
      }
      for (int k = 0; k < nd; ++k) {
        double acc = 0.0;
        for (int j = 0; j <= nd; ++j) acc += theta[size_t((n * nd + k) * (nd + 1) + j)] * h[size_t(j)];
        y[size_t((n * points + p) * nd + k)] = acc;
      }
    }
  return y;
}

// ---------------------------------------------------------------- CenterCropPad
std::vector<double> center_crop_pad(const std::vector<double>& x, const Dims& xd, const Dims& shape,
                                    std::vector<int64_t> axes, Dims& od) {
  const int64_t r = int64_t(xd.size());
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  od = xd;
  Dims crop(static_cast<size_t>(r), 0),
      pad(static_cast<size_t>(r), 0);  // input start of the crop, output start of the copy
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + r : axes[k], want = shape[k], have = xd[size_t(a)];
    od[size_t(a)] = want;
    if (want < have)
      crop[size_t(a)] = (have - want) / 2;
    else
      pad[size_t(a)] = (want - have) / 2;
  }
  std::vector<double> y(size_t(numel(od)), 0.0);
  for (int64_t i = 0; i < numel(od); ++i) {
    Dims o = unravel(i, od);
    int64_t src = 0;
    bool inside = true;
    for (int64_t d = 0; d < r; ++d) {
      const int64_t j = o[size_t(d)] - pad[size_t(d)] + crop[size_t(d)];
      if (j < 0 || j >= xd[size_t(d)]) inside = false;
      src = src * xd[size_t(d)] + j;
    }
    if (inside) y[size_t(i)] = x[size_t(src)];
  }
  return y;
}

// ---------------------------------------------------------------- Col2Im
std::vector<double> col2im(const std::vector<double>& x, const Dims& xd, const Dims& image, const Dims& block,
                           const Dims& dilations, const Dims& pads, const Dims& strides) {
  const size_t nd = image.size();
  const int64_t K = numel(block), C = xd[1] / K, N = xd[0];
  Dims blocks(nd);
  for (size_t i = 0; i < nd; ++i)
    blocks[i] = (image[i] + pads[i] + pads[i + nd] - dilations[i] * (block[i] - 1) - 1) / strides[i] + 1;
  const int64_t L = numel(blocks), P = numel(image);
  std::vector<double> y(size_t(N * C * P), 0.0);
  // Scatter every column entry to the image element it came from (the ONNX reference's loop order).
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < K; ++k) {
        Dims off = unravel(k, block);
        for (int64_t l = 0; l < L; ++l) {
          Dims b = unravel(l, blocks);
          int64_t at = 0;
          bool inside = true;
          for (size_t i = 0; i < nd; ++i) {
            const int64_t j = b[i] * strides[i] - pads[i] + off[i] * dilations[i];
            if (j < 0 || j >= image[i]) inside = false;
            at = at * image[i] + j;
          }
          if (inside) y[size_t((n * C + c) * P + at)] += x[size_t(((n * C + c) * K + k) * L + l)];
        }
      }
  return y;
}

// ---------------------------------------------------------------- DeformConv
std::vector<double> deform_conv(const std::vector<double>& x, const Dims& xd, const std::vector<double>& w,
                                const Dims& wd, const std::vector<double>& offset, const std::vector<double>& bias,
                                const std::vector<double>& mask, int64_t group, int64_t offset_group,
                                const Dims& strides, const Dims& pads, const Dims& dilations, Dims& od) {
  const int64_t N = xd[0], C = xd[1], H = xd[2], W = xd[3], OC = wd[0], KH = wd[2], KW = wd[3];
  const int64_t OH = (H + pads[0] + pads[2] - ((KH - 1) * dilations[0] + 1)) / strides[0] + 1;
  const int64_t OW = (W + pads[1] + pads[3] - ((KW - 1) * dilations[1] + 1)) / strides[1] + 1;
  od = {N, OC, OH, OW};
  const int64_t icpg = C / group, ocpg = OC / group, icpog = C / offset_group;
  // Bilinear sample of channel c of batch n at (h, v): four taps, zero outside the map.
  auto sample = [&](int64_t n, int64_t c, double h, double v) {
    const double fh = std::floor(h), fv = std::floor(v);
    double s = 0.0;
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        const int64_t hh = int64_t(fh) + a, vv = int64_t(fv) + b;
        if (hh < 0 || hh >= H || vv < 0 || vv >= W) continue;
        s += (a ? h - fh : 1 - (h - fh)) * (b ? v - fv : 1 - (v - fv)) * x[size_t(((n * C + c) * H + hh) * W + vv)];
      }
    return s;
  };
  std::vector<double> y(size_t(N * OC * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = bias.empty() ? 0.0 : bias[size_t(oc)];
          const int64_t g = oc / ocpg;
          for (int64_t ci = 0; ci < icpg; ++ci) {
            const int64_t c = g * icpg + ci, og = c / icpog;
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t tap = (og * KH + kh) * KW + kw;
                const double dh = offset[size_t(((n * offset_group * KH * KW * 2 + tap * 2) * OH + i) * OW + j)];
                const double dw = offset[size_t(((n * offset_group * KH * KW * 2 + tap * 2 + 1) * OH + i) * OW + j)];
                const double m =
                    mask.empty() ? 1.0 : mask[size_t(((n * offset_group * KH * KW + tap) * OH + i) * OW + j)];
                const double h = double(i * strides[0] - pads[0] + kh * dilations[0]) + dh;
                const double v = double(j * strides[1] - pads[1] + kw * dilations[1]) + dw;
                acc += w[size_t(((oc * icpg + ci) * KH + kh) * KW + kw)] * m * sample(n, c, h, v);
              }
          }
          y[size_t(((n * OC + oc) * OH + i) * OW + j)] = acc;
        }
  return y;
}

}  // namespace cldl::ref
