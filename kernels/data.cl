// Data movement: strided copy (Transpose, Slice, Expand, Concat, Split), Pad, Tile, Gather,
// GatherElements, Resize.
// Movement kernels do not look at values, so each is defined once per element size (1, 2, 4, 8 bytes)
// by the DEFINE_* macros below and one build serves every dtype. Resize works on f32.


// 3-D range (innermost dim, next dim, the rest): dst[view] = src[view], both views given by strides
// (0 = broadcast, negative = reversed walk for negative Slice steps); only dims beyond the third need
// div/mod. m_* / i_* are the strides of the two inner dims.
#define DEFINE_COPY(T, NAME)                                                                           \
  __kernel void NAME(int rank, long8 dims, __global const T* src, long s_off, long8 ss, long s_m,      \
                     long s_in, __global T* dst, long d_off, long8 ds, long d_m, long d_in) {          \
    const long x = get_global_id(0), y = get_global_id(1), o = get_global_id(2);                      \
    dst[d_off + nd_offset(o, rank - 2, dims, ds) + y * d_m + x * d_in] =                               \
        src[s_off + nd_offset(o, rank - 2, dims, ss) + y * s_m + x * s_in];                            \
  }
DEFINE_COPY(uchar, copy_strided_1)
DEFINE_COPY(ushort, copy_strided_2)
DEFINE_COPY(uint, copy_strided_4)
DEFINE_COPY(ulong, copy_strided_8)

// The CPU copies (layers/data.cpp StridedCopy picks one and logs it). A CPU runtime gains nothing from
// one element per work-item with strides it cannot see at compile time: it gathers element by element.
// - copy_rows: source and destination both contiguous along the innermost dim (Slice of rows, Concat,
//   head transposes that keep the last dim): each work-item copies COPY_RUN elements with vector loads.
// - copy_tiles: the destination is contiguous along the innermost dim and the source along the next one
//   (a transpose of the last two dims, batched): each work-item copies a COPY_TILE x COPY_TILE tile, so
//   the lines it reads and writes stay in its cache.
// Both take (inner, mid) explicitly; the launch is padded to the work-group size, so items past the end
// return.
#ifndef COPY_RUN
#define COPY_RUN 16
#endif
#ifndef COPY_TILE
#define COPY_TILE 16
#endif
#define DEFINE_COPY_ROWS(T, NAME)                                                                      \
  __kernel void NAME(int rank, long8 dims, long inner, long mid, __global const T* src, long s_off,    \
                     long8 ss, long s_m, __global T* dst, long d_off, long8 ds, long d_m) {            \
    const long x = get_global_id(0) * COPY_RUN, y = get_global_id(1), o = get_global_id(2);           \
    if (x >= inner || y >= mid) return;                                                                \
    __global const T* s = src + s_off + nd_offset(o, rank - 2, dims, ss) + y * s_m + x;               \
    __global T* d = dst + d_off + nd_offset(o, rank - 2, dims, ds) + y * d_m + x;                     \
    if (x + COPY_RUN <= inner) {                                                                       \
      for (int i = 0; i < COPY_RUN; i += 16) vstore16(vload16(0, s + i), 0, d + i);                    \
    } else {                                                                                           \
      for (long i = 0; i < inner - x; ++i) d[i] = s[i];                                                \
    }                                                                                                  \
  }
DEFINE_COPY_ROWS(uchar, copy_rows_1)
DEFINE_COPY_ROWS(ushort, copy_rows_2)
DEFINE_COPY_ROWS(uint, copy_rows_4)
DEFINE_COPY_ROWS(ulong, copy_rows_8)

