// Training kernels (layers/backward.cpp): the convolution's gradients with respect to its input (data) and its
// weights (filter), the pools' gradients with respect to their input, and a convolution forward that reads its
// weights at run time (ConvDynamic, at the end). 2-D (1-D runs with H = 1), NCHW, f32 with fp32 accumulation.
// Every kernel gathers: one work-item per element it writes sums the terms that reach it, in a fixed order,
// so there are no atomics and a run gives the same bits every time.
//
// The geometry arguments (named NAME_a) are read through GEO(NAME): a program built with -DGEO_SPEC and -DGEO_NAME=v
// for each (layers/backward.cpp builds one per convolution or pool geometry) has them as compile-time constants,
// so the compiler folds the index arithmetic and unrolls the window loops; without GEO_SPEC they are the arguments.
#ifndef INDEX_T
#define INDEX_T long  // gather_grad's indices (layers/backward.cpp builds int32 ones with -DINDEX_T=int)
#endif
#ifdef GEO_SPEC
#define GEO(name) GEO_##name
#else
#define GEO(name) name##_a
#endif

// Element i of an [N, C, H, W] tensor: its n, and (w, h, c) as .x, .y, .z.
inline int3 nchw_of(long i, int C, int H, int W, long* n) {
  const int x = (int)(i % W);
  long t = i / W;
  const int y = (int)(t % H);
  t /= H;
  *n = t / C;
  return (int3)(x, y, (int)(t % C));
}

// The output position whose window reads input position `pos` through tap k (pos = o * stride - pad + k * dil),
// or -1 when there is none.
inline int tap_output(int pos, int pad, int k, int dil, int stride, int out) {
  const int t = pos + pad - k * dil;
  return t < 0 || t % stride != 0 || t / stride >= out ? -1 : t / stride;
}

// The input position that output position o reads through tap k (o * stride - pad + k * dil), clamped into
// [0, size): *inside says whether it was inside (a tap in the padding reads the clamped element and adds 0).
inline int clamped_tap(int o, int stride, int pad, int k, int dil, int size, bool* inside) {
  const int v = o * stride - pad + k * dil;
  *inside = v >= 0 && v < size;
  return clamp(v, 0, size - 1);
}

// tap_output without the branch: the output position that reads input position `pos` through tap k, clamped into
// [0, out); *inside says whether there is one (the caller adds 0 otherwise, so work-items stay uniform).
inline int clamped_output(int pos, int pad, int k, int dil, int stride, int out, bool* inside) {
  const int t = pos + pad - k * dil;
  *inside = t >= 0 && t % stride == 0 && t / stride < out;
  return clamp(t / stride, 0, out - 1);
}

// dx[n, c, y, x] = sum over the outputs (oy, ox) of channel m of c's group whose window reads (y, x) through
// tap (kh, kw): dy[n, m, oy, ox] * w[m, c - g * Cg, kh, kw]. One work-item per element of dx.
__kernel void conv_grad_data(int C_a, int H_a, int W_a, int M_a, int OH_a, int OW_a, int KH_a, int KW_a, int sh_a,
                             int sw_a, int ph_a, int pw_a, int dh_a, int dw_a, int groups_a, __global const float* dy,
                             long dy_off, __global const float* w, long w_off, __global float* dx, long dx_off) {
  const int C = GEO(C), H = GEO(H), W = GEO(W), M = GEO(M), OH = GEO(OH), OW = GEO(OW), KH = GEO(KH), KW = GEO(KW),
            sh = GEO(sh), sw = GEO(sw), ph = GEO(ph), pw = GEO(pw), dh = GEO(dh), dw = GEO(dw), groups = GEO(groups);
  const long i = get_global_id(0);
  long n;
  const int3 at = nchw_of(i, C, H, W, &n);
  const int x = at.x, y = at.y, c = at.z;
  const int cg = C / groups, mg = M / groups, g = c / cg, ci = c - g * cg;
  dy += dy_off + n * M * OH * OW;
  w += w_off;
  // Branch-free (a tap outside dy reads a clamped element and adds 0): work-items stay uniform, so the CPU
  // compilers vectorize across them.
  float acc = 0.0f;
  for (int kh = 0; kh < KH; ++kh) {
    bool iny, inx;
    const int oy = clamped_output(y, ph, kh, dh, sh, OH, &iny);
    for (int kw = 0; kw < KW; ++kw) {
      const int ox = clamped_output(x, pw, kw, dw, sw, OW, &inx);
      const bool in = iny && inx;
      float part = 0.0f;
      for (int m = g * mg; m < (g + 1) * mg; ++m)
        part += dy[((long)m * OH + oy) * OW + ox] * w[(((long)m * cg + ci) * KH + kh) * KW + kw];
      acc += in ? part : 0.0f;
    }
  }
  dx[dx_off + i] = acc;
}

