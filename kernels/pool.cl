// Pooling on N, C, spatial (1 to 3 spatial dims): MaxPool (dilation, optional Indices), AveragePool
// (count_include_pad), LpPool, and the global pools. Window parameters are runtime
// arguments, so one build serves every configuration.

#define POOL_AVERAGE 0
#define POOL_MAX 1
#define POOL_LP 2  // LpPool: (sum of |x|^p over the window)^(1/p); padding adds nothing

// Up to 3 spatial dims (1-D and 2-D pools have D = 1, and H = 1 for 1-D). One work-item per output
// element; range (OW, OH, OD * N*C). mode: POOL_*; p: LpPool's (integer) p. For average, include_pad divides by the
// window clipped to the padded input, else by the valid elements. With with_idx, MaxPool also writes the
// argmax as a flat index into X (ONNX Indices): 1 row-major (storage_order 0), 2 the spatial position
// column-major (storage_order 1: d + h * D + w * D * H, the first spatial dim fastest).
// Taps of a window starting at s0 (k taps, dilation dil) that lie before `limit` (the padded end).
inline int taps(int s0, int k, int dil, int limit) { return clamp((limit - s0 + dil - 1) / dil, 0, k); }

__kernel void pool3d(int mode, int p, int include_pad, int with_idx, int D, int H, int W, int OD, int OH, int OW,
                     int kd, int kh, int kw, int sd, int sh, int sw, int dd, int dh, int dw, int pf, int pt, int pl,
                     int pbk, int pb, int pr, __global const float* x, long x_off, __global float* y, long y_off,
                     __global long* idx, long i_off) {
  const int ow = get_global_id(0), oh = get_global_id(1);
  const long z = get_global_id(2);
  const int od = (int)(z % OD);
  const long nc = z / OD;
  const long plane = (long)D * H * W;
  x += x_off + nc * plane;
  const int d0 = od * sd - pf, h0 = oh * sh - pt, w0 = ow * sw - pl;
  const int is_max = mode == POOL_MAX;
  float acc = is_max ? -INFINITY : 0.0f;
  long best = -1;
  int valid = 0;
  for (int a = 0; a < kd; ++a) {
    const int d = d0 + a * dd;
    if (d < 0 || d >= D) continue;
    for (int i = 0; i < kh; ++i) {
      const int h = h0 + i * dh;
      if (h < 0 || h >= H) continue;
      for (int j = 0; j < kw; ++j) {
        const int w = w0 + j * dw;
        if (w < 0 || w >= W) continue;
        const long at = ((long)d * H + h) * W + w;
        const float v = x[at];
        if (is_max) {
          if (v > acc || best < 0) {
            acc = v;
            best = at;
          }
        } else {
          acc += mode == POOL_LP ? pown(fabs(v), p) : v;
        }
        ++valid;
      }
    }
  }
  if (mode == POOL_LP) {
    acc = p == 1 ? acc : p == 2 ? sqrt(acc) : rootn(acc, p);
  } else if (!is_max) {
    int div = valid;
    if (include_pad) div = taps(d0, kd, dd, D + pbk) * taps(h0, kh, dh, H + pb) * taps(w0, kw, dw, W + pr);
    acc /= (float)div;
  }
  const long o = ((nc * OD + od) * OH + oh) * OW + ow;
  y[y_off + o] = acc;
  if (with_idx == 2 && best >= 0) best = best / ((long)W * H) + (best / W % H) * D + (best % W) * D * H;
  if (with_idx) idx[i_off + o] = nc * plane + best;
}

