// Quantization: QuantizeLinear / DequantizeLinear (per tensor, per axis and blocked scales), and the
// integer products MatMulInteger / ConvInteger with the requantising QLinearMatMul / QLinearConv.
// Element types are runtime DT_* codes (common.cl), so one build serves every type; the float8 / float4
// codecs are common.cl's, shared with Cast. Integer products accumulate in 32-bit integers (wrapping,
// as ONNX's int32 does), never in float, so any K is exact. Macro (set by layers/quant.cpp):
//   QTILE  side of the square output tile of matmul_integer (work-group QTILE x QTILE), default 16

#ifndef QTILE
#define QTILE 16
#endif

// ---------------------------------------------------------------- element access
inline int q_is_minifloat(int t) { return (t >= DT_F8E4M3FN && t <= DT_F8E5M2FNUZ) || t == DT_F4E2M1; }

// Integer storage types (one per byte for the 4- and 2-bit ones, signed ones sign-extended).
inline int q_load_int(__global const uchar* p, long i, int t) {
  switch (t) {
    case DT_I8: case DT_I4: case DT_I2: return ((__global const char*)p)[i];
    case DT_I16: return ((__global const short*)p)[i];
    case DT_U16: return ((__global const ushort*)p)[i];
    case DT_I32: return ((__global const int*)p)[i];
    default: return p[i];  // u8, u4, u2
  }
}

// f32, f16, bf16 and the narrow floats, as float (exact).
inline float q_load_float(__global const uchar* p, long i, int t) {
  switch (t) {
    case DT_F32: return ((__global const float*)p)[i];
    case DT_F16: return vload_half(i, (__global const half*)p);
    case DT_BF16: return as_float((uint)((__global const ushort*)p)[i] << 16);
    default: return cast_decode_minifloat(p[i], cast_format(t));
  }
}

// v rounded to nearest even in t when t is f16 or bf16 (numpy computes f16 arithmetic that way), else v.
// f16 without cl_khr_fp16 (no half variables): the f32 significand is shifted right by the bits f16 drops
// (more below f16's normal range), rounded to nearest even, and scaled back.
inline float q_round_to(float v, int t) {
  if (t == DT_BF16) return as_float((uint)cast_encode_bf16(v) << 16);
  if (t != DT_F16) return v;
  const uint b = as_uint(v), a = b & 0x7fffffffu;
  if (a >= 0x7f800000u || a == 0) return v;
  const int e = (int)(a >> 23) - 127;
  if (e > 15) return copysign(INFINITY, v);
  const int shift = 13 + max(0, -14 - e);  // f32 significand bits below f16's last one
  if (shift > 24 || (a >> 23) == 0) return copysign(0.0f, v);  // below half the smallest f16 subnormal
  const uint m = (a & 0x7fffffu) | 0x800000u, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
  uint q = m >> shift;
  if (rem > mid || (rem == mid && (q & 1))) ++q;
  const float r = ldexp((float)q, e - 23 + shift);
  return copysign(r >= 65520.0f ? INFINITY : r, v);
}

inline void q_store_float(__global uchar* p, long i, int t, float v) {
  switch (t) {
    case DT_F16: vstore_half_rte(v, i, (__global half*)p); break;
    case DT_BF16: ((__global ushort*)p)[i] = cast_encode_bf16(v); break;
    default: ((__global float*)p)[i] = v; break;
  }
}

inline void q_store_int(__global uchar* p, long i, int t, int v) {
  switch (t) {
    case DT_I16: case DT_U16: ((__global short*)p)[i] = (short)v; break;
    case DT_I32: ((__global int*)p)[i] = v; break;
    default: p[i] = (uchar)v; break;  // 8-bit and narrower: the low byte (int4 / int2 stay sign-extended)
  }
}

// Saturation range of an integer quantized type.
inline int2 q_range(int t) {
  switch (t) {
    case DT_I8: return (int2)(-128, 127);
    case DT_I16: return (int2)(-32768, 32767);
    case DT_U16: return (int2)(0, 65535);
    case DT_I4: return (int2)(-8, 7);
    case DT_U4: return (int2)(0, 15);
    case DT_I2: return (int2)(-2, 1);
    case DT_U2: return (int2)(0, 3);
    default: return (int2)(0, 255);  // u8
  }
}

