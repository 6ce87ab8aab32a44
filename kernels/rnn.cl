// RNN, LSTM and GRU step kernels in ONNX semantics (gate orders: LSTM i,o,f,c; GRU z,r,h).
// One work-item computes hidden unit j of batch item b for one time step: the recurrent dot products
// h_prev . R^T for every gate, the biases, the gate non-linearities and the state update, fused.
//
// Shared conventions (set by layers/rnn.cpp):
// - RT is the recurrent weight of one direction re-laid out at create as [H][G*H] (k-major) so that
//   neighbouring work-items (j, j+1) read neighbouring addresses.
// - The input projection x_t . W^T + biases comes either from xw (computed for all steps by one GEMM
//   before the recurrence: the time-step-parallel path) or, with fuse_input = 1, is computed here from
//   x and W (the sequential baseline). Both accumulate in the same order (fma over k from 0, then the
//   bias), so the two paths give the same numbers.
// - Step s of a direction touches, for batch item b, time t = s (forward) or t = len[b]-1-s (reverse);
//   steps at or past len[b] write 0 to Y and carry the state unchanged, so the last step leaves the
//   state of the last valid step, which goes to Y_h / Y_c.
// - Activations are runtime ACT_* numbers (kernels/common.cl) with alpha/beta, so one program serves
//   every activation list.
// - State lives in a ping-pong buffer; at s = 0 the previous state is initial_h/initial_c or zero.

inline float rnn_clip(float x, float clip) { return clip > 0.0f ? fmin(fmax(x, -clip), clip) : x; }

// Input projection of gate row `row` (= g*H + j) for batch b at time t.
inline float rnn_xproj(int fuse_input, __global const float* xw, long xw_idx, __global const float* x, long x_idx,
                       __global const float* W, int I, int row, __global const float* bx, int bias_row) {
  if (!fuse_input) return xw[xw_idx];
  __global const float* xr = x + x_idx;
  __global const float* wr = W + (long)row * I;
  float acc = 0.0f;
  for (int k = 0; k < I; ++k) acc = fma(xr[k], wr[k], acc);
  return acc + bx[bias_row];
}

// Common per-work-item prologue: which batch/time this item is, whether the step is valid.
#define RNN_PROLOGUE                                                   \
  const int j = get_global_id(0);                                      \
  const int b = get_global_id(1) + b0;                                 \
  if (j >= H || b >= b0 + nb) return;                                  \
  W += w_off;                                                          \
  bx += bx_off;                                                        \
  /* Clamped: out-of-range lengths must not index outside the data. */ \
  const int len = clamp(lens[lens_off + b], 0, T);                     \
  const int valid = s < len;                                           \
  const int t = reverse ? len - 1 - s : s;                             \
  const long xw_idx = xw_off + (long)t * xw_st + (long)b * xw_sb;      \
  const long x_idx = x_off + (long)t * x_st + (long)b * x_sb;          \
  const long hp_idx = hp_off + (long)b * hp_sb;                        \
  const long hn_idx = hn_off + (long)b * H + j;

#define RNN_COMMON_ARGS                                                                                   \
  int H, int G, int I, int T, int s, int reverse, int b0, int nb, __global const int *lens, long lens_off,       \
      int fuse_input, __global const float *xw, long xw_off, long xw_st, long xw_sb,                      \
      __global const float *x, long x_off, long x_st, long x_sb, __global const float *W, long w_off,     \
      __global const float *bx, long bx_off, __global const float *RT, int zero_prev, __global const float *hp,        \
      long hp_off, long hp_sb, __global float *hn, long hn_off, __global float *Y, long y_off, long y_st,  \
      long y_sb, int has_y, __global float *Yh, long yh_off, long yh_sb, int has_yh, int last, float clip

#define RNN_WRITE_H(hv)                                                  \
  hn[hn_idx] = (hv);                                                     \
  if (has_y) {                                                           \
    /* Positions past len[b] are 0 in Y, for both directions. */         \
    long yi = y_off + (long)s * y_st + (long)b * y_sb + j;               \
    if (valid) yi = y_off + (long)t * y_st + (long)b * y_sb + j;         \
    Y[yi] = valid ? (hv) : 0.0f;                                         \
  }                                                                      \
  if (last && has_yh) Yh[yh_off + (long)b * yh_sb + j] = (hv);