// 2-D fast path (no Indices; average only undilated): one work-item per output element; range
// (OW, OH, N*C). PoCL runs this ~3x faster than pool3d on 3x3/2 windows. is_max: 1 max, 0 average. For average,
// include_pad divides by the window clipped to the padded input, else by the valid elements.
__kernel void pool2d(int is_max, int include_pad, int H, int W, int OH, int OW, int kh, int kw, int sh, int sw,
                     int dh, int dw, int pt, int pl, int pb, int pr, __global const float* x, long x_off,
                     __global float* y, long y_off) {
  const int ow = get_global_id(0), oh = get_global_id(1);
  const long nc = get_global_id(2);
  if (ow >= OW || oh >= OH) return;
  x += x_off + nc * H * W;
  const int h0 = oh * sh - pt, w0 = ow * sw - pl;
  float acc = is_max ? -INFINITY : 0.0f;
  int valid = 0;
  for (int i = 0; i < kh; ++i) {
    const int h = h0 + i * dh;
    if (h < 0 || h >= H) continue;
    for (int j = 0; j < kw; ++j) {
      const int w = w0 + j * dw;
      if (w < 0 || w >= W) continue;
      const float v = x[h * W + w];
      acc = is_max ? fmax(acc, v) : acc + v;
      ++valid;
    }
  }
  if (!is_max) {
    int div = valid;
    if (include_pad) div = (min(h0 + kh, H + pb) - h0) * (min(w0 + kw, W + pr) - w0);
    acc /= (float)div;
  }
  y[y_off + (nc * OH + oh) * OW + ow] = acc;
}

// pool2d for CPUs: a whole output row per work-item. The outputs whose windows lie inside the row (all
// kw columns) go in vector strips of 8, four strips at once where they fit (independent max / sum
// chains); each window column's 8 inputs are one vector load (stride 1: vload8; stride 2: the even
// lanes of vload16; undilated columns or any dilation with dw applied per column). The last strip may
// overlap the one before it (rewriting the same values); edge outputs go one by one as in pool2d.
// Same arguments as pool2d plus nc_total. Global (OH, N*C), padded to the work-group size.
inline float pool_one(int is_max, int include_pad, __global const float* x, int H, int W, int kh, int kw, int dh,
                      int dw, int pb, int pr, int h0, int ws) {
  float acc = is_max ? -INFINITY : 0.0f;
  int valid = 0;
  for (int i = 0; i < kh; ++i) {
    const int h = h0 + i * dh;
    if (h < 0 || h >= H) continue;
    for (int j = 0; j < kw; ++j) {
      const int w = ws + j * dw;
      if (w < 0 || w >= W) continue;
      const float v = x[(long)h * W + w];
      acc = is_max ? fmax(acc, v) : acc + v;
      ++valid;
    }
  }
  if (!is_max) {
    int div = valid;
    if (include_pad) div = (min(h0 + kh, H + pb) - h0) * (min(ws + kw, W + pr) - ws);
    acc /= (float)div;
  }
  return acc;
}

#define POOL_LOAD8(p) (sw == 1 ? vload8(0, (p)) : vload16(0, (p)).even)
#define POOL_ACC(a, v) a = is_max ? fmax(a, v) : a + v