#define DEFINE_COPY_TILES(T, NAME)                                                                     \
  __kernel void NAME(int rank, long8 dims, long inner, long mid, __global const T* src, long s_off,    \
                     long8 ss, long s_m, long s_in, __global T* dst, long d_off, long8 ds, long d_m,   \
                     long d_in) {                                                                      \
    const long x0 = get_global_id(0) * COPY_TILE, y0 = get_global_id(1) * COPY_TILE;                 \
    const long o = get_global_id(2);                                                                   \
    if (x0 >= inner || y0 >= mid) return;                                                              \
    __global const T* s = src + s_off + nd_offset(o, rank - 2, dims, ss) + y0 * s_m + x0 * s_in;      \
    __global T* d = dst + d_off + nd_offset(o, rank - 2, dims, ds) + y0 * d_m + x0 * d_in;            \
    const long xn = min((long)COPY_TILE, inner - x0), yn = min((long)COPY_TILE, mid - y0);             \
    if (xn == COPY_TILE && yn == COPY_TILE && s_m == 1 && d_in == 1) {                                 \
      /* the transpose proper: a whole tile of source columns, read down and written across */        \
      T t[COPY_TILE][COPY_TILE];                                                                       \
      for (int x = 0; x < COPY_TILE; ++x)                                                              \
        for (int y = 0; y < COPY_TILE; ++y) t[y][x] = s[x * s_in + y];                                 \
      for (int y = 0; y < COPY_TILE; ++y)                                                              \
        for (int x = 0; x < COPY_TILE; ++x) d[y * d_m + x] = t[y][x];                                  \
    } else if (xn == COPY_TILE && yn == COPY_TILE) {                                                   \
      for (int y = 0; y < COPY_TILE; ++y)                                                              \
        for (int x = 0; x < COPY_TILE; ++x) d[y * d_m + x * d_in] = s[y * s_m + x * s_in];             \
    } else {                                                                                           \
      for (long y = 0; y < yn; ++y)                                                                    \
        for (long x = 0; x < xn; ++x) d[y * d_m + x * d_in] = s[y * s_m + x * s_in];                   \
    }                                                                                                  \
  }
DEFINE_COPY_TILES(uchar, copy_tiles_1)
DEFINE_COPY_TILES(ushort, copy_tiles_2)
DEFINE_COPY_TILES(uint, copy_tiles_4)
DEFINE_COPY_TILES(ulong, copy_tiles_8)

// Pad: one work-item per output element. mode 0 constant (value), 1 reflect, 2 edge, 3 wrap (the input
// repeated along the axis, any number of times).
#define DEFINE_PAD(T, NAME)                                                                            \
  __kernel void NAME(int rank, int mode, T value, long8 odims, long8 idims, long8 begin,               \
                     __global const T* src, long s_off, __global T* dst, long d_off) {                 \
    long o = get_global_id(0);                                                                         \
    const long out_index = o;                                                                          \
    long od[8] = {odims.s0, odims.s1, odims.s2, odims.s3, odims.s4, odims.s5, odims.s6, odims.s7};     \
    long id[8] = {idims.s0, idims.s1, idims.s2, idims.s3, idims.s4, idims.s5, idims.s6, idims.s7};     \
    long bg[8] = {begin.s0, begin.s1, begin.s2, begin.s3, begin.s4, begin.s5, begin.s6, begin.s7};     \
    long src_index = 0, stride = 1;                                                                    \
    int outside = 0;                                                                                   \
    for (int i = rank - 1; i >= 0; --i) {                                                              \
      long c = o % od[i] - bg[i];                                                                      \
      o /= od[i];                                                                                      \
      if (c < 0 || c >= id[i]) {                                                                       \
        if (mode == 0) outside = 1;                                                                    \
        else if (mode == 1) c = c < 0 ? -c : 2 * (id[i] - 1) - c;                                     \
        else if (mode == 3) c = (c % id[i] + id[i]) % id[i];                                           \
        else c = c < 0 ? 0 : id[i] - 1;                                                                \
      }                                                                                                \
      src_index += c * stride;                                                                         \
      stride *= id[i];                                                                                 \
    }                                                                                                  \
    dst[d_off + out_index] = outside ? value : src[s_off + src_index];                                 \
  }
DEFINE_PAD(uchar, pad_1)
DEFINE_PAD(ushort, pad_2)
DEFINE_PAD(uint, pad_4)
DEFINE_PAD(ulong, pad_8)