// a / b rounded to nearest even. OpenCL lets a device's division be 2.5 ulp off; rounding ties (x / scale
// landing on k + 0.5) need the correctly rounded quotient, so the nearest of the neighbours is kept:
// the one with the smallest exact residual a - c * b (fma).
inline float q_div_rn(float a, float b) {
  const float q = a / b;
  if (!isfinite(q) || q == 0.0f) return q;
  float best = q, rb = fabs(fma(-q, b, a));
  float up = q, down = q;
  for (int i = 0; i < 3; ++i) {
    up = nextafter(up, INFINITY);
    down = nextafter(down, -INFINITY);
    const float ru = fabs(fma(-up, b, a)), rd = fabs(fma(-down, b, a));
    if (ru < rb) {
      rb = ru;
      best = up;
    }
    if (rd < rb) {
      rb = rd;
      best = down;
    }
  }
  return best;
}

// Index of the scale / zero point of element i: o * so + (a / block) * sa + r * si, where i = (o, a, r)
// over [outer, axis_len, inner]. Per tensor: all strides 0; per axis: sa = 1, block = 1; blocked: the
// scale has x's shape with ceil(axis_len / block) along the axis.
inline long q_param(long i, long inner, long axis_len, long block, long so, long sa, long si) {
  const long r = i % inner, t = i / inner;
  return (t / axis_len) * so + ((t % axis_len) / block) * sa + r * si;
}

// ---------------------------------------------------------------- QuantizeLinear / DequantizeLinear
// y = saturate(round_half_even(x / scale) + zero_point) for integer targets (NaN gives the lowest value);
// float8 / float4 targets: cast(x / scale + zero_point) with `saturate` (float4 always saturates).
// The quotient is rounded to x's type when x and scale are both f16 or both bf16.
__kernel void quantize_linear(int x_dt, int s_dt, int y_dt, int has_zp, int saturate, long n, long inner,
                              long axis_len, long block, long so, long sa, long si, __global const uchar* x,
                              long x_off, __global const uchar* s, long s_off, __global const uchar* zp,
                              long z_off, __global uchar* y, long y_off) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long p = q_param(i, inner, axis_len, block, so, sa, si);
  float q = q_div_rn(q_load_float(x, x_off + i, x_dt), q_load_float(s, s_off + p, s_dt));
  if (x_dt == s_dt) q = q_round_to(q, x_dt);
  if (q_is_minifloat(y_dt)) {
    // ONNX requires a zero float8 zero point (its reference ignores it) and adds float4's: adding a zero
    // only when there is one to add keeps -0 for float8.
    if (has_zp) {
      const float z = q_load_float(zp, z_off + p, y_dt);
      if (z != 0.0f || y_dt == DT_F4E2M1) q += z;
    }
    y[y_off + i] = cast_encode_minifloat(q, cast_format(y_dt), saturate);
    return;
  }
  const int2 range = q_range(y_dt);
  float v = rint(q) + (has_zp ? (float)q_load_int(zp, z_off + p, y_dt) : 0.0f);
  v = isnan(v) ? (float)range.x : clamp(v, (float)range.x, (float)range.y);
  q_store_int(y, y_off + i, y_dt, (int)v);
}

// y = (x - zero_point) * scale, in f32 and stored in y_dt (f32, f16 or bf16). Integer x: the difference
// is taken in integers (exact), then converted.
__kernel void dequantize_linear(int x_dt, int s_dt, int y_dt, int has_zp, long n, long inner, long axis_len,
                                long block, long so, long sa, long si, __global const uchar* x, long x_off,
                                __global const uchar* s, long s_off, __global const uchar* zp, long z_off,
                                __global uchar* y, long y_off) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long p = q_param(i, inner, axis_len, block, so, sa, si);
  float d;
  if (q_is_minifloat(x_dt)) {
    d = q_load_float(x, x_off + i, x_dt) - (has_zp ? q_load_float(zp, z_off + p, x_dt) : 0.0f);
  } else {
    const long xi = q_load_int(x, x_off + i, x_dt), zi = has_zp ? q_load_int(zp, z_off + p, x_dt) : 0;
    d = (float)(xi - zi);
  }
  q_store_float(y, y_off + i, y_dt, d * q_load_float(s, s_off + p, s_dt));
}

