// Vision ops of detection and spatial-transformer models, on f32 (layers/vision.cpp): RoiAlign, GridSample,
// AffineGrid, Col2Im. They follow the ONNX reference implementations (onnx/reference/ops) step by step, so
// that border cases (samples outside the map, reflections, malformed boxes) give the same numbers.
// CenterCropPad runs data.cl's pad kernel (a negative begin crops); NonMaxSuppression folds on the host.
// Macros (set by layers/vision.cpp, defaults correct everywhere):
//   GS_MAX_TAPS  the most taps per output point GridSample keeps in private memory (4^3: cubic in 3-D)

#ifndef GS_MAX_TAPS
#define GS_MAX_TAPS 64
#endif

// RoiAlign: one work-item per output position (pw, ph, roi) for all channels, so that each sample point's
// geometry is found once and applied to every channel (the outputs accumulate in place, sample by sample,
// in the reference's order). The sample grid of a bin is roi_bin_grid_h x roi_bin_grid_w points
// (sampling_ratio, or ceil(roi extent / output extent)); each point is a bilinear interpolation of the
// four pixels around it (clamped to the map; points more than one pixel outside it count as 0). mode 0
// averages the points, mode 1 takes the largest weighted corner value of any point (what the ONNX
// reference and ONNX Runtime compute). half_pixel shifts the box by -0.5 pixel and allows boxes smaller
// than a pixel (coordinate_transformation_mode half_pixel); output_half_pixel forces them to at least 1x1.
// A batch index outside [0, N) gives zeros (a kernel cannot raise; a constant one is refused at load).
__kernel void roi_align(long channels, long height, long width, long batches, int out_h, int out_w, int sampling_ratio,
                        float spatial_scale, int half_pixel, int mode, __global const float* x, long x_off,
                        __global const float* rois, long r_off, __global const long* batch_idx, long b_off,
                        __global float* y, long y_off) {
  const int pw = get_global_id(0), ph = get_global_id(1);
  const long roi = get_global_id(2), cstride = (long)out_h * out_w;
  __global float* out = y + y_off + roi * channels * cstride + ph * out_w + pw;  // channel c at out[c * cstride]
  for (long c = 0; c < channels; ++c) out[c * cstride] = 0.0f;
  const long b = batch_idx[b_off + roi];
  if (b < 0 || b >= batches) return;
  __global const float* r = rois + r_off + roi * 4;
  const float offset = half_pixel ? 0.5f : 0.0f;
  const float start_w = r[0] * spatial_scale - offset, start_h = r[1] * spatial_scale - offset;
  const float end_w = r[2] * spatial_scale - offset, end_h = r[3] * spatial_scale - offset;
  float roi_w = end_w - start_w, roi_h = end_h - start_h;
  if (!half_pixel) {  // malformed boxes become 1x1
    roi_w = fmax(roi_w, 1.0f);
    roi_h = fmax(roi_h, 1.0f);
  }
  const float bin_h = roi_h / out_h, bin_w = roi_w / out_w;
  const int grid_h = sampling_ratio > 0 ? sampling_ratio : (int)ceil(roi_h / out_h);
  const int grid_w = sampling_ratio > 0 ? sampling_ratio : (int)ceil(roi_w / out_w);
  const long plane = height * width;
  __global const float* base = x + x_off + b * channels * plane;
  int first = 1;
  for (int iy = 0; iy < grid_h; ++iy) {
    const float yy = start_h + ph * bin_h + (iy + 0.5f) * bin_h / grid_h;
    for (int ix = 0; ix < grid_w; ++ix) {
      const float xx = start_w + pw * bin_w + (ix + 0.5f) * bin_w / grid_w;
      // Outside by more than a pixel: all four weights 0 (0 for the average and the maximum alike).
      float w1 = 0.0f, w2 = 0.0f, w3 = 0.0f, w4 = 0.0f;
      long p1 = 0, p2 = 0, p3 = 0, p4 = 0;
      if (!(yy < -1.0f || yy > height || xx < -1.0f || xx > width)) {
        float sy = fmax(yy, 0.0f), sx = fmax(xx, 0.0f);
        long y_lo = (long)sy, x_lo = (long)sx, y_hi, x_hi;
        if (y_lo >= height - 1) {
          y_hi = y_lo = height - 1;
          sy = (float)y_lo;
        } else {
          y_hi = y_lo + 1;
        }
        if (x_lo >= width - 1) {
          x_hi = x_lo = width - 1;
          sx = (float)x_lo;
        } else {
          x_hi = x_lo + 1;
        }
        const float ly = sy - y_lo, lx = sx - x_lo, hy = 1.0f - ly, hx = 1.0f - lx;
        w1 = hy * hx, w2 = hy * lx, w3 = ly * hx, w4 = ly * lx;
        p1 = y_lo * width + x_lo, p2 = y_lo * width + x_hi, p3 = y_hi * width + x_lo, p4 = y_hi * width + x_hi;
      }
      for (long c = 0; c < channels; ++c) {
        __global const float* src = base + c * plane;
        const float v1 = w1 * src[p1], v2 = w2 * src[p2], v3 = w3 * src[p3], v4 = w4 * src[p4];
        __global float* o = out + c * cstride;
        if (mode == 0) *o += v1 + v2 + v3 + v4;
        else *o = first ? fmax(fmax(v1, v2), fmax(v3, v4)) : fmax(*o, fmax(fmax(v1, v2), fmax(v3, v4)));
      }
      first = 0;
    }
  }
  if (mode == 0) {
    const float count = (float)max(grid_h * grid_w, 1);
    for (long c = 0; c < channels; ++c) out[c * cstride] /= count;
  }
}