// Pad by output rows (the last axis): one work-item per row maps the row's other coordinates to the source
// once (the element kernel above paid a 64-bit division per axis per element: 0.35 GB/s on PoCL), then
// fills the row: the value or a source column per output column, the source row copied in between.
// Global (rows of the output).
inline long pad_src(int mode, long c, long n) {  // source coordinate of c on an axis of n; -1: outside
  if (c >= 0 && c < n) return c;
  if (mode == 0) return -1;
  if (mode == 1) return c < 0 ? -c : 2 * (n - 1) - c;
  if (mode == 3) return (c % n + n) % n;
  return c < 0 ? 0 : n - 1;
}
#define DEFINE_PAD_ROWS(T, NAME)                                                                       \
  __kernel void NAME(int rank, int mode, T value, long8 odims, long8 idims, long8 begin,               \
                     __global const T* src, long s_off, __global T* dst, long d_off) {                 \
    long r = get_global_id(0);                                                                         \
    long od[8] = {odims.s0, odims.s1, odims.s2, odims.s3, odims.s4, odims.s5, odims.s6, odims.s7};     \
    long id[8] = {idims.s0, idims.s1, idims.s2, idims.s3, idims.s4, idims.s5, idims.s6, idims.s7};     \
    long bg[8] = {begin.s0, begin.s1, begin.s2, begin.s3, begin.s4, begin.s5, begin.s6, begin.s7};     \
    const int last = rank - 1;                                                                         \
    const long ow = od[last], iw = id[last], b = bg[last];                                             \
    __global T* out = dst + d_off + r * ow;                                                            \
    long src_row = 0, stride = iw;                                                                     \
    int outside = 0;                                                                                   \
    for (int i = last - 1; i >= 0; --i) {                                                              \
      const long c = pad_src(mode, r % od[i] - bg[i], id[i]);                                          \
      r /= od[i];                                                                                      \
      if (c < 0) outside = 1;                                                                          \
      src_row += c * stride;                                                                           \
      stride *= id[i];                                                                                 \
    }                                                                                                  \
    if (outside) {                                                                                     \
      for (long x = 0; x < ow; ++x) out[x] = value;                                                    \
      return;                                                                                          \
    }                                                                                                  \
    __global const T* in = src + s_off + src_row;                                                      \
    const long lo = clamp(b, 0L, ow), hi = clamp(b + iw, lo, ow);                                      \
    for (long x = 0; x < lo; ++x) {                                                                    \
      const long c = pad_src(mode, x - b, iw);                                                         \
      out[x] = c < 0 ? value : in[c];                                                                  \
    }                                                                                                  \
    for (long x = lo; x < hi; ++x) out[x] = in[x - b];                                                 \
    for (long x = hi; x < ow; ++x) {                                                                   \
      const long c = pad_src(mode, x - b, iw);                                                         \
      out[x] = c < 0 ? value : in[c];                                                                  \
    }                                                                                                  \
  }
DEFINE_PAD_ROWS(uchar, pad_rows_1)
DEFINE_PAD_ROWS(ushort, pad_rows_2)
DEFINE_PAD_ROWS(uint, pad_rows_4)
DEFINE_PAD_ROWS(ulong, pad_rows_8)

// Tile: output coordinate c reads input coordinate c % in_dim.
#define DEFINE_TILE(T, NAME)                                                                           \
  __kernel void NAME(int rank, long8 odims, long8 idims, __global const T* src, long s_off,           \
                     __global T* dst, long d_off) {                                                    \
    long o = get_global_id(0);                                                                         \
    const long out_index = o;                                                                          \
    long od[8] = {odims.s0, odims.s1, odims.s2, odims.s3, odims.s4, odims.s5, odims.s6, odims.s7};     \
    long id[8] = {idims.s0, idims.s1, idims.s2, idims.s3, idims.s4, idims.s5, idims.s6, idims.s7};     \
    long src_index = 0, stride = 1;                                                                    \
    for (int i = rank - 1; i >= 0; --i) {                                                              \
      src_index += (o % od[i]) % id[i] * stride;                                                       \
      o /= od[i];                                                                                      \
      stride *= id[i];                                                                                 \
    }                                                                                                  \
    dst[d_off + out_index] = src[s_off + src_index];                                                   \
  }