__kernel void pool2d_rows(int is_max, int include_pad, int H, int W, int OH, int OW, int kh, int kw, int sh, int sw,
                          int dh, int dw, int pt, int pl, int pb, int pr, __global const float* x, long x_off,
                          __global float* y, long y_off, int nc_total) {
  const int oh = get_global_id(0), nc = get_global_id(1);
  if (oh >= OH || nc >= nc_total) return;
  x += x_off + (long)nc * H * W;
  y += y_off + ((long)nc * OH + oh) * OW;
  const int h0 = oh * sh - pt;
  // Rows of the window inside the input (the vector strips' average divides by rows * kw).
  int rows = 0;
  for (int i = 0; i < kh; ++i) rows += (h0 + i * dh >= 0 && h0 + i * dh < H);
  const float div = include_pad ? (float)((min(h0 + kh, H + pb) - h0) * kw) : (float)(rows * kw);
  const int lanes = sw == 1 ? 8 : 16;
  const int lo = (pl + sw - 1) / sw;
  const int room = W - lanes - (kw - 1) * dw + pl;
  const int hi = (sw == 1 || sw == 2) && room >= 0 ? min(OW - 8, room / sw) : -1;
  if (hi < lo) {
    for (int ow = 0; ow < OW; ++ow)
      y[ow] = pool_one(is_max, include_pad, x, H, W, kh, kw, dh, dw, pb, pr, h0, ow * sw - pl);
    return;
  }
  for (int ow = 0; ow < lo; ++ow)
    y[ow] = pool_one(is_max, include_pad, x, H, W, kh, kw, dh, dw, pb, pr, h0, ow * sw - pl);
  const float8 init = (float8)(is_max ? -INFINITY : 0.0f);
  int s = lo;
  for (; s + 24 < hi; s += 32) {
    float8 a0 = init, a1 = init, a2 = init, a3 = init;
    const int step = 8 * sw;
    for (int i = 0; i < kh; ++i) {
      const int h = h0 + i * dh;
      if (h < 0 || h >= H) continue;
      __global const float* row = x + (long)h * W + s * sw - pl;
      for (int j = 0; j < kw; ++j) {
        __global const float* p = row + j * dw;
        POOL_ACC(a0, POOL_LOAD8(p));
        POOL_ACC(a1, POOL_LOAD8(p + step));
        POOL_ACC(a2, POOL_LOAD8(p + 2 * step));
        POOL_ACC(a3, POOL_LOAD8(p + 3 * step));
      }
    }
    if (!is_max) a0 /= div, a1 /= div, a2 /= div, a3 /= div;
    vstore8(a0, 0, y + s);
    vstore8(a1, 0, y + s + 8);
    vstore8(a2, 0, y + s + 16);
    vstore8(a3, 0, y + s + 24);
  }
  for (;; s += 8) {
    if (s > hi) s = hi;  // the last strip ends at hi + 7, overlapping the one before
    float8 a = init;
    for (int i = 0; i < kh; ++i) {
      const int h = h0 + i * dh;
      if (h < 0 || h >= H) continue;
      __global const float* row = x + (long)h * W + s * sw - pl;
      for (int j = 0; j < kw; ++j) POOL_ACC(a, POOL_LOAD8(row + j * dw));
    }
    if (!is_max) a /= div;
    vstore8(a, 0, y + s);
    if (s == hi) break;
  }
  for (int ow = hi + 8; ow < OW; ++ow)
    y[ow] = pool_one(is_max, include_pad, x, H, W, kh, kw, dh, dw, pb, pr, h0, ow * sw - pl);
}