// ---------------------------------------------------------------- GridSample
// Reflects x into [lo, hi] by its nearer border until it lies inside (the ONNX reference's _gs_reflect).
inline float gs_reflect(float x, float lo, float hi) {
  const float range = hi - lo;
  if (range <= 0.0f) return lo;
  if (x < lo) {
    const float dx = lo - x;
    const int n = (int)(dx / range);
    const float r = dx - n * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const float dx = x - hi;
    const int n = (int)(dx / range);
    const float r = dx - n * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

// The index a tap reads along one dim under the padding mode, or -1 for a zero (padding 0 zeros, 1 border,
// 2 reflection).
inline long gs_tap(long i, long d, int padding, float lo, float hi) {
  if (padding == 0) return i >= 0 && i < d ? i : -1;
  if (padding == 1) return clamp(i, (long)0, d - 1);
  // Inside [0, d) for every finite input already; the clamp keeps NaN and huge grid values from reading out
  // of bounds.
  return clamp((long)gs_reflect((float)i, lo, hi), (long)0, d - 1);
}

// Keys' cubic convolution weights (alpha -0.75) of the four taps floor(x) - 1 ... floor(x) + 2, t = x - floor(x).
inline void gs_cubic(float t, float* w) {
  const float a = -0.75f;
  float s = t + 1.0f;
  w[0] = ((a * s - 5.0f * a) * s + 8.0f * a) * s - 4.0f * a;
  w[1] = ((a + 2.0f) * t - (a + 3.0f)) * t * t + 1.0f;
  s = 1.0f - t;
  w[2] = ((a + 2.0f) * s - (a + 3.0f)) * s * s + 1.0f;
  s = 2.0f - t;
  w[3] = ((a * s - 5.0f * a) * s + 8.0f * a) * s - 4.0f * a;
}

// GridSample: one work-item per output point p of batch n; the taps (offset into a channel plane and
// weight) are found once and applied to every channel. nd spatial dims (1 to 3), dims outermost first;
// the grid's coordinates come innermost first (x, then y, then z). mode 0 linear, 1 nearest, 2 cubic.
__kernel void grid_sample(int nd, int mode, int padding, int align_corners, long channels, long4 in_dims,
                          long points, __global const float* x, long x_off, __global const float* grid, long g_off,
                          __global float* y, long y_off) {
  const long p = get_global_id(0), n = get_global_id(1);
  const long dims[3] = {in_dims.s0, in_dims.s1, in_dims.s2};
  long plane = 1;
  for (int i = 0; i < nd; ++i) plane *= dims[i];
  const int taps = mode == 0 ? 2 : mode == 1 ? 1 : 4;
  long idx[3][4];
  float w[3][4];
  for (int i = 0; i < nd; ++i) {
    const float g = grid[g_off + (n * points + p) * nd + (nd - 1 - i)];
    const float d = (float)dims[i];
    float c = align_corners ? (g + 1.0f) / 2.0f * (d - 1.0f) : ((g + 1.0f) * d - 1.0f) / 2.0f;
    if (mode == 1) c = rint(c);  // half to even, as PyTorch
    const float lo = align_corners ? 0.0f : -0.5f, hi = align_corners ? d - 1.0f : d - 0.5f;
    // Outside the borders, border padding clamps the coordinate and reflection reflects it. Cubic with
    // border padding clamps only the taps, as PyTorch and ONNX Runtime do (the ONNX reference clamps the
    // coordinate too, which no node test pins down and which differs from the models' own framework).
    if (c < lo || c > hi) {
      if (padding == 1 && mode != 2) c = clamp(c, 0.0f, d - 1.0f);
      else if (padding == 2) c = gs_reflect(c, lo, hi);
    }
    if (mode == 1) {
      idx[i][0] = gs_tap((long)c, dims[i], padding, lo, hi);  // (long) truncates, as the reference's astype
      w[i][0] = 1.0f;
    } else {
      const float f = floor(c), t = c - f;
      const long base = (long)f - (mode == 2 ? 1 : 0);
      if (mode == 0) {
        w[i][0] = 1.0f - t;
        w[i][1] = t;
      } else {
        gs_cubic(t, w[i]);
      }
      for (int k = 0; k < taps; ++k) idx[i][k] = gs_tap(base + k, dims[i], padding, lo, hi);
    }
  }
  long off[GS_MAX_TAPS];
  float wt[GS_MAX_TAPS];
  int count = 1;
  for (int i = 0; i < nd; ++i) count *= taps;
  for (int t = 0; t < count; ++t) {
    long o = 0;
    float wp = 1.0f;
    int rest = t;
    for (int i = nd - 1; i >= 0; --i) {
      const int k = rest % taps;
      rest /= taps;
      const long j = idx[i][k];
      if (j < 0) o = -1;
      if (o >= 0) {
        long stride = 1;
        for (int q = i + 1; q < nd; ++q) stride *= dims[q];
        o += j * stride;
      }
      wp *= w[i][k];
    }
    off[t] = o;
    wt[t] = wp;
  }
  for (long c = 0; c < channels; ++c) {
    __global const float* src = x + x_off + (n * channels + c) * plane;
    float acc = 0.0f;
    for (int t = 0; t < count; ++t)
      if (off[t] >= 0) acc += wt[t] * src[off[t]];
    y[y_off + (n * channels + c) * points + p] = acc;
  }
}

// AffineGrid: one work-item per output point p of batch n (nd = 2 or 3 spatial dims, outermost first).
// The base grid spans [-1, 1]: pixel centres -1 + (2i + 1) / d, or with align_corners the corners
// -1 + 2i / (d - 1) (-1 for a dim of 1, as the ONNX reference). Output: theta[n] (nd x (nd + 1)) times the
// homogeneous point (x, y[, z], 1), innermost coordinate first.
__kernel void affine_grid(int nd, int align_corners, long4 out_dims, __global const float* theta, long t_off,
                          __global float* y, long y_off) {
  const long p = get_global_id(0), n = get_global_id(1);
  const long dims[3] = {out_dims.s0, out_dims.s1, out_dims.s2};
  float base[4];
  long rest = p;
  for (int i = nd - 1; i >= 0; --i) {
    const long j = rest % dims[i];
    rest /= dims[i];
    const float d = (float)dims[i];
    base[nd - 1 - i] = align_corners ? (dims[i] > 1 ? -1.0f + 2.0f * j / (d - 1.0f) : -1.0f) : -1.0f + (2.0f * j + 1.0f) / d;
  }
  base[nd] = 1.0f;
  long points = 1;
  for (int i = 0; i < nd; ++i) points *= dims[i];
  __global const float* th = theta + t_off + n * nd * (nd + 1);
  for (int k = 0; k < nd; ++k) {
    float acc = 0.0f;
    for (int j = 0; j <= nd; ++j) acc += th[k * (nd + 1) + j] * base[j];
    y[y_off + (n * points + p) * nd + k] = acc;
  }
}

// Col2Im: one work-item per image element (flattened spatial index s, n * channels + c). It sums the
// column entries that land on it: for each kernel position (in order), the block whose window puts that
// position here, if the stride reaches it. nd spatial dims (up to 8); blocks = sliding blocks per dim.
__kernel void col2im(int nd, long8 image, long8 block, long8 dilation, long8 pad_begin, long8 stride, long8 blocks,
                     long channels, __global const float* x, long x_off, __global float* y, long y_off) {
  const long s = get_global_id(0), nc = get_global_id(1);
  const long im[8] = {image.s0, image.s1, image.s2, image.s3, image.s4, image.s5, image.s6, image.s7};
  const long bk[8] = {block.s0, block.s1, block.s2, block.s3, block.s4, block.s5, block.s6, block.s7};
  const long dl[8] = {dilation.s0, dilation.s1, dilation.s2, dilation.s3,
                      dilation.s4, dilation.s5, dilation.s6, dilation.s7};
  const long pb[8] = {pad_begin.s0, pad_begin.s1, pad_begin.s2, pad_begin.s3,
                      pad_begin.s4, pad_begin.s5, pad_begin.s6, pad_begin.s7};
  const long st[8] = {stride.s0, stride.s1, stride.s2, stride.s3, stride.s4, stride.s5, stride.s6, stride.s7};
  const long nb[8] = {blocks.s0, blocks.s1, blocks.s2, blocks.s3, blocks.s4, blocks.s5, blocks.s6, blocks.s7};
  long pos[8];
  long rest = s, taps = 1, length = 1;
  for (int i = nd - 1; i >= 0; --i) {
    pos[i] = rest % im[i];
    rest /= im[i];
    taps *= bk[i];
    length *= nb[i];
  }
  __global const float* col = x + x_off + nc * taps * length;  // [taps, length] of this (n, c)
  float acc = 0.0f;
  for (long k = 0; k < taps; ++k) {
    long kr = k, at = 0, scale = 1;
    int hit = 1;
    for (int i = nd - 1; i >= 0 && hit; --i) {
      const long ki = kr % bk[i];
      kr /= bk[i];
      const long t = pos[i] + pb[i] - ki * dl[i];
      if (t < 0 || t % st[i] != 0 || t / st[i] >= nb[i]) hit = 0;
      at += (t / st[i]) * scale;
      scale *= nb[i];
    }
    if (hit) acc += col[k * length + at];
  }
  y[y_off + nc * get_global_size(0) + s] = acc;
}

// DeformConv's bilinear sample of plane `src` at (h, v), zero outside (the ONNX reference's).
float deform_sample(__global const float* src, long in_h, long in_w, float h, float v) {
  const float fh = floor(h), fw = floor(v), th = h - fh, tw = v - fw;
  const long h0 = (long)fh, w0 = (long)fw;
  float s = 0.0f;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      const long hh = h0 + a, ww = w0 + b;
      if (hh >= 0 && hh < in_h && ww >= 0 && ww < in_w)
        s += (a ? th : 1.0f - th) * (b ? tw : 1.0f - tw) * src[hh * in_w + ww];
    }
  return s;
}

// DeformConv (2-D): one work-item per output element (ow, oh, n * out_channels + oc). Each kernel tap
// samples its input channel at the tap's position plus the learned offset (offset channels (h, w) per
// offset group and tap), bilinearly with zeros outside the map (the ONNX reference: GridSample with
// align_corners = 1 and zero padding), scaled by the mask (when given) and the weight. Bias when given.
__kernel void deform_conv(long in_c, long in_h, long in_w, long out_c, long out_h, long out_w, int k_h, int k_w,
                          int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w, long group,
                          long offset_group, int has_mask, int has_bias, __global const float* x, long x_off,
                          __global const float* w, long w_off, __global const float* offset, long o_off,
                          __global const float* bias, long b_off, __global const float* mask, long m_off,
                          __global float* y, long y_off) {
  const long ow = get_global_id(0), oh = get_global_id(1), noc = get_global_id(2);
  const long n = noc / out_c, oc = noc % out_c;
  const long icpg = in_c / group, ocpg = out_c / group, icpog = in_c / offset_group, g = oc / ocpg;
  const long plane = out_h * out_w, taps = (long)k_h * k_w;
  float acc = has_bias ? bias[b_off + oc] : 0.0f;
  for (long ci = 0; ci < icpg; ++ci) {
    const long c = g * icpg + ci, og = c / icpog;
    __global const float* src = x + x_off + (n * in_c + c) * in_h * in_w;
    for (int kh = 0; kh < k_h; ++kh)
      for (int kw = 0; kw < k_w; ++kw) {
        const long tap = og * taps + kh * k_w + kw;
        const long at = oh * out_w + ow;
        const float h = (float)(oh * stride_h - pad_h + kh * dil_h) +
                        offset[o_off + (n * offset_group * taps * 2 + tap * 2) * plane + at];
        const float v = (float)(ow * stride_w - pad_w + kw * dil_w) +
                        offset[o_off + (n * offset_group * taps * 2 + tap * 2 + 1) * plane + at];
        const float s = deform_sample(src, in_h, in_w, h, v);
        const float m = has_mask ? mask[m_off + (n * offset_group * taps + tap) * plane + at] : 1.0f;
        acc += w[w_off + ((oc * icpg + ci) * k_h + kh) * k_w + kw] * m * s;
      }
  }
  y[y_off + noc * plane + oh * out_w + ow] = acc;
}

// DeformConv's columns for GEMM: one work-item per (output position p, kernel tap, channel c) writes the
// masked bilinear sample cols[(c * taps + tap) * P + p] of batch entry n, so the convolution is
// W[oC, C / group * taps] x cols per group, and each sample is taken once instead of once per output channel.
__kernel void deform_im2col(long n, long in_c, long in_h, long in_w, long out_h, long out_w, int k_h, int k_w,
                            int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w, long offset_group,
                            int has_mask, __global const float* x, long x_off, __global const float* offset,
                            long o_off, __global const float* mask, long m_off, __global float* cols, long c_off) {
  const long p = get_global_id(0), c = get_global_id(2);
  const int t = get_global_id(1), kh = t / k_w, kw = t % k_w;
  const long plane = out_h * out_w, taps = (long)k_h * k_w, oh = p / out_w, ow = p % out_w;
  const long og = c / (in_c / offset_group), tap = og * taps + t;
  const float h = (float)(oh * stride_h - pad_h + kh * dil_h) +
                  offset[o_off + (n * offset_group * taps * 2 + tap * 2) * plane + p];
  const float v = (float)(ow * stride_w - pad_w + kw * dil_w) +
                  offset[o_off + (n * offset_group * taps * 2 + tap * 2 + 1) * plane + p];
  __global const float* src = x + x_off + (n * in_c + c) * in_h * in_w;
  const float s = deform_sample(src, in_h, in_w, h, v);
  const float m = has_mask ? mask[m_off + (n * offset_group * taps + tap) * plane + p] : 1.0f;
  cols[c_off + (c * taps + t) * plane + p] = m * s;
}