DEFINE_TILE(uchar, tile_1)
DEFINE_TILE(ushort, tile_2)
DEFINE_TILE(uint, tile_4)
DEFINE_TILE(ulong, tile_8)

// Gather along an axis: out[o, j, i] = in[o, idx[j], i]; range (inner, n_idx padded up to the group,
// outer), the group's width a divisor of inner (so the vectorised dim needs no bounds check). Indices are
// i32 or i64 (idx64); negative ones count from the end; out-of-range ones (an error in ONNX, which a
// kernel cannot raise) yield zeros rather than reading out of bounds. Rows past n_idx read the last row
// and store nothing: an early return there, before the index load that idx64 picks, cost PoCL its
// vectorisation (512 rows of 384 floats: 20 us -> 300 us).
#define DEFINE_GATHER(T, NAME)                                                                         \
  __kernel void NAME(long axis_len, long inner, long n_idx, long n_outer, int idx64, __global const T* src, \
                     long s_off, __global const uchar* idx, long i_off, __global T* dst, long d_off) { \
    const long i = get_global_id(0), j = get_global_id(1), o = get_global_id(2);                      \
    if (o >= n_outer) return;                                                                          \
    const long jr = min(j, n_idx - 1);                                                                 \
    long k = idx64 ? ((__global const long*)idx)[i_off + jr] : (long)((__global const int*)idx)[i_off + jr]; \
    if (k < 0) k += axis_len;                                                                          \
    const T v = (k >= 0 && k < axis_len) ? src[s_off + (o * axis_len + k) * inner + i] : (T)0;        \
    if (j < n_idx) dst[d_off + (o * n_idx + j) * inner + i] = v;                                       \
  }
DEFINE_GATHER(uchar, gather_1)
DEFINE_GATHER(ushort, gather_2)
DEFINE_GATHER(uint, gather_4)
DEFINE_GATHER(ulong, gather_8)

// GatherElements (ONNX): out[p] = src[p with its `axis` coordinate replaced by idx[p]]; the output has
// the indices' shape (rank <= 8). One work-item per output element. Negative indices count from the
// end; out-of-range ones yield zeros rather than reading out of bounds.
#define DEFINE_GATHER_ELEMENTS(T, NAME)                                                                \
  __kernel void NAME(int rank, int axis, long axis_len, long8 odims, long8 sstrides, int idx64,        \
                     __global const T* src, long s_off, __global const uchar* idx, long i_off,          \
                     __global T* dst, long d_off) {                                                     \
    const long p = get_global_id(0);                                                                   \
    long k = idx64 ? ((__global const long*)idx)[i_off + p] : (long)((__global const int*)idx)[i_off + p]; \
    if (k < 0) k += axis_len;                                                                          \
    long od[8] = {odims.s0, odims.s1, odims.s2, odims.s3, odims.s4, odims.s5, odims.s6, odims.s7};     \
    long st[8] = {sstrides.s0, sstrides.s1, sstrides.s2, sstrides.s3,                                  \
                  sstrides.s4, sstrides.s5, sstrides.s6, sstrides.s7};                                 \
    long rem = p, off = 0;                                                                             \
    for (int d = rank - 1; d >= 0; --d) {                                                              \
      const long c = rem % od[d];                                                                      \
      rem /= od[d];                                                                                    \
      off += (d == axis ? k : c) * st[d];                                                              \
    }                                                                                                  \
    dst[d_off + p] = (k >= 0 && k < axis_len) ? src[s_off + off] : (T)0;                              \
  }
DEFINE_GATHER_ELEMENTS(uchar, gather_elements_1)
DEFINE_GATHER_ELEMENTS(ushort, gather_elements_2)
DEFINE_GATHER_ELEMENTS(uint, gather_elements_4)
DEFINE_GATHER_ELEMENTS(ulong, gather_elements_8)

