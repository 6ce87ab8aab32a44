// Helpers shared by every kernel file (prepended by the program cache before each file).
// Activation selected at build time with -DACT=<n>; numbering matches layers/activation.hpp.

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_LEAKY_RELU 2
#define ACT_SIGMOID 3
#define ACT_TANH 4
#define ACT_ELU 5
#define ACT_SELU 6
#define ACT_GELU 7
#define ACT_GELU_TANH 8
#define ACT_SILU 9
#define ACT_HARD_SIGMOID 10
#define ACT_HARD_SWISH 11
#define ACT_SOFTPLUS 12
#define ACT_MISH 13
#define ACT_CLIP 14
#define ACT_SOFTSIGN 15
#define ACT_AFFINE 16
#define ACT_SCALED_TANH 17
#define ACT_THRESHOLDED_RELU 18
#define ACT_CELU 19

#ifndef ACT
#define ACT ACT_NONE
#endif

// erf in f32 as a rational function of x (odd numerator of degree 13, even denominator of degree 8) on
// [-4, 4], where f32's erf reaches +-1: at most 4.2e-7 from the exact value (about 4 ulp near 1, 2e-7
// relative near 0). It vectorises; the built-in erf of PoCL 3.1 does not (about 30x slower: GELU ran at
// 0.4 GB/s). NaN stays NaN.
inline float cldl_erf(float x0) {
  const float x = clamp(x0, -4.0f, 4.0f), x2 = x * x;
  float p = fma(x2, -2.72614225801306e-10f, 2.77068142495902e-08f);
  p = fma(x2, p, -2.10102402082508e-06f);
  p = fma(x2, p, -5.69250639462346e-05f);
  p = fma(x2, p, -7.34990630326855e-04f);
  p = fma(x2, p, -2.95459980854025e-03f);
  p = fma(x2, p, -1.60960333262415e-02f);
  float q = fma(x2, -1.45660718464996e-05f, -2.13374055278905e-04f);
  q = fma(x2, q, -1.68282697438203e-03f);
  q = fma(x2, q, -7.37332916720468e-03f);
  q = fma(x2, q, -1.42647390514189e-02f);
  return isnan(x0) ? x0 : x * p / q;
}

inline float cldl_softplus(float x) { return x > 20.0f ? x : log1p(exp(x)); }