// Simple RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb).
__kernel void rnn_step(RNN_COMMON_ARGS, int f_kind, float f_a, float f_b) {
  RNN_PROLOGUE
  const float h_prev = zero_prev ? 0.0f : hp[hp_idx + j];
  if (!valid) {
    RNN_WRITE_H(h_prev)
    return;
  }
  float acc = 0.0f;
  if (!zero_prev) {
    __global const float* h = hp + hp_idx;
    for (int k = 0; k < H; ++k) acc = fma(h[k], RT[(long)k * H + j], acc);
  }
  float v = rnn_xproj(fuse_input, xw, xw_idx + j, x, x_idx, W, I, j, bx, j) + acc;
  float hv = cldl_act(f_kind, rnn_clip(v, clip), f_a, f_b);
  RNN_WRITE_H(hv)
}

// LSTM with optional peepholes P (i, o, f) and input_forget (f = 1 - i).
__kernel void lstm_step(RNN_COMMON_ARGS, int f_kind, float f_a, float f_b, int g_kind, float g_a, float g_b,
                        int h_kind, float h_a, float h_b, int zero_c, __global const float* cp, long cp_off, long cp_sb,
                        __global float* cn, long cn_off, __global float* Yc, long yc_off, long yc_sb, int has_yc,
                        __global const float* P, int has_p, int input_forget) {
  RNN_PROLOGUE
  const float h_prev = zero_prev ? 0.0f : hp[hp_idx + j];
  const float c_prev = zero_c ? 0.0f : cp[cp_off + (long)b * cp_sb + j];
  if (!valid) {
    RNN_WRITE_H(h_prev)
    cn[cn_off + (long)b * H + j] = c_prev;
    if (last && has_yc) Yc[yc_off + (long)b * yc_sb + j] = c_prev;
    return;
  }
  float ai = 0.0f, ao = 0.0f, af = 0.0f, ac = 0.0f;
  if (!zero_prev) {
    __global const float* h = hp + hp_idx;
    const int GH = 4 * H;
    for (int k = 0; k < H; ++k) {
      const float hk = h[k];
      __global const float* r = RT + (long)k * GH + j;
      ai = fma(hk, r[0], ai);
      ao = fma(hk, r[H], ao);
      af = fma(hk, r[2 * H], af);
      ac = fma(hk, r[3 * H], ac);
    }
  }
  float pi = 0.0f, po = 0.0f, pf = 0.0f;
  if (has_p) {
    pi = P[j];
    po = P[H + j];
    pf = P[2 * H + j];
  }
  float xi = rnn_xproj(fuse_input, xw, xw_idx + j, x, x_idx, W, I, j, bx, j);
  float xo = rnn_xproj(fuse_input, xw, xw_idx + H + j, x, x_idx, W, I, H + j, bx, H + j);
  float xf = rnn_xproj(fuse_input, xw, xw_idx + 2 * H + j, x, x_idx, W, I, 2 * H + j, bx, 2 * H + j);
  float xc = rnn_xproj(fuse_input, xw, xw_idx + 3 * H + j, x, x_idx, W, I, 3 * H + j, bx, 3 * H + j);
  float gi = cldl_act(f_kind, rnn_clip(xi + ai + pi * c_prev, clip), f_a, f_b);
  float gf = input_forget ? 1.0f - gi : cldl_act(f_kind, rnn_clip(xf + af + pf * c_prev, clip), f_a, f_b);
  float gc = cldl_act(g_kind, rnn_clip(xc + ac, clip), g_a, g_b);
  float c = gf * c_prev + gi * gc;
  float go = cldl_act(f_kind, rnn_clip(xo + ao + po * c, clip), f_a, f_b);
  float hv = go * cldl_act(h_kind, c, h_a, h_b);
  cn[cn_off + (long)b * H + j] = c;
  if (last && has_yc) Yc[yc_off + (long)b * yc_sb + j] = c;
  RNN_WRITE_H(hv)
}