// a / b rounded to nearest. OpenCL lets a / b be 2.5 ulp off (NVIDIA's is), and nearest resizing
// rounds coordinates that land exactly on .5 or on an integer: (3 + 0.5) / 3.5 came out a hair above
// 1 there and picked the wrong input row. One fma residual step corrects the quotient.
inline float div_rn(float a, float b) {
  const float q = a / b;
  return fma(fma(-q, b, a), 1.0f / b, q);
}

// Resize of the last two dims (f32). mode 0 nearest, 1 linear, 2 cubic (coefficient cubic_a, taps
// outside the input clamped to the edge, or dropped and the weights renormalised with exclude_outside).
// coord: 0 half_pixel, 1 asymmetric, 2 align_corners, 3 pytorch_half_pixel, 4 tf_half_pixel_for_nearest,
// 5 half_pixel_symmetric, 6 tf_crop_and_resize. nearest: 0 round_prefer_floor, 1 round_prefer_ceil,
// 2 floor, 3 ceil. Per resized dim the host passes geo = (scale, len = in * scale before rounding,
// crop a, crop b): tf_crop_and_resize maps x to a * x + b, and outputs outside valid (lo, hi per dim,
// worked out by the host in double) get extrapolation. antialias (linear / cubic): a downscaled dim
// (scale < 1) stretches the filter by 1 / scale, so every input under the output pixel contributes.
// Range (OW, OH, planes).
inline float resize_coord(int coord, float x, float4 geo, int in, int out) {
  const float scale = geo.s0, len = geo.s1;
  switch (coord) {
    case 6: return geo.s2 * x + geo.s3;
    case 5: {
      const float adj = div_rn((float)out, len);
      return (float)in * 0.5f * (1.0f - adj) + div_rn(x + 0.5f, scale) - 0.5f;
    }
    case 1: return div_rn(x, scale);
    case 2: return len == 1.0f ? 0.0f : div_rn(x * (float)(in - 1), len - 1.0f);
    case 3: return out > 1 ? div_rn(x + 0.5f, scale) - 0.5f : 0.0f;
    case 4: return div_rn(x + 0.5f, scale);
    default: return div_rn(x + 0.5f, scale) - 0.5f;
  }
}

inline int resize_nearest(int mode, float x, int in) {
  int i;
  switch (mode) {
    case 1: i = (int)floor(x + 0.5f); break;
    case 2: i = (int)floor(x); break;
    case 3: i = (int)ceil(x); break;
    default: i = (int)ceil(x - 0.5f); break;
  }
  return clamp(i, 0, in - 1);
}

inline float cubic_w(float t, float a) {
  t = fabs(t);
  if (t <= 1.0f) return ((a + 2.0f) * t - (a + 3.0f)) * t * t + 1.0f;
  if (t < 2.0f) return ((a * t - 5.0f * a) * t + 8.0f * a) * t - 4.0f * a;
  return 0.0f;
}

// Cubic weights of the 4 taps around f along a dim of length n; first tap index in *i0.
inline float4 cubic_taps(float f, int n, float a, int exclude, int* i0) {
  const float fl = floor(f), t = f - fl;
  *i0 = (int)fl - 1;
  float4 w = (float4)(cubic_w(1.0f + t, a), cubic_w(t, a), cubic_w(1.0f - t, a), cubic_w(2.0f - t, a));
  if (exclude) {
    const int b = *i0;
    w.s0 = (b >= 0 && b < n) ? w.s0 : 0.0f;
    w.s1 = (b + 1 >= 0 && b + 1 < n) ? w.s1 : 0.0f;
    w.s2 = (b + 2 >= 0 && b + 2 < n) ? w.s2 : 0.0f;
    w.s3 = (b + 3 >= 0 && b + 3 < n) ? w.s3 : 0.0f;
    w /= (w.s0 + w.s1 + w.s2 + w.s3);
  }
  return w;
}