// dw[m, ci, kh, kw] = sum over n, oy, ox of dy[n, m, oy, ox] * x[n, g * Cg + ci, oy * sh - ph + kh * dh,
// ox * sw - pw + kw * dw] (taps in the padding read 0). One work-item per weight.
__kernel void conv_grad_filter(int N, int C_a, int H_a, int W_a, int M_a, int OH_a, int OW_a, int KH_a, int KW_a,
                               int sh_a, int sw_a, int ph_a, int pw_a, int dh_a, int dw_a, int groups_a,
                               __global const float* dy, long dy_off, __global const float* x, long x_off,
                               __global float* dwt, long dw_off) {
  const int C = GEO(C), H = GEO(H), W = GEO(W), M = GEO(M), OH = GEO(OH), OW = GEO(OW), KH = GEO(KH), KW = GEO(KW),
            sh = GEO(sh), sw = GEO(sw), ph = GEO(ph), pw = GEO(pw), dh = GEO(dh), dw = GEO(dw), groups = GEO(groups);
  const long i = get_global_id(0);
  const int kw = (int)(i % KW);
  long t = i / KW;
  const int kh = (int)(t % KH);
  t /= KH;
  const int cg = C / groups, mg = M / groups;
  const int ci = (int)(t % cg);
  const int m = (int)(t / cg);
  const int c = (m / mg) * cg + ci;
  // The outputs whose tap (kh, kw) lands inside the input: 0 <= o * s - p + k * d < size.
  const int y0 = kh * dh - ph, x0 = kw * dw - pw;
  const int oy_lo = y0 >= 0 ? 0 : (-y0 + sh - 1) / sh, ox_lo = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
  const int oy_hi = min(OH, H - y0 > 0 ? (H - y0 - 1) / sh + 1 : 0), ox_hi = min(OW, W - x0 > 0 ? (W - x0 - 1) / sw + 1 : 0);
  float acc = 0.0f;
  for (long n = 0; n < N; ++n) {
    __global const float* d = dy + dy_off + (n * M + m) * OH * OW;
    __global const float* xs = x + x_off + (n * C + c) * H * W;
    for (int oy = oy_lo; oy < oy_hi; ++oy)
      for (int ox = ox_lo; ox < ox_hi; ++ox) acc += d[oy * OW + ox] * xs[(oy * sh + y0) * W + ox * sw + x0];
  }
  dwt[dw_off + i] = acc;
}

#ifdef GEO_SPEC
// conv_grad_filter with every tap of one (m, ci) in one work-item: each dy element is read once for the KH x KW
// taps (built per geometry only: the taps are a compile-time array). The sums run over n, oy, ox in the same
// order as conv_grad_filter's, so both give the same bits.
__kernel void conv_grad_filter_taps(int N, __global const float* dy, long dy_off, __global const float* x, long x_off,
                                    __global float* dwt, long dw_off) {
  const int C = GEO_C, H = GEO_H, W = GEO_W, M = GEO_M, OH = GEO_OH, OW = GEO_OW, KH = GEO_KH, KW = GEO_KW;
  const int sh = GEO_sh, sw = GEO_sw, ph = GEO_ph, pw = GEO_pw, dh = GEO_dh, dw = GEO_dw, groups = GEO_groups;
  const int t = (int)get_global_id(0);
  const int cg = C / groups, mg = M / groups;
  const int ci = t % cg, m = t / cg, c = (m / mg) * cg + ci;
  float acc[GEO_KH * GEO_KW];
  for (int k = 0; k < KH * KW; ++k) acc[k] = 0.0f;
  for (long n = 0; n < N; ++n) {
    __global const float* d = dy + dy_off + (n * M + m) * OH * OW;
    __global const float* xs = x + x_off + (n * C + c) * H * W;
    for (int oy = 0; oy < OH; ++oy)
      for (int ox = 0; ox < OW; ++ox) {
        const float g = d[oy * OW + ox];
        for (int kh = 0; kh < KH; ++kh) {
          bool iny, inx;
          const int yc = clamped_tap(oy, sh, ph, kh, dh, H, &iny);
          for (int kw = 0; kw < KW; ++kw) {
            const float v = xs[yc * W + clamped_tap(ox, sw, pw, kw, dw, W, &inx)];
            acc[kh * KW + kw] += iny && inx ? g * v : 0.0f;
          }
        }
      }
  }
  for (int k = 0; k < KH * KW; ++k) dwt[dw_off + (long)t * KH * KW + k] = acc[k];
}
#endif