// GRU, linear_before_reset = 1 (fused): h~ = g(X W_h^T + Wb_h + r * (H R_h^T + Rb_h)).
// Rb_h stays out of the input projection, passed here as rbh.
__kernel void gru_step(RNN_COMMON_ARGS, int f_kind, float f_a, float f_b, int g_kind, float g_a, float g_b,
                       __global const float* rbh) {
  RNN_PROLOGUE
  const float h_prev = zero_prev ? 0.0f : hp[hp_idx + j];
  if (!valid) {
    RNN_WRITE_H(h_prev)
    return;
  }
  float az = 0.0f, ar = 0.0f, ah = 0.0f;
  if (!zero_prev) {
    __global const float* h = hp + hp_idx;
    const int GH = 3 * H;
    for (int k = 0; k < H; ++k) {
      const float hk = h[k];
      __global const float* r = RT + (long)k * GH + j;
      az = fma(hk, r[0], az);
      ar = fma(hk, r[H], ar);
      ah = fma(hk, r[2 * H], ah);
    }
  }
  float xz = rnn_xproj(fuse_input, xw, xw_idx + j, x, x_idx, W, I, j, bx, j);
  float xr = rnn_xproj(fuse_input, xw, xw_idx + H + j, x, x_idx, W, I, H + j, bx, H + j);
  float xh = rnn_xproj(fuse_input, xw, xw_idx + 2 * H + j, x, x_idx, W, I, 2 * H + j, bx, 2 * H + j);
  float z = cldl_act(f_kind, rnn_clip(xz + az, clip), f_a, f_b);
  float r = cldl_act(f_kind, rnn_clip(xr + ar, clip), f_a, f_b);
  float hh = cldl_act(g_kind, rnn_clip(xh + r * (ah + rbh[j]), clip), g_a, g_b);
  float hv = (1.0f - z) * hh + z * h_prev;
  RNN_WRITE_H(hv)
}

// GRU, linear_before_reset = 0, part 1: z and r, and r * h_prev for part 2. The h gate needs
// (r * h_prev) . R_h^T over all units, so it cannot share the work-item of one unit: two kernels.
// zr holds z at [b*H + j] and r*h_prev at [nb_total*H + b*H + j].
__kernel void gru_gates(RNN_COMMON_ARGS, int f_kind, float f_a, float f_b, __global float* zr, long zr_off, int B) {
  zr += zr_off;
  RNN_PROLOGUE
  (void)hn_idx;
  (void)Y;
  (void)Yh;
  if (!valid) return;
  const float h_prev = zero_prev ? 0.0f : hp[hp_idx + j];
  float az = 0.0f, ar = 0.0f;
  if (!zero_prev) {
    __global const float* h = hp + hp_idx;
    const int GH = 3 * H;
    for (int k = 0; k < H; ++k) {
      const float hk = h[k];
      __global const float* r = RT + (long)k * GH + j;
      az = fma(hk, r[0], az);
      ar = fma(hk, r[H], ar);
    }
  }
  float xz = rnn_xproj(fuse_input, xw, xw_idx + j, x, x_idx, W, I, j, bx, j);
  float xr = rnn_xproj(fuse_input, xw, xw_idx + H + j, x, x_idx, W, I, H + j, bx, H + j);
  float z = cldl_act(f_kind, rnn_clip(xz + az, clip), f_a, f_b);
  float r = cldl_act(f_kind, rnn_clip(xr + ar, clip), f_a, f_b);
  zr[(long)b * H + j] = z;
  zr[(long)B * H + (long)b * H + j] = r * h_prev;
}

// GRU, linear_before_reset = 0, part 2: h~ = g(X W_h^T + (r * h_prev) R_h^T + Wb_h + Rb_h), update.
__kernel void gru_step_lbr0(RNN_COMMON_ARGS, int g_kind, float g_a, float g_b, __global const float* zr, long zr_off, int B) {
  zr += zr_off;
  RNN_PROLOGUE
  const float h_prev = zero_prev ? 0.0f : hp[hp_idx + j];
  if (!valid) {
    RNN_WRITE_H(h_prev)
    return;
  }
  float ah = 0.0f;
  if (!zero_prev) {
    __global const float* rh = zr + (long)B * H + (long)b * H;
    const int GH = 3 * H;
    for (int k = 0; k < H; ++k) ah = fma(rh[k], RT[(long)k * GH + 2 * H + j], ah);
  }
  float xh = rnn_xproj(fuse_input, xw, xw_idx + 2 * H + j, x, x_idx, W, I, 2 * H + j, bx, 2 * H + j);
  float z = zr[(long)b * H + j];
  float hh = cldl_act(g_kind, rnn_clip(xh + ah, clip), g_a, g_b);
  float hv = (1.0f - z) * hh + z * h_prev;
  RNN_WRITE_H(hv)
}