// ---------------------------------------------------------------- requantisation
// The ONNX reference's multiplier: a_scale * b_scale / y_scale evaluated in the scales' type (f16 / bf16
// round after each step).
inline float q_multiplier(float as, float bs, float ys, int s_dt) {
  return q_round_to(q_div_rn(q_round_to(as * bs, s_dt), ys), s_dt);
}

// saturate(round_half_even(acc * m) + zp) into [lo, hi], exactly: m = mant * 2^e is split into its
// integer mantissa, so acc * mant is a 64-bit integer product and the rounding is a shift.
inline int q_requant(int acc, float m, int zp, int2 range) {
  const uint bits = as_uint(m);
  int e = (int)((bits >> 23) & 0xff);
  if (e == 0xff) {  // inf / NaN multiplier: saturate by the sign of the product (NaN gives the zero point)
    const int sgn = (bits & 0x7fffffu) || acc == 0 ? 0 : ((acc > 0) != (m < 0) ? 1 : -1);
    return sgn > 0 ? range.y : sgn < 0 ? range.x : clamp(zp, range.x, range.y);
  }
  long mant = bits & 0x7fffff;
  if (e) mant |= 0x800000;
  else e = 1;
  const int sh = e - 127 - 23;  // |m| = mant * 2^sh
  long p = (long)acc * mant;
  if (bits >> 31) p = -p;
  long r;
  if (sh >= 0) {
    const long cap = 1L << 40;  // anything beyond saturates
    r = clamp(p, -cap, cap) << min(sh, 20);
  } else if (-sh > 62) {
    r = 0;  // |p| < 2^55: rounds to 0
  } else {
    const int s = -sh;
    r = p >> s;  // floor
    const long rem = p - (r << s), mid = 1L << (s - 1);
    if (rem > mid || (rem == mid && (r & 1))) ++r;
  }
  r += zp;
  return (int)clamp(r, (long)range.x, (long)range.y);
}