// Antialias filter taps along one dim: the filter (support 1 linear, 2 cubic) stretched by 1 / s
// (s = min(scale, 1)) covers n = 2 * ceil(support / s) inputs from *i0; weights f((i - f) * s),
// normalised to sum 1 (after dropping outside taps with exclude_outside). Returns n.
inline float aa_weight(int mode, float t, float a) { return mode == 1 ? fmax(0.0f, 1.0f - fabs(t)) : cubic_w(t, a); }
inline int aa_taps(int mode, float f, float s, int* i0) {
  const int start = (int)floor(div_rn(-(mode == 1 ? 1.0f : 2.0f), s)) + 1;
  *i0 = (int)floor(f) + start;
  return 2 - 2 * start;
}
inline float aa_sum(int mode, float f, float s, int i0, int n, int len, float a, int exclude) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i)
    if (!exclude || (i0 + i >= 0 && i0 + i < len)) sum += aa_weight(mode, ((float)(i0 + i) - f) * s, a);
  return sum;
}

__kernel void resize2d(int mode, int coord, int nearest, int H, int W, int OH, int OW, float4 geo_h, float4 geo_w,
                       int4 valid, float extrapolation, int antialias, float cubic_a, int exclude_outside,
                       __global const float* x, long x_off, __global float* y, long y_off) {
  const int ow = get_global_id(0), oh = get_global_id(1);
  const long p = get_global_id(2);
  x += x_off + p * H * W;
  const float fy = resize_coord(coord, (float)oh, geo_h, H, OH);
  const float fx = resize_coord(coord, (float)ow, geo_w, W, OW);
  float v;
  if (coord == 6 && (oh < valid.s0 || oh > valid.s1 || ow < valid.s2 || ow > valid.s3)) {
    v = extrapolation;
  } else if (mode == 0) {
    v = x[resize_nearest(nearest, fy, H) * W + resize_nearest(nearest, fx, W)];
  } else if (antialias) {
    const float sy = fmin(geo_h.s0, 1.0f), sx = fmin(geo_w.s0, 1.0f);
    int y0, x0;
    const int ny = aa_taps(mode, fy, sy, &y0), nx = aa_taps(mode, fx, sx, &x0);
    const float norm = aa_sum(mode, fy, sy, y0, ny, H, cubic_a, exclude_outside) *
                       aa_sum(mode, fx, sx, x0, nx, W, cubic_a, exclude_outside);
    v = 0.0f;
    for (int i = 0; i < ny; ++i) {
      const int yy = y0 + i;
      if (exclude_outside && (yy < 0 || yy >= H)) continue;
      const float wy = aa_weight(mode, ((float)yy - fy) * sy, cubic_a);
      if (wy == 0.0f) continue;
      const int row0 = clamp(yy, 0, H - 1) * W;
      float row = 0.0f;
      for (int j = 0; j < nx; ++j) {
        const int xx = x0 + j;
        if (exclude_outside && (xx < 0 || xx >= W)) continue;
        row += aa_weight(mode, ((float)xx - fx) * sx, cubic_a) * x[row0 + clamp(xx, 0, W - 1)];
      }
      v += wy * row;
    }
    v /= norm;
  } else if (mode == 2) {
    int y0, x0;
    const float4 wy = cubic_taps(fy, H, cubic_a, exclude_outside, &y0);
    const float4 wx = cubic_taps(fx, W, cubic_a, exclude_outside, &x0);
    const float wya[4] = {wy.s0, wy.s1, wy.s2, wy.s3}, wxa[4] = {wx.s0, wx.s1, wx.s2, wx.s3};
    v = 0.0f;
    for (int i = 0; i < 4; ++i) {
      const int yy = clamp(y0 + i, 0, H - 1);
      float row = 0.0f;
      for (int j = 0; j < 4; ++j) row += wxa[j] * x[yy * W + clamp(x0 + j, 0, W - 1)];
      v += wya[i] * row;
    }
  } else {
    const float cy = clamp(fy, 0.0f, (float)(H - 1)), cx = clamp(fx, 0.0f, (float)(W - 1));
    const int y0 = (int)floor(cy), x0 = (int)floor(cx);
    const int y1 = min(y0 + 1, H - 1), x1 = min(x0 + 1, W - 1);
    const float ly = cy - (float)y0, lx = cx - (float)x0;
    const float top = x[y0 * W + x0] * (1.0f - lx) + x[y0 * W + x1] * lx;
    const float bot = x[y1 * W + x0] * (1.0f - lx) + x[y1 * W + x1] * lx;
    v = top * (1.0f - ly) + bot * ly;
  }
  y[y_off + (p * OH + oh) * OW + ow] = v;
}