// 3x3 pools on CPUs, separable. MaxPool stride 1, no dilation, pads of at most 1 (googlenet's pools inside
// the inception blocks: 3x3/1 pad 1 on 28x28, 14x14 and 7x7 maps): the max of the window's three rows first
// (a column max), then of three neighbouring column maxes. An output row per work-item. Rows and columns
// outside the input are clamped to the edge row / column: the edge lies inside the window (pads <= 1), and
// max is idempotent, so the duplicate changes nothing. Outputs whose 10 input columns lie inside the row go in
// strips of 8 (three vload8 + three vload2, the shifted windows by swizzles: 6 loads and 6 vector max for 8
// outputs, against 9 loads and 9 max by pool2d_rows); the rest slide along the row, a new column max (3 loads)
// per output. sh, sw: 1 or 2 (stride 2 for MaxPool only, rows of 16 outputs or more, see below). is_max 0:
// AveragePool 3x3/1 with no padding (inception_v3's, after its Pad node), the same
// with sums (no clamp is ever taken: every window lies inside) divided by 9. Same arguments as pool2d_rows
// (the window's size, dilations and include_pad are not read).
__kernel void pool2d_3x3(int is_max, int include_pad, int H, int W, int OH, int OW, int kh, int kw, int sh,
                            int sw, int dh, int dw, int pt, int pl, int pb, int pr, __global const float* x,
                            long x_off, __global float* y, long y_off, int nc_total) {
  const int oh = get_global_id(0), nc = get_global_id(1);
  if (oh >= OH || nc >= nc_total) return;
  x += x_off + (long)nc * H * W;
  y += y_off + ((long)nc * OH + oh) * OW;
  const int h0 = oh * sh - pt;
  __global const float* r0 = x + (long)clamp(h0, 0, H - 1) * W;
  __global const float* r1 = x + (long)clamp(h0 + 1, 0, H - 1) * W;
  __global const float* r2 = x + (long)clamp(h0 + 2, 0, H - 1) * W;
#define M3_OP(a, b) (is_max ? fmax(a, b) : (a) + (b))
#define M3_COL(c) M3_OP(M3_OP(r0[c], r1[c]), r2[c])
  if (sw == 2) {
    // Stride 2 (max only; the stem pools 3x3/2): output s reads columns 2s - pl .. 2s - pl + 2; 8 outputs
    // read 17 columns, a vload16 and one more per row, and the three taps are the even lanes, the odd lanes
    // and the even lanes shifted by one.
    const int lo = (pl + 1) / 2, room = W - 17 + pl, hi = room < 0 ? -1 : min(OW - 8, room / 2);
    for (int ow = 0; ow < OW; ++ow) {
      if (ow == lo && hi >= lo) ow = hi + 8;  // the strips below cover [lo, hi + 8)
      if (ow >= OW) break;
      const int w = ow * 2 - pl;
      y[ow] = fmax(fmax(M3_COL(clamp(w, 0, W - 1)), M3_COL(clamp(w + 1, 0, W - 1))), M3_COL(clamp(w + 2, 0, W - 1)));
    }
    if (hi < lo) return;
    for (int s = lo;; s += 8) {
      if (s > hi) s = hi;
      const int w = s * 2 - pl;
      const float16 a = fmax(fmax(vload16(0, r0 + w), vload16(0, r1 + w)), vload16(0, r2 + w));
      const float e = M3_COL(w + 16);
      vstore8(fmax(fmax(a.even, a.odd), (float8)(a.s2468, a.sace, e)), 0, y + s);
      if (s == hi) break;
    }
    return;
  }
  // Stride 1: strips: output s reads columns s - pl .. s - pl + 9.
  // Strips: output s reads columns s - pl .. s - pl + 9.
  const int lo = pl, hi = min(OW - 8, W - 10 + pl);
  const int scalar_end = hi >= lo ? lo : OW;
  // Sliding column maxes over [0, scalar_end) and, after the strips, [hi + 8, OW).
  for (int pass = 0; pass < 2; ++pass) {
    const int from = pass == 0 ? 0 : hi + 8, to = pass == 0 ? scalar_end : OW;
    if (pass == 1 && hi < lo) break;
    if (from >= to) continue;
    float c0 = M3_COL(clamp(from - pl, 0, W - 1)), c1 = M3_COL(clamp(from - pl + 1, 0, W - 1));
    for (int ow = from; ow < to; ++ow) {
      const float c2 = M3_COL(clamp(ow - pl + 2, 0, W - 1));
      y[ow] = is_max ? fmax(fmax(c0, c1), c2) : (c0 + c1 + c2) / 9.0f;
      c0 = c1;
      c1 = c2;
    }
  }
  if (hi < lo) return;
  for (int s = lo;; s += 8) {
    if (s > hi) s = hi;  // the last strip ends at hi + 7, overlapping the one before
    __global const float* p0 = r0 + s - pl;
    __global const float* p1 = r1 + s - pl;
    __global const float* p2 = r2 + s - pl;
    const float8 a = M3_OP(M3_OP(vload8(0, p0), vload8(0, p1)), vload8(0, p2));
    const float2 b = M3_OP(M3_OP(vload2(0, p0 + 8), vload2(0, p1 + 8)), vload2(0, p2 + 8));
    const float8 a1 = (float8)(a.s1234, a.s567, b.s0);
    const float8 a2 = (float8)(a.s2345, a.s67, b);
    vstore8(is_max ? fmax(fmax(a, a1), a2) : (a + a1 + a2) / 9.0f, 0, y + s);
    if (s == hi) break;
  }
#undef M3_COL
#undef M3_OP
}