// Any activation by number; with a constant `kind` the compiler keeps one branch.
inline float cldl_act(int kind, float x, float a, float b) {
  switch (kind) {
    case ACT_RELU: return fmax(x, 0.0f);
    case ACT_LEAKY_RELU: return x >= 0.0f ? x : a * x;
    case ACT_SIGMOID: return 1.0f / (1.0f + exp(-x));
    case ACT_TANH: return tanh(x);
    case ACT_ELU: return x >= 0.0f ? x : a * (exp(x) - 1.0f);
    case ACT_SELU: return b * (x > 0.0f ? x : a * (exp(x) - 1.0f));
    case ACT_GELU: return 0.5f * x * (1.0f + cldl_erf(x * 0.70710678118654752f));
    case ACT_GELU_TANH: return 0.5f * x * (1.0f + tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case ACT_SILU: return x / (1.0f + exp(-x));
    case ACT_HARD_SIGMOID: return fmax(0.0f, fmin(1.0f, a * x + b));
    case ACT_HARD_SWISH: return x * fmax(0.0f, fmin(1.0f, x * (1.0f / 6.0f) + 0.5f));
    case ACT_SOFTPLUS: return cldl_softplus(x);
    case ACT_MISH: return x * tanh(cldl_softplus(x));
    case ACT_CLIP: return fmin(fmax(x, a), b);
    case ACT_SOFTSIGN: return x / (1.0f + fabs(x));
    case ACT_AFFINE: return a * x + b;
    case ACT_SCALED_TANH: return a * tanh(b * x);
    case ACT_THRESHOLDED_RELU: return x > a ? x : 0.0f;
    case ACT_CELU: return fmax(0.0f, x) + fmin(0.0f, a * (exp(x / a) - 1.0f));
    default: return x;
  }
}

// The build-time activation (-DACT, with runtime alpha/beta).
#define APPLY_ACT(x, a, b) cldl_act(ACT, (x), (a), (b))

// The build-time activation on a whole float vector, where its formula is the same on vectors (OpenCL's
// built-ins are overloaded): epilogues then need no loop over the elements, whose scalar exp made a
// GEMM with a fused SiLU slower than the GEMM and a separate element-wise kernel. ACT_VEC is 1 for those.
#if ACT == ACT_NONE
#define APPLY_ACT_V(v, a, b) (v)
#elif ACT == ACT_RELU
#define APPLY_ACT_V(v, a, b) fmax((v), 0.0f)
#elif ACT == ACT_SIGMOID
#define APPLY_ACT_V(v, a, b) (1.0f / (1.0f + exp(-(v))))
#elif ACT == ACT_SILU
#define APPLY_ACT_V(v, a, b) ((v) / (1.0f + exp(-(v))))
#elif ACT == ACT_TANH
#define APPLY_ACT_V(v, a, b) tanh(v)
#elif ACT == ACT_HARD_SIGMOID
#define APPLY_ACT_V(v, a, b) fmax(0.0f, fmin(1.0f, (a) * (v) + (b)))
#elif ACT == ACT_HARD_SWISH  // times 1/6 as ONNX defines it: a division by 6 stays a division (no fast math)
#define APPLY_ACT_V(v, a, b) ((v) * fmax(0.0f, fmin(1.0f, (v) * (1.0f / 6.0f) + 0.5f)))
#elif ACT == ACT_CLIP
#define APPLY_ACT_V(v, a, b) fmin(fmax((v), (a)), (b))
#endif
#ifdef APPLY_ACT_V
#define ACT_VEC 1
#else
#define ACT_VEC 0
#endif

// Non-temporal (streaming) stores, for outputs far larger than the caches that are read back much later:
// a plain store first reads each line for ownership and later writes it back, a streaming store only writes.
// Only where the kernel compiler targets x86-64 itself (PoCL); elsewhere (GPUs, SPIR-based compilers) a
// plain store. CLDL_NT_STORE(v, p) needs p aligned to v's size (callers check, else store plainly), and a
// work-item ends with CLDL_NT_FENCE() after its streaming stores: they are weakly ordered, and must be
// globally visible before the kernel's completion is.
#if defined(__x86_64__) && defined(__has_builtin)
#if __has_builtin(__builtin_nontemporal_store) && __has_builtin(__builtin_ia32_sfence)
#define CLDL_NT_STORES 1
#endif
#endif
#ifdef CLDL_NT_STORES
#define CLDL_NT_STORE(v, p) __builtin_nontemporal_store((v), (p))
#define CLDL_NT_FENCE() __builtin_ia32_sfence()
#else
#define CLDL_NT_STORE(v, p) (*(p) = (v))
#define CLDL_NT_FENCE()
#endif

// Offset of the flattened coordinate `o` over dims[0..n) (innermost last) under strides `s`; the
// index walk shared by the strided element-wise, data-movement and reduction kernels.
inline long nd_offset(long o, int n, long8 dims, long8 s) {
  long d[8] = {dims.s0, dims.s1, dims.s2, dims.s3, dims.s4, dims.s5, dims.s6, dims.s7};
  long st[8] = {s.s0, s.s1, s.s2, s.s3, s.s4, s.s5, s.s6, s.s7};
  long off = 0;
  for (int i = n - 1; i > 0; --i) {
    off += (o % d[i]) * st[i];
    o /= d[i];
  }
  // o < d[0] by construction, so the outermost dim needs no division (none at all for n <= 1).
  return n > 0 ? off + o * st[0] : off;
}

// ---------------------------------------------------------------- storage types
// Runtime type codes (the order of DType in runtime/tensor.hpp) and the narrow float codecs, shared by
// Cast (elementwise.cl cast_any) and the quantization kernels (quant.cl). They mirror
// runtime/minifloat.cpp line for line. Narrow integer types (int4 / int2 ...) are stored one per byte.
#define DT_F32 0
#define DT_F16 1
#define DT_I32 2
#define DT_I64 3
#define DT_U8 4
#define DT_BOOL 5
#define DT_I8 6
#define DT_I16 7
#define DT_U16 8
#define DT_U32 9
#define DT_U64 10
#define DT_F64 11
#define DT_BF16 12
#define DT_F8E4M3FN 13
#define DT_F8E4M3FNUZ 14
#define DT_F8E5M2 15
#define DT_F8E5M2FNUZ 16
#define DT_F8E8M0 17
#define DT_I4 18
#define DT_U4 19
#define DT_F4E2M1 20
#define DT_I2 21
#define DT_U2 22

// How a narrow float format spells Inf and NaN.
#define MF_FN 0    // e4m3fn: no Inf, NaN = S.1111.111
#define MF_IEEE 1  // e5m2: Inf and NaN as in IEEE 754
#define MF_UZ 2    // FNUZ: no Inf, no -0, NaN = 0x80
#define MF_NONE 3  // f4e2m1: neither

// (exponent bits, mantissa bits, bias, MF_* kind) of a float8 / float4 type.
inline int4 cast_format(int t) {
  switch (t) {
    case DT_F8E4M3FN: return (int4)(4, 3, 7, MF_FN);
    case DT_F8E4M3FNUZ: return (int4)(4, 3, 8, MF_UZ);
    case DT_F8E5M2: return (int4)(5, 2, 15, MF_IEEE);
    case DT_F8E5M2FNUZ: return (int4)(5, 2, 16, MF_UZ);
    default: return (int4)(2, 1, 1, MF_NONE);  // DT_F4E2M1
  }
}

inline uchar cast_encode_minifloat(float x, int4 fm, int saturate) {
  const int eb = fm.x, mb = fm.y, bias = fm.z, kind = fm.w;
  const uint b = as_uint(x);
  const uint sign = (b >> 31) << (eb + mb), a = b & 0x7fffffffu;
  const uint ones = (1u << (eb + mb)) - 1;
  const uint maxc = kind == MF_FN ? ones - 1 : kind == MF_IEEE ? (((1u << eb) - 1) << mb) - 1 : ones;
  const uint nan_code = kind == MF_FN ? sign | ones : kind == MF_IEEE ? sign | (maxc + 3) : kind == MF_UZ ? 0x80u : 0x8u;
  const uint over = (saturate || kind == MF_NONE) ? sign | maxc : kind == MF_IEEE ? sign | (maxc + 1) : nan_code;
  if (a > 0x7f800000u) return (uchar)nan_code;
  if (a == 0x7f800000u) return (uchar)over;
  const int e = (int)(a >> 23);
  uint code = 0;
  if (e != 0) {  // f32 subnormals are far below half the smallest subnormal of every format: 0
    const uint m = (a & 0x7fffffu) | 0x800000u;
    const int et = e - 127 + bias;  // biased exponent in the target format
    const int shift = 23 - mb + (et < 1 ? 1 - et : 0);
    if (shift <= 24) {
      uint q = m >> shift;
      const uint rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (q & 1))) ++q;
      // Normal: (et - 1) << mb plus q (which holds the implicit bit), so a carry moves the exponent.
      code = et < 1 ? q : ((uint)(et - 1) << mb) + q;
    }
  }
  if (code > maxc) return (uchar)over;
  if (code == 0 && kind == MF_UZ) return 0;
  return (uchar)(sign | code);
}