// Nearest and linear Resize through per-axis tables (CPUs; layers/data.cpp picks and logs it): every
// output row and column needs the same source coordinate for every plane, but resize2d works it out
// per output pixel (several divisions each). resize_axis_table writes, for the OH rows then the OW
// columns, the first and second source index and the weight of the second (nearest: the index twice,
// weight 0), with resize2d's own functions, so the results are the same. The three tables of n = OH + OW
// entries lie one after the other from t_off (elements) in one buffer: i0, i1, w1. Range (n).
__kernel void resize_axis_table(int linear, int coord, int nearest, int H, int W, int OH, int OW, float4 geo_h,
                                float4 geo_w, __global int* ti, __global float* tf, long t_off) {
  const int t = get_global_id(0), n = OH + OW;
  __global int* i0 = ti + t_off;
  __global int* i1 = i0 + n;
  __global float* w1 = tf + t_off + 2 * n;
  const int is_h = t < OH, o = is_h ? t : t - OH, in = is_h ? H : W;
  const float f = resize_coord(coord, (float)o, is_h ? geo_h : geo_w, in, is_h ? OH : OW);
  if (linear) {
    const float c = clamp(f, 0.0f, (float)(in - 1));
    const int a = (int)floor(c);
    i0[t] = a;
    i1[t] = min(a + 1, in - 1);
    w1[t] = c - (float)a;
  } else {
    i0[t] = i1[t] = resize_nearest(nearest, f, in);
    w1[t] = 0.0f;
  }
}

// 8 outputs along OW per work-item from the tables (rows first, then columns at offset OH); linear
// interpolates as resize2d does. Range (ceil(OW / 8), OH, planes), padded to the work-group size.
__kernel void resize2d_table(int linear, int H, int W, int OH, int OW, __global const int* ti,
                             __global const float* tf, long t_off, __global const float* x, long x_off,
                             __global float* y, long y_off) {
  const int ow0 = get_global_id(0) * 8, oh = get_global_id(1);
  const long p = get_global_id(2);
  if (ow0 >= OW || oh >= OH) return;
  __global const int* i0 = ti + t_off;
  __global const int* i1 = i0 + OH + OW;
  __global const float* w1 = tf + t_off + 2 * (OH + OW);
  x += x_off + p * H * W;
  y += y_off + (p * OH + oh) * OW + ow0;
  __global const float* r0 = x + (long)i0[oh] * W;
  __global const float* r1 = x + (long)i1[oh] * W;
  const float ly = w1[oh];
  const int n = min(8, OW - ow0);
  if (!linear) {
    for (int j = 0; j < n; ++j) y[j] = r0[i0[OH + ow0 + j]];
    return;
  }
  for (int j = 0; j < n; ++j) {
    const int c = OH + ow0 + j, x0 = i0[c], x1 = i1[c];
    const float lx = w1[c];
    const float top = r0[x0] * (1.0f - lx) + r0[x1] * lx;
    const float bot = r1[x0] * (1.0f - lx) + r1[x1] * lx;
    y[j] = top * (1.0f - ly) + bot * ly;
  }
}

// Range made on the device (outputs too large to fold on the host): y[i] = start + i * delta. f32 splits i
// into 4096 * hi + lo so both products are exact in float (i is exact only below 2^24), within 1.5 ulp of
// the double-computed value.
__kernel void range_f32(float start, float delta, __global float* y, long off) {
  const long i = get_global_id(0);
  y[off + i] = start + (float)(i >> 12) * (delta * 4096.0f) + (float)(i & 4095) * delta;
}
__kernel void range_i32(int start, int delta, __global int* y, long off) {
  const long i = get_global_id(0);
  y[off + i] = start + (int)i * delta;
}
__kernel void range_i64(long start, long delta, __global long* y, long off) {
  const long i = get_global_id(0);
  y[off + i] = start + i * delta;
}
