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
    case ACT_GELU: return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));
    case ACT_GELU_TANH: return 0.5f * x * (1.0f + tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case ACT_SILU: return x / (1.0f + exp(-x));
    case ACT_HARD_SIGMOID: return fmax(0.0f, fmin(1.0f, a * x + b));
    case ACT_HARD_SWISH: return x * fmax(0.0f, fmin(1.0f, x / 6.0f + 0.5f));
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