inline float cast_decode_minifloat(uint c, int4 fm) {
  const int eb = fm.x, mb = fm.y, bias = fm.z, kind = fm.w;
  const uint sbit = 1u << (eb + mb), mag = c & (sbit - 1);
  const int neg = (c & sbit) != 0;
  if (kind == MF_UZ && c == 0x80) return NAN;
  if (kind == MF_FN && mag == sbit - 1) return NAN;
  const uint e = mag >> mb, m = mag & ((1u << mb) - 1);
  if (kind == MF_IEEE && e == (1u << eb) - 1) return m ? NAN : neg ? -INFINITY : INFINITY;
  // Subnormal: m * 2^(1 - bias - mb); normal: the exponent and mantissa bits moved into f32's fields.
  float v = e == 0 ? (float)m * as_float((uint)(127 + 1 - bias - mb) << 23)
                   : as_float(((uint)((int)e - bias + 127) << 23) | (m << (23 - mb)));
  return neg ? -v : v;
}

// e8m0: only the exponent; round_mode 0 up, 1 down, 2 nearest (onnx.numpy_helper.to_float8e8m0's rules).
inline uchar cast_encode_e8m0(float x, int saturate, int rounding) {
  const uint b = as_uint(x), e = (b >> 23) & 0xff;
  if (e == 0xff) return 0xff;
  int up = 0;
  if (rounding == 0) {
    up = (b & 0x7fffffu) != 0;
  } else if (rounding == 2) {
    const int g = (b & 0x400000u) != 0, r = (b & 0x200000u) != 0, s = (b & 0x1fffffu) != 0, lsb = e > 0;
    up = g && (r || s || lsb);
  }
  if (up && e == 0xfe && saturate) up = 0;
  return (uchar)(e + up);
}

inline ushort cast_encode_bf16(float x) {
  const uint b = as_uint(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (ushort)((b >> 16) | 0x40);
  return (ushort)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

// The lane numbers of an int16 (lane masks and per-lane columns).
#define CLDL_IOTA16 ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))

// Stores the first n lanes of v (n <= 8 / 16) as vector pieces of 8, 4, 2 and 1: a row's last partial strip
// without a store per element.
inline void store8_upto(float8 v, __global float* p, int n) {
  if (n >= 8) {
    vstore8(v, 0, p);
    return;
  }
  int o = 0;
  float4 a = v.lo;
  if (n >= 4) vstore4(v.lo, 0, p), a = v.hi, o = 4;
  float2 b = a.lo;
  if (n - o >= 2) vstore2(a.lo, 0, p + o), b = a.hi, o += 2;
  if (n - o >= 1) p[o] = b.x;
}
inline void store16_upto(float16 v, __global float* p, int n) {
  if (n >= 16) {
    vstore16(v, 0, p);
    return;
  }
  if (n >= 8) {
    vstore8(v.lo, 0, p);
    store8_upto(v.hi, p + 8, n - 8);
  } else {
    store8_upto(v.lo, p, n);
  }
}
