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

// pool2d with 8 outputs along OW per work-item (CPUs): a strip whose windows lie inside the row loads
// each window column's 8 inputs as one vector (stride 1: vload8; stride 2: the even lanes of vload16,
// undilated); edge strips take the checked scalar path. Same arguments and results as pool2d.
// Global (ceil(OW / 8), OH, N*C), padded to the work-group size.
__kernel void pool2d_rows(int is_max, int include_pad, int H, int W, int OH, int OW, int kh, int kw, int sh, int sw,
                          int dh, int dw, int pt, int pl, int pb, int pr, __global const float* x, long x_off,
                          __global float* y, long y_off) {
  const int ow0 = get_global_id(0) * 8, oh = get_global_id(1);
  const long nc = get_global_id(2);
  if (ow0 >= OW || oh >= OH) return;
  x += x_off + nc * H * W;
  y += y_off + (nc * OH + oh) * OW + ow0;
  const int h0 = oh * sh - pt, w0 = ow0 * sw - pl;
  const int lanes = sw == 1 ? 8 : 16;
  if ((sw == 1 || sw == 2) && w0 >= 0 && w0 + (kw - 1) * dw + lanes <= W && ow0 + 8 <= OW) {
    // Every window of the strip has all kw columns inside; rows may still be clipped.
    float8 acc = (float8)(is_max ? -INFINITY : 0.0f);
    int rows = 0;
    for (int i = 0; i < kh; ++i) {
      const int h = h0 + i * dh;
      if (h < 0 || h >= H) continue;
      ++rows;
      __global const float* row = x + (long)h * W + w0;
      for (int j = 0; j < kw; ++j) {
        const float8 v = sw == 1 ? vload8(0, row + j * dw) : vload16(0, row + j * dw).even;
        acc = is_max ? fmax(acc, v) : acc + v;
      }
    }
    if (!is_max) {
      const int div = include_pad ? (min(h0 + kh, H + pb) - h0) * kw : rows * kw;
      acc /= (float)div;
    }
    vstore8(acc, 0, y);
    return;
  }
  const int n = min(8, OW - ow0);
  for (int o = 0; o < n; ++o) {
    const int ws = w0 + o * sw;
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
    y[o] = acc;
  }
}

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