// The pools' input gradient: one work-item per element (y, x) of dx sums dy over the windows that hold it.
// MaxPool (is_max): a window passes its dy to its first largest element in row-major order (as PyTorch and
// the ONNX reference pick it), recomputed here from x. AveragePool: dy / the window's count, which counts the
// taps inside the input, or with count_include_pad those inside the padded input [-p_begin, size + p_end).
__kernel void pool_grad(int is_max_a, int count_include_pad_a, int H_a, int W_a, int OH_a, int OW_a, int KH_a, int KW_a,
                        int sh_a, int sw_a, int ph_a, int pw_a, int ph_end_a, int pw_end_a, int dh_a, int dw_a,
                        __global const float* dy, long dy_off, __global const float* xin, long x_off,
                        __global float* dx, long dx_off) {
  const int is_max = GEO(is_max), count_include_pad = GEO(count_include_pad), H = GEO(H), W = GEO(W), OH = GEO(OH),
            OW = GEO(OW), KH = GEO(KH), KW = GEO(KW), sh = GEO(sh), sw = GEO(sw), ph = GEO(ph), pw = GEO(pw),
            ph_end = GEO(ph_end), pw_end = GEO(pw_end), dh = GEO(dh), dw = GEO(dw);
  const long i = get_global_id(0);
  const int x = (int)(i % W);
  long t = i / W;
  const int y = (int)(t % H);
  const long plane = t / H;
  __global const float* d = dy + dy_off + plane * OH * OW;
  __global const float* xs = xin + x_off + plane * H * W;
  float acc = 0.0f;
  if (is_max && sh == KH && sw == KW && dh == 1 && dw == 1 && ph == 0 && pw == 0) {
    // Windows that tile the input (MaxPool 2x2 / 2, 3x3 / 3): one window holds (y, x), and its argmax is found
    // in KH KW reads, not (KH KW)^2 (its first tap is inside: it is at or before (y, x)). A compile-time branch
    // with GEO_SPEC.
    const int oy = y / KH, ox = x / KW;
    if (oy < OH && ox < OW) {
      const int wy = oy * KH, wx = ox * KW;
      int best = wy * W + wx;
      float bv = xs[best];
      for (int a = 0; a < KH; ++a)
        for (int b = 0; b < KW; ++b) {
          const int yy = wy + a, xx = wx + b;
          if (yy < H && xx < W && xs[yy * W + xx] > bv) best = yy * W + xx, bv = xs[yy * W + xx];
        }
      if (best == y * W + x) acc = d[oy * OW + ox];
    }
    dx[dx_off + i] = acc;
    return;
  }
  for (int kh = 0; kh < KH; ++kh) {
    const int oy = tap_output(y, ph, kh, dh, sh, OH);
    if (oy < 0) continue;
    for (int kw = 0; kw < KW; ++kw) {
      const int ox = tap_output(x, pw, kw, dw, sw, OW);
      if (ox < 0) continue;
      const int wy = oy * sh - ph, wx = ox * sw - pw;  // the window's first tap
      if (is_max) {
        int best = -1;
        float bv = 0.0f;
        for (int a = 0; a < KH; ++a) {
          const int yy = wy + a * dh;
          if (yy < 0 || yy >= H) continue;
          for (int b = 0; b < KW; ++b) {
            const int xx = wx + b * dw;
            if (xx < 0 || xx >= W) continue;
            const float v = xs[yy * W + xx];
            if (best < 0 || v > bv) best = yy * W + xx, bv = v;
          }
        }
        if (best == y * W + x) acc += d[oy * OW + ox];
      } else {
        int count = 0;
        const int lo_y = count_include_pad ? -ph : 0, hi_y = count_include_pad ? H + ph_end : H;
        const int lo_x = count_include_pad ? -pw : 0, hi_x = count_include_pad ? W + pw_end : W;
        for (int a = 0; a < KH; ++a) {
          const int yy = wy + a * dh;
          if (yy < lo_y || yy >= hi_y) continue;
          for (int b = 0; b < KW; ++b) {
            const int xx = wx + b * dw;
            if (xx >= lo_x && xx < hi_x) ++count;
          }
        }
        acc += d[oy * OW + ox] / (float)count;
      }
    }
  }
  dx[dx_off + i] = acc;
}