// 3x3 max pools on CPUs over rows of at most 32 columns (googlenet's 28x28, 14x14 and 7x7 maps, stride 1
// and 2), where pool2d_3x3's strips of 8 cover little of a row: 16 outputs of a row per vector. For output
// vector q and tap column d (0..2), lane j reads column sw * (16 q + j) + d - pl of the window's three rows
// (clamped to the edge rows: pt <= 1, max is idempotent): one unaligned vload16 per row at stride 1, the even
// lanes of two at stride 2; columns outside the row (the pads, and lanes past the row) become -INFINITY
// by a select, so each output is the max of the taps inside its window. Every window holds one. A plane per
// work-item, rows in order: a row's whole vectors may run into the next row (written after it); rows whose
// vectors would run past the plane are stored element by element, and rows whose reads would leave X
// (nc_total planes from x_off) are read element by element. W <= 32, OW <= 32, sh and sw 1 or 2, pt and pl
// 0 or 1 (Pool::create checks). Shuffling one column max per row instead of these loads was 2-3x slower
// than pool2d_3x3 on PoCL, with masks computed at run time or built in.
// max(acc, v) that skips a NaN v, as fmax does, in a compare and a blend (fmax is four instructions on
// AVX-512 and made this kernel 1.7x slower); acc starts at -INFINITY, so it is never NaN.
inline float16 pn_max(float16 acc, float16 v) { return select(acc, v, v > acc); }
inline float16 pn_tap(__global const float* r, int base, int sw) {
  if (sw == 1) return vload16(0, r + base);
  const float16 a = vload16(0, r + base), b = vload16(1, r + base);
  return (float16)(a.even, b.even);
}
__kernel void pool2d_3x3_narrow(int H, int W, int OH, int OW, int sh, int sw, int pt, int pl,
                                __global const float* x, long x_off, __global float* y, long y_off, int nc_total) {
  const int nc = get_global_id(0);
  if (nc >= nc_total) return;
  const int no = OW > 16 ? 2 : 1;              // output vectors per row
  const long x_end = (long)nc_total * H * W;  // elements of X from x_off
  const long plane = (long)nc * H * W;
  x += x_off;
  y += y_off + (long)nc * OH * OW;
  for (int oh = 0; oh < OH; ++oh) {
    const int h0 = oh * sh - pt;
    long at[3];
#pragma unroll
    for (int i = 0; i < 3; ++i) at[i] = plane + (long)clamp(h0 + i, 0, H - 1) * W;
    // The reads span columns -pl .. sw * 16 * no + 1 - pl of each row (+ 16 more lanes at stride 2).
    bool whole = true;
#pragma unroll
    for (int i = 0; i < 3; ++i) whole = whole && at[i] - pl >= 0 && at[i] + sw * 16 * no + 2 - pl <= x_end;
    __global float* yr = y + oh * OW;
    const bool store_whole = oh * OW + 16 * no <= OH * OW;
    for (int q = 0; q < no; ++q) {
      float16 v = (float16)(-INFINITY);
#pragma unroll
      for (int d = 0; d < 3; ++d) {
        const int base = sw * 16 * q + d - pl;
        const int16 col = sw * (16 * q + CLDL_IOTA16) + d - pl;
        float16 t;
        if (whole) {
          t = pn_max(pn_max(pn_max((float16)(-INFINITY), pn_tap(x + at[0], base, sw)), pn_tap(x + at[1], base, sw)),
                     pn_tap(x + at[2], base, sw));
        } else {
          float e[16];
          for (int j = 0; j < 16; ++j) {
            const int c = clamp(sw * (16 * q + j) + d - pl, 0, W - 1);  // the select below drops clamped lanes
            e[j] = fmax(fmax(x[at[0] + c], x[at[1] + c]), x[at[2] + c]);  // fmax skips NaN too
          }
          t = vload16(0, e);
        }
        v = pn_max(v, select(t, (float16)(-INFINITY), col < 0 || col >= W));
      }
      if (store_whole) {
        vstore16(v, q, yr);
      } else {
        float e[16];
        vstore16(v, 0, e);
        for (int j = 0; j < 16 && 16 * q + j < OW; ++j) yr[16 * q + j] = e[j];
      }
    }
  }
}