// ---------------------------------------------------------------- MatMulInteger / QLinearMatMul
// C[b] = (A[b] - a_zp) x (B[b] - b_zp), A [M, K] and B [K, N] of u8 / i8 (a_dt / b_dt), int32 accumulation.
// a_zp: none (a_zp_mode 0), one value (1) or one per row of A (2); b_zp likewise per column of B.
// boff: per batch, the element offsets of A and B (numpy batch broadcasting resolved by the host).
// requant 0: C is written as i32. requant 1 (QLinearMatMul): y = saturate(round(C * a_scale * b_scale /
// y_scale) + y_zp) in y_dt (u8 / i8); scales of type s_dt, a_scale per tensor / per row (as_mode 1 / 2),
// b_scale per tensor / per column; y_scale and y_zp per tensor (y_zp absent: has_yzp 0).
// Range (ceil(N / QTILE) * QTILE, ceil(M / QTILE) * QTILE, batches), work-group (QTILE, QTILE).
__kernel __attribute__((reqd_work_group_size(QTILE, QTILE, 1))) void matmul_integer(
    int a_dt, int b_dt, int M, int N, int K, __global const long* boff, long boff_off, __global const uchar* A, long a_off,
    __global const uchar* B, long b_off, int a_zp_mode, __global const uchar* azp, long azp_off, int b_zp_mode,
    __global const uchar* bzp, long bzp_off, int requant, int s_dt, int y_dt, int as_mode, __global const uchar* as,
    long as_off, int bs_mode, __global const uchar* bs, long bs_off, __global const uchar* ys, long ys_off,
    int has_yzp, __global const uchar* yzp, long yzp_off, __global uchar* C, long c_off) {
  __local int At[QTILE][QTILE + 1], Bt[QTILE][QTILE + 1];
  const int lx = get_local_id(0), ly = get_local_id(1);
  const int n = get_global_id(0), m = get_global_id(1);
  const long b = get_global_id(2);
  const long ab = a_off + boff[boff_off + 2 * b], bb = b_off + boff[boff_off + 2 * b + 1];
  const int am = get_group_id(1) * QTILE + lx;  // the A row this item loads (transposed load)
  const int za = a_zp_mode == 0 ? 0 : q_load_int(azp, azp_off + (a_zp_mode == 2 ? min(am, M - 1) : 0), a_dt);
  const int zb = b_zp_mode == 0 ? 0 : q_load_int(bzp, bzp_off + (b_zp_mode == 2 ? min(n, N - 1) : 0), b_dt);
  uint acc = 0;  // wraps like int32
  for (int k0 = 0; k0 < K; k0 += QTILE) {
    // At[k][row], Bt[k][col]: item (lx, ly) loads A[am, k0 + ly] and B[k0 + ly, n].
    const int k = k0 + ly;
    At[ly][lx] = am < M && k < K ? q_load_int(A, ab + (long)am * K + k, a_dt) - za : 0;
    Bt[ly][lx] = n < N && k < K ? q_load_int(B, bb + (long)k * N + n, b_dt) - zb : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int kn = min(QTILE, K - k0);
    for (int j = 0; j < kn; ++j) acc += (uint)(At[j][ly] * Bt[j][lx]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (m >= M || n >= N) return;
  const long o = c_off + (b * M + m) * (long)N + n;
  if (!requant) {
    ((__global int*)C)[o] = (int)acc;
    return;
  }
  const float mul = q_multiplier(q_load_float(as, as_off + (as_mode == 2 ? m : 0), s_dt),
                                 q_load_float(bs, bs_off + (bs_mode == 2 ? n : 0), s_dt),
                                 q_load_float(ys, ys_off, s_dt), s_dt);
  const int z = has_yzp ? q_load_int(yzp, yzp_off, y_dt) : 0;
  q_store_int(C, o, y_dt, q_requant((int)acc, mul, z, q_range(y_dt)));
}

// ---------------------------------------------------------------- ConvInteger / QLinearConv
// Direct convolution over up to 3 spatial dims (1-D / 2-D have D = 1, H = 1 for 1-D), int32 accumulation.
// X [N, C, D, H, W] and W [M, C / group, kd, kh, kw] of u8 / i8; x_zp per tensor; w_zp none / per tensor
// / per output channel (w_zp_mode 0 / 1 / 2). Padded taps contribute 0 (x_zp - x_zp). One work-item per
// output element; range (OW, OH, OD * N * M).
// sz = (C, D, H, W, M, OD, OH, OW); win = (kd, kh, kw, sd, sh, sw, dd, dh); win2 = (dw, pf, pt, pl, group).
// requant 0: Y is i32 (ConvInteger). requant 1 (QLinearConv): acc + bias (i32 per channel, has_bias),
// then saturate(round(acc * x_scale * w_scale / y_scale) + y_zp) in y_dt; w_scale per tensor / channel.
__kernel void conv_integer(int x_dt, int w_dt, int8 sz, int8 win, int8 win2, __global const uchar* X, long x_off,
                           __global const uchar* Wt, long w_off, int has_xzp, __global const uchar* xzp, long xzp_off,
                           int w_zp_mode, __global const uchar* wzp, long wzp_off, int has_bias,
                           __global const int* bias, long bias_off, int requant, int s_dt, int y_dt,
                           __global const uchar* xs, long xs_off, int ws_mode, __global const uchar* ws, long ws_off,
                           __global const uchar* ys, long ys_off, int has_yzp, __global const uchar* yzp,
                           long yzp_off, __global uchar* Y, long y_off) {
  const int C = sz.s0, D = sz.s1, H = sz.s2, W = sz.s3, M = sz.s4, OD = sz.s5, OH = sz.s6, OW = sz.s7;
  const int kd = win.s0, kh = win.s1, kw = win.s2, sd = win.s3, sh = win.s4, sw = win.s5, dd = win.s6, dh = win.s7;
  const int dw = win2.s0, pf = win2.s1, pt = win2.s2, pl = win2.s3, group = win2.s4;
  const int ow = get_global_id(0), oh = get_global_id(1);
  const long z = get_global_id(2);
  if (ow >= OW || oh >= OH) return;
  const int od = (int)(z % OD);
  const long nm = z / OD;
  const int m = (int)(nm % M);
  const long nb = nm / M;
  const int cpg = C / group, c0 = (m / (M / group)) * cpg;
  const int zx = has_xzp ? q_load_int(xzp, xzp_off, x_dt) : 0;
  const int zw = w_zp_mode == 0 ? 0 : q_load_int(wzp, wzp_off + (w_zp_mode == 2 ? m : 0), w_dt);
  const int d0 = od * sd - pf, h0 = oh * sh - pt, w0 = ow * sw - pl;
  const long plane = (long)D * H * W;
  uint acc = 0;
  for (int c = 0; c < cpg; ++c) {
    const long xb = x_off + (nb * C + c0 + c) * plane;
    const long wb = w_off + (((long)m * cpg + c) * kd) * kh * kw;
    for (int a = 0; a < kd; ++a) {
      const int d = d0 + a * dd;
      if (d < 0 || d >= D) continue;
      for (int i = 0; i < kh; ++i) {
        const int h = h0 + i * dh;
        if (h < 0 || h >= H) continue;
        for (int j = 0; j < kw; ++j) {
          const int w = w0 + j * dw;
          if (w < 0 || w >= W) continue;
          const int xv = q_load_int(X, xb + ((long)d * H + h) * W + w, x_dt) - zx;
          const int wv = q_load_int(Wt, wb + ((long)a * kh + i) * kw + j, w_dt) - zw;
          acc += (uint)(xv * wv);
        }
      }
    }
  }
  const long o = y_off + ((nm * OD + od) * OH + oh) * (long)OW + ow;
  if (!requant) {
    ((__global int*)Y)[o] = (int)acc;
    return;
  }
  if (has_bias) acc += (uint)bias[bias_off + m];
  const float mul = q_multiplier(q_load_float(xs, xs_off, s_dt), q_load_float(ws, ws_off + (ws_mode == 2 ? m : 0), s_dt),
                                 q_load_float(ys, ys_off, s_dt), s_dt);
  const int zy = has_yzp ? q_load_int(yzp, yzp_off, y_dt) : 0;
  q_store_int(Y, o, y_dt, q_requant((int)acc, mul, zy, q_range(y_dt)));
}

// ---------------------------------------------------------------- DynamicQuantizeLinear
// u8 quantization with the range of the data (ONNX DynamicQuantizeLinear): scale = (max(0, max x) -
// min(0, min x)) / 255, zero point = saturate(round(0 - min / scale)), y = saturate(round(x / scale) + zp),
// rounding half to even, quotients correctly rounded (q_div_rn). dynamic_quant_partial: each work-item
// finds the range of one contiguous chunk (and 0), written as two values; one work-group then reduces
// those (dynamic_quant_range: each work-item a strided part, then a tree in local memory; NaN ignored as
// fmin / fmax do) and writes scale and zero point; dynamic_quant_apply reads them. All-zero data has
// scale 0: zero point and y are 0 then (ONNX's formula divides by zero).
__kernel void dynamic_quant_partial(long n, long chunk, __global const float* x, long x_off, __global float* w,
                                    long w_off) {
  const long p = get_global_id(0), end = min(n, (p + 1) * chunk);
  float a = 0.0f, b = 0.0f;
  for (long i = p * chunk; i < end; ++i) {
    const float v = x[x_off + i];
    a = fmin(a, v);
    b = fmax(b, v);
  }
  w[w_off + 2 * p] = a;
  w[w_off + 2 * p + 1] = b;
}

__kernel void dynamic_quant_range(long n, __global const float* x, long x_off, __global float* scale, long s_off,
                                  __global uchar* zp, long z_off, __local float* lo, __local float* hi) {
  const int l = get_local_id(0), g = get_local_size(0);
  float a = 0.0f, b = 0.0f;  // the range always includes 0
  for (long i = l; i < n; i += g) {
    const float v = x[x_off + i];
    a = fmin(a, v);
    b = fmax(b, v);
  }
  lo[l] = a;
  hi[l] = b;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = g / 2; s > 0; s >>= 1) {
    if (l < s) {
      lo[l] = fmin(lo[l], lo[l + s]);
      hi[l] = fmax(hi[l], hi[l + s]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0) {
    const float sc = q_div_rn(hi[0] - lo[0], 255.0f);
    scale[s_off] = sc;
    zp[z_off] = sc == 0.0f ? 0 : (uchar)clamp(rint(0.0f - q_div_rn(lo[0], sc)), 0.0f, 255.0f);
  }
}

__kernel void dynamic_quant_apply(long n, __global const float* x, long x_off, __global const float* scale, long s_off,
                                  __global const uchar* zp, long z_off, __global uchar* y, long y_off) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const float sc = scale[s_off], v = x[x_off + i];
  if (sc == 0.0f || isnan(v)) {
    y[y_off + i] = sc == 0.0f ? zp[z_off] : 0;
    return;
  }
  y[y_off + i] = (uchar)clamp(rint(q_div_rn(v, sc)) + (float)zp[z_off], 0.0f, 255.0f);
}