// ConvDynamic, the forward of a convolution whose weights are computed at run time (a training graph's weights
// are inputs updated in place; the Conv op re-lays its weights out at load). One work-item per output element:
// y[n, m, oy, ox] = b[m] + sum over c of m's group, kh, kw of x[n, c, oy * sh - ph + kh * dh, ...] * w[m, ci, kh, kw].
__kernel void conv_forward(int C_a, int H_a, int W_a, int M_a, int OH_a, int OW_a, int KH_a, int KW_a, int sh_a,
                           int sw_a, int ph_a, int pw_a, int dh_a, int dw_a, int groups_a, int has_bias,
                           __global const float* x, long x_off, __global const float* w, long w_off,
                           __global const float* b, long b_off, __global float* y, long y_off) {
  const int C = GEO(C), H = GEO(H), W = GEO(W), M = GEO(M), OH = GEO(OH), OW = GEO(OW), KH = GEO(KH), KW = GEO(KW),
            sh = GEO(sh), sw = GEO(sw), ph = GEO(ph), pw = GEO(pw), dh = GEO(dh), dw = GEO(dw), groups = GEO(groups);
  const long i = get_global_id(0);
  long n;
  const int3 at = nchw_of(i, M, OH, OW, &n);
  const int ox = at.x, oy = at.y, m = at.z;
  const int cg = C / groups, mg = M / groups, c0 = (m / mg) * cg;
  float acc = has_bias ? b[b_off + m] : 0.0f;
  // Branch-free as conv_grad_data: a tap in the padding reads a clamped element and adds 0.
  __global const float* xs = x + x_off + (n * C + c0) * H * W;
  __global const float* ws = w + w_off + (long)m * cg * KH * KW;
  for (int kh = 0; kh < KH; ++kh) {
    bool iny, inx;
    const int yc = clamped_tap(oy, sh, ph, kh, dh, H, &iny);
    for (int kw = 0; kw < KW; ++kw) {
      const int at = yc * W + clamped_tap(ox, sw, pw, kw, dw, W, &inx);
      const bool in = iny && inx;
      float part = 0.0f;
      for (int ci = 0; ci < cg; ++ci) part += xs[ci * H * W + at] * ws[(ci * KH + kh) * KW + kw];
      acc += in ? part : 0.0f;
    }
  }
  y[y_off + i] = acc;
}

// Gather's data gradient, deterministic without atomics: dx [outer, dim, inner] gathers, for its row j, the rows k
// of dy [outer, K, inner] whose index (negative ones count from the end) is j, in the order of k.
__kernel void gather_grad(long K, long dim, long inner, __global const float* dy, long dy_off,
                          __global const INDEX_T* idx, long idx_off, __global float* dx, long dx_off) {
  const long i = get_global_id(0);
  const long in = i % inner, t = i / inner, j = t % dim, outer = t / dim;
  __global const float* d = dy + dy_off + outer * K * inner + in;
  idx += idx_off;
  float acc = 0.0f;
  for (long k = 0; k < K; ++k) {
    long v = (long)idx[k];
    if (v < 0) v += dim;
    if (v == j) acc += d[k * inner];
  }
  dx[dx_off + i] = acc;
}

// Dropout in training mode (TrainingDropout): element i is kept when a uniform draw u(seed, T, i) in [0, 1) is at
// least `ratio`, and scaled by 1 / (1 - ratio) (PyTorch's inverted dropout; ratio 1 drops everything). scale[i] is
// that factor (0 where dropped), which the backward multiplies dy by. The draw hashes (seed, step, i): the same
// mask for the same step on any device, a new one each step.
inline uint mix32(uint h) {
  h ^= h >> 16;
  h *= 0x7feb352dU;
  h ^= h >> 15;
  h *= 0x846ca68bU;
  h ^= h >> 16;
  return h;
}