// pool2d for CPUs on small planes (rows too narrow for pool2d_rows' strips: the digits CNN's 8x8 and 4x4
// maps at batch 450, where the 3-D pool2d range vectorised over 4 or 8 outputs of a row): a whole output
// plane per work-item, the window's size and stride built in (-DPP_KH, PP_KW, PP_SH, PP_SW), so its taps
// unroll with no loop, and PoCL vectorises across work-items (neighbouring planes). Padding taps load
// element 0 and are masked. Same arguments as pool2d plus nc_total. Global (N*C), padded.
#ifdef PP_KH
inline float pp_one(int is_max, int include_pad, __global const float* x, int H, int W, int dh, int dw, int pb, int pr,
                    int h0, int w0) {
  float acc = is_max ? -INFINITY : 0.0f;
  if (h0 >= 0 && h0 + (PP_KH - 1) * dh < H && w0 >= 0 && w0 + (PP_KW - 1) * dw < W) {  // inside: no checks
#pragma unroll
    for (int i = 0; i < PP_KH; ++i)
#pragma unroll
      for (int j = 0; j < PP_KW; ++j) {
        const float v = x[(h0 + i * dh) * W + w0 + j * dw];
        acc = is_max ? (v > acc ? v : acc) : acc + v;
      }
    return is_max ? acc : acc / (float)(PP_KH * PP_KW);
  }
  int valid = 0;
#pragma unroll
  for (int i = 0; i < PP_KH; ++i) {
    const int h = h0 + i * dh;
#pragma unroll
    for (int j = 0; j < PP_KW; ++j) {
      const int w = w0 + j * dw;
      const bool in = h >= 0 && h < H && w >= 0 && w < W;
      const float v = x[in ? h * W + w : 0];
      // A compare and select, not fmax: the same result (acc is never NaN; a NaN input is skipped as fmax
      // skips it), and the vector path below does the same.
      acc = in ? (is_max ? (v > acc ? v : acc) : acc + v) : acc;
      valid += in;
    }
  }
  if (!is_max) {
    const int div = include_pad ? (min(h0 + PP_KH, H + pb) - h0) * (min(w0 + PP_KW, W + pr) - w0) : valid;
    acc /= (float)div;
  }
  return acc;
}

__kernel void pool2d_planes(int is_max, int include_pad, int H, int W, int OH, int OW, int dh, int dw, int pt, int pl,
                            int pb, int pr, __global const float* x, long x_off, __global float* y, long y_off,
                            int nc_total) {
  const int nc = get_global_id(0);
  if (nc >= nc_total) return;
  x += x_off + (long)nc * H * W;
  y += y_off + (long)nc * OH * OW;
  for (int oh = 0; oh < OH; ++oh) {
    const int h0 = oh * PP_SH - pt;
    int rows = 0;  // window rows inside the input
#pragma unroll
    for (int i = 0; i < PP_KH; ++i) rows += h0 + i * dh >= 0 && h0 + i * dh < H;
    const float div = include_pad ? (float)((min(h0 + PP_KH, H + pb) - h0) * PP_KW) : (float)(rows * PP_KW);
    int ow = 0;
    // 4 outputs at once where their windows' columns lie inside the row: each tap's 4 inputs (stride
    // PP_SW apart) one vector, max / sum in float4 lanes.
    for (; ow + 4 <= OW; ow += 4) {
      const int w0 = ow * PP_SW - pl;
      if (w0 < 0 || w0 + 3 * PP_SW + (PP_KW - 1) * dw >= W) {
        for (int q = 0; q < 4; ++q)
          y[oh * OW + ow + q] = pp_one(is_max, include_pad, x, H, W, dh, dw, pb, pr, h0, w0 + q * PP_SW);
        continue;
      }
      float4 acc = (float4)(is_max ? -INFINITY : 0.0f);
#pragma unroll
      for (int i = 0; i < PP_KH; ++i) {
        const int h = h0 + i * dh;
        if (h < 0 || h >= H) continue;
#pragma unroll
        for (int j = 0; j < PP_KW; ++j) {
          __global const float* p = x + h * W + w0 + j * dw;
          const float4 v = (float4)(p[0], p[PP_SW], p[2 * PP_SW], p[3 * PP_SW]);
          acc = is_max ? (v > acc ? v : acc) : acc + v;
        }
      }
      if (!is_max) acc /= div;
      vstore4(acc, 0, y + oh * OW + ow);
    }
    for (; ow < OW; ++ow) y[oh * OW + ow] = pp_one(is_max, include_pad, x, H, W, dh, dw, pb, pr, h0, ow * PP_SW - pl);
  }
}
#endif

// Global pools: one work-group of `get_local_size(0)` (a power of two) per (n, c) plane reduces it
// in local memory.
__kernel void global_pool(int is_max, long plane, __global const float* x, long x_off, __global float* y,
                          long y_off, __local float* scratch) {
  const long nc = get_group_id(0);
  const int lid = get_local_id(0), ls = get_local_size(0);
  x += x_off + nc * plane;
  float acc = is_max ? -INFINITY : 0.0f;
  for (long i = lid; i < plane; i += ls) acc = is_max ? fmax(acc, x[i]) : acc + x[i];
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = ls / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] = is_max ? fmax(scratch[lid], scratch[lid + s]) : scratch[lid] + scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) y[y_off + nc] = is_max ? scratch[0] : scratch[0] / (float)plane;
}

// Global pools on CPUs: a plane per work-item, no barrier; work-group reductions cost more than the work on
// the small planes of CNN heads. Global (nc), padded; one item per work-group.
__kernel void global_pool_planes(int is_max, long plane, long nc, __global const float* x, long x_off,
                                 __global float* y, long y_off) {
  const long p = get_global_id(0);
  if (p >= nc) return;
  x += x_off + p * plane;
  // Two float16 accumulators over the plane, then the tail: a work-item reads its plane as vectors (one
  // item per work-group, so PoCL does not spread planes over lanes and gather).
  float16 a0 = (float16)(is_max ? -INFINITY : 0.0f), a1 = a0;
  long i = 0;
  if (is_max) {
    for (; i + 32 <= plane; i += 32) {
      a0 = fmax(a0, vload16(0, x + i));
      a1 = fmax(a1, vload16(0, x + i + 16));
    }
  } else {
    for (; i + 32 <= plane; i += 32) {
      a0 += vload16(0, x + i);
      a1 += vload16(0, x + i + 16);
    }
  }
  const float16 a = is_max ? fmax(a0, a1) : a0 + a1;
  const float8 h8 = is_max ? fmax(a.lo, a.hi) : a.lo + a.hi;
  const float4 h4 = is_max ? fmax(h8.lo, h8.hi) : h8.lo + h8.hi;
  const float2 h2 = is_max ? fmax(h4.lo, h4.hi) : h4.lo + h4.hi;
  float acc = is_max ? fmax(h2.x, h2.y) : h2.x + h2.y;
  if (is_max)
    for (; i < plane; ++i) acc = fmax(acc, x[i]);
  else
    for (; i < plane; ++i) acc += x[i];
  y[y_off + p] = is_max ? acc : acc / (float)plane;
}