__kernel void dropout_train(float ratio, uint seed, __global const long* step, long step_off, __global const float* x,
                            long x_off, __global float* y, long y_off, __global float* scale, long s_off) {
  const long i = get_global_id(0);
  const long t = step[step_off];
  const uint h = mix32(mix32(mix32(seed ^ 0x9e3779b9U) ^ (uint)t ^ (uint)(t >> 32) * 0x85ebca6bU) ^ (uint)i ^
                       (uint)(i >> 32) * 0xc2b2ae35U);
  const float u = (float)(h >> 8) * (1.0f / 16777216.0f);
  const float s = u >= ratio && ratio < 1.0f ? 1.0f / (1.0f - ratio) : 0.0f;
  y[y_off + i] = x[x_off + i] * s;
  scale[s_off + i] = s;
}

#ifdef GEO_SPEC
// The GEMM form of the group-1 convolution (ConvGrad's gemm algorithm, layers/backward.cpp). The column matrix
// col [C * KH * KW, N * OH * OW]: row (c, kh, kw), column (n, oy, ox) holds x[n, c, oy * sh - ph + kh * dh,
// ox * sw - pw + kw * dw] (0 in the padding). The batch sits in the columns so that the filter gradient is one
// GEMM whose K runs over the batch and the positions: dw = dy^T-by-channel x col^T. A work-item per element,
// columns along dimension 0 (contiguous writes), rows along dimension 1.
__kernel void conv_im2col(int N, __global const float* x, long x_off, __global float* col, long col_off) {
  const int C = GEO_C, H = GEO_H, W = GEO_W, OH = GEO_OH, OW = GEO_OW, KH = GEO_KH, KW = GEO_KW;
  const int sh = GEO_sh, sw = GEO_sw, ph = GEO_ph, pw = GEO_pw, dh = GEO_dh, dw = GEO_dw;
  const long j = get_global_id(0), cols = (long)N * OH * OW;
  const int r = (int)get_global_id(1);
  const int kw = r % KW, kh = (r / KW) % KH, c = r / (KW * KH);
  const long n = j / (OH * OW);
  const int p = (int)(j - n * (OH * OW)), oy = p / OW, ox = p - oy * OW;
  bool iny, inx;
  const int yy = clamped_tap(oy, sh, ph, kh, dh, H, &iny), xx = clamped_tap(ox, sw, pw, kw, dw, W, &inx);
  const float v = x[x_off + ((n * C + c) * H + yy) * W + xx];
  col[col_off + r * cols + j] = iny && inx ? v : 0.0f;
}

// dyt[m, n, p] = dy[n, m, p] (p over OH * OW): the filter gradient's A operand, [M, N * OH * OW].
__kernel void conv_dy_by_channel(__global const float* dy, long dy_off, __global float* dyt, long dyt_off) {
  const long P = (long)GEO_OH * GEO_OW, M = GEO_M;
  const long p = get_global_id(0), m = get_global_id(1), n = get_global_id(2), N = get_global_size(2);
  dyt[dyt_off + (m * N + n) * P + p] = dy[dy_off + (n * M + m) * P + p];
}

// col2im: dx[n, c, y, x] = sum over the taps (kh, kw) of dcol[(c, kh, kw), (n, oy, ox)] for the output (oy, ox)
// that reads (y, x) through the tap (dcol: the data gradient's GEMM, col's layout). A work-item per element of
// dx, gathering (no atomics), branch-free as conv_grad_data.
__kernel void conv_col2im(int N, __global const float* dcol, long dcol_off, __global float* dx, long dx_off) {
  const int C = GEO_C, H = GEO_H, W = GEO_W, OH = GEO_OH, OW = GEO_OW, KH = GEO_KH, KW = GEO_KW;
  const int sh = GEO_sh, sw = GEO_sw, ph = GEO_ph, pw = GEO_pw, dh = GEO_dh, dw = GEO_dw;
  const long i = get_global_id(0), cols = (long)N * OH * OW;
  long n;
  const int3 at = nchw_of(i, C, H, W, &n);
  const int x = at.x, y = at.y, c = at.z;
  __global const float* d = dcol + dcol_off + (long)c * KH * KW * cols + n * OH * OW;
  float acc = 0.0f;
  for (int kh = 0; kh < KH; ++kh) {
    bool iny, inx;
    const int oy = clamped_output(y, ph, kh, dh, sh, OH, &iny);
    for (int kw = 0; kw < KW; ++kw) {
      const int ox = clamped_output(x, pw, kw, dw, sw, OW, &inx);
      const bool in = iny && inx;
      const float v = d[(long)(kh * KW + kw) * cols + oy * OW + ox];
      acc += in ? v : 0.0f;
    }
  }
  dx[dx_off + i] = acc;
}
#endif
