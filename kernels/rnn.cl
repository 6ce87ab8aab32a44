// RNN, LSTM and GRU step kernels in ONNX semantics (gate orders: LSTM i,o,f,c; GRU z,r,h).
// One work-item computes hidden unit j of batch item b for one time step: the recurrent dot products
// h_prev . R^T for every gate, the biases, the gate non-linearities and the state update, fused.
//
// Shared conventions (set by layers/rnn.cpp):
// - RT is the recurrent weight of one direction re-laid out at create as [H][G*H] (k-major) so that
//   neighbouring work-items (j, j+1) read neighbouring addresses; W likewise as W^T [I][D*G*H].
// - A work-item handles RNN_BT batch items for its unit j, so each loaded weight is used RNN_BT
//   times (the recurrent weights are the step's main memory traffic). Any RNN_BT >= 1 is correct.
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

#ifndef RNN_BT
#define RNN_BT 4
#endif
// Weight layout, chosen per device at create (both correct everywhere):
//  1: k-major (R^T [H][G*H], W^T [I][D*G*H]): neighbouring work-items read neighbouring addresses
//     (coalesced on GPUs);
//  0: ONNX row layout (R [G*H][H], W [D*G*H][I]): each work-item streams its own contiguous rows,
//     which is what CPU devices (PoCL runs a work-item's loop scalar) want.
#ifndef RNN_KMAJOR
#define RNN_KMAJOR 1
#endif
#if RNN_KMAJOR
#define RT_AT(k, row) RT[(long)(k) * GH + (row)]
#define WT_AT(k, row) WT[(long)(k) * ldw + (row)]
#else
#define RT_AT(k, row) RT[(long)(row) * H + (k)]
#define WT_AT(k, row) WT[(long)(row) * I + (k)]
#endif

// Input projection of gate row `row` (= g*H + j) for one batch item at time t.
inline float rnn_xproj(int fuse_input, __global const float* xw, long xw_idx, __global const float* x, long x_idx,
                       __global const float* WT, long ldw, int I, int row, __global const float* bx) {
  if (!fuse_input) return xw[xw_idx];
  __global const float* xr = x + x_idx;
  float acc = 0.0f;
  for (int k = 0; k < I; ++k) acc = fma(xr[k], WT_AT(k, row), acc);
  (void)ldw;
  return acc + bx[row];
}

#define RNN_COMMON_ARGS                                                                                     \
  int H, int G, int I, int T, int s, int reverse, int b0, int nb, __global const int *lens, long lens_off,  \
      int fuse_input, __global const float *xw, long xw_off, long xw_st, long xw_sb, __global const float *x, \
      long x_off, long x_st, long x_sb, __global const float *W, long w_off, long ldw,                     \
      __global const float *bx, long bx_off, __global const float *RT, int zero_prev,                      \
      __global const float *hp, long hp_off, long hp_sb, __global float *hn, long hn_off, __global float *Y, \
      long y_off, long y_st, long y_sb, int has_y, __global float *Yh, long yh_off, long yh_sb, int has_yh, \
      int last, float clip

// Work-item setup: unit j, first batch item bt0 of this item's tile.
#define RNN_TILE_PROLOGUE                             \
  const int j = get_global_id(0);                     \
  const int bt0 = b0 + (int)get_global_id(1) * RNN_BT; \
  if (j >= H || bt0 >= b0 + nb) return;               \
  W += w_off;                                         \
  bx += bx_off;                                       \
  const int GH = G * H;                               \
  (void)GH;

// Per batch item of the tile: which time step it is at, whether the step is valid.
#define RNN_ITEM_PROLOGUE(bb)                                          \
  const int b = bt0 + (bb);                                            \
  if (b >= b0 + nb) break;                                             \
  /* Clamped: out-of-range lengths must not index outside the data. */ \
  const int len = clamp(lens[lens_off + b], 0, T);                     \
  const int valid = s < len;                                           \
  const int t = reverse ? len - 1 - s : s;                             \
  const long xw_idx = xw_off + (long)t * xw_st + (long)b * xw_sb;      \
  const long x_idx = x_off + (long)t * x_st + (long)b * x_sb;          \
  const long hn_idx = hn_off + (long)b * H + j;                        \
  const float h_prev = zero_prev ? 0.0f : hp[hp_off + (long)b * hp_sb + j];

// Recurrent dot products of NG gates starting at gate g0, for the whole tile:
// acc[bb][g] = sum_k h[b, k] * RT[k, (g0 + g) * H + j]. Items past the batch read the last item.
#define RNN_TILE_DOT(acc, NG, g0, src, src_off, src_sb)                                   \
  float acc[RNN_BT][NG];                                                                 \
  for (int bb = 0; bb < RNN_BT; ++bb)                                                    \
    for (int g = 0; g < NG; ++g) acc[bb][g] = 0.0f;                                      \
  if (!zero_prev) {                                                                      \
    __global const float* hrow[RNN_BT];                                                  \
    for (int bb = 0; bb < RNN_BT; ++bb)                                                  \
      hrow[bb] = src + (src_off) + (long)min(bt0 + bb, b0 + nb - 1) * (src_sb);          \
    for (int k = 0; k < H; ++k) {                                                        \
      float r[NG];                                                                       \
      for (int g = 0; g < NG; ++g) r[g] = RT_AT(k, ((g0) + g) * H + j);         \
      for (int bb = 0; bb < RNN_BT; ++bb) {                                              \
        const float hk = hrow[bb][k];                                                    \
        for (int g = 0; g < NG; ++g) acc[bb][g] = fma(hk, r[g], acc[bb][g]);             \
      }                                                                                  \
    }                                                                                    \
  }

#define RNN_WRITE_H(hv)                                                  \
  hn[hn_idx] = (hv);                                                     \
  if (has_y) {                                                           \
    /* Positions past len[b] are 0 in Y, for both directions. */         \
    long yi = y_off + (long)s * y_st + (long)b * y_sb + j;               \
    if (valid) yi = y_off + (long)t * y_st + (long)b * y_sb + j;         \
    Y[yi] = valid ? (hv) : 0.0f;                                         \
  }                                                                      \
  if (last && has_yh) Yh[yh_off + (long)b * yh_sb + j] = (hv);

#define XPROJ(g) rnn_xproj(fuse_input, xw, xw_idx + (g) * H + j, x, x_idx, W, ldw, I, (g) * H + j, bx)

// Simple RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb).
__kernel void rnn_step(RNN_COMMON_ARGS, int f_kind, float f_a, float f_b) {
  RNN_TILE_PROLOGUE
  RNN_TILE_DOT(acc, 1, 0, hp, hp_off, hp_sb)
  for (int bb = 0; bb < RNN_BT; ++bb) {
    RNN_ITEM_PROLOGUE(bb)
    float hv = h_prev;
    if (valid) hv = cldl_act(f_kind, rnn_clip(XPROJ(0) + acc[bb][0], clip), f_a, f_b);
    RNN_WRITE_H(hv)
  }
}

// LSTM with optional peepholes P (i, o, f) and input_forget (f = 1 - i).
__kernel void lstm_step(RNN_COMMON_ARGS, int f_kind, float f_a, float f_b, int g_kind, float g_a, float g_b,
                        int h_kind, float h_a, float h_b, int zero_c, __global const float* cp, long cp_off,
                        long cp_sb, __global float* cn, long cn_off, __global float* Yc, long yc_off, long yc_sb,
                        int has_yc, __global const float* P, int has_p, int input_forget) {
  RNN_TILE_PROLOGUE
  RNN_TILE_DOT(acc, 4, 0, hp, hp_off, hp_sb)
  const float pi = has_p ? P[j] : 0.0f, po = has_p ? P[H + j] : 0.0f, pf = has_p ? P[2 * H + j] : 0.0f;
  for (int bb = 0; bb < RNN_BT; ++bb) {
    RNN_ITEM_PROLOGUE(bb)
    const float c_prev = zero_c ? 0.0f : cp[cp_off + (long)b * cp_sb + j];
    float hv = h_prev, c = c_prev;
    if (valid) {
      float gi = cldl_act(f_kind, rnn_clip(XPROJ(0) + acc[bb][0] + pi * c_prev, clip), f_a, f_b);
      float gf = input_forget ? 1.0f - gi
                              : cldl_act(f_kind, rnn_clip(XPROJ(2) + acc[bb][2] + pf * c_prev, clip), f_a, f_b);
      float gc = cldl_act(g_kind, rnn_clip(XPROJ(3) + acc[bb][3], clip), g_a, g_b);
      c = gf * c_prev + gi * gc;
      float go = cldl_act(f_kind, rnn_clip(XPROJ(1) + acc[bb][1] + po * c, clip), f_a, f_b);
      hv = go * cldl_act(h_kind, c, h_a, h_b);
    }
    cn[cn_off + (long)b * H + j] = c;
    if (last && has_yc) Yc[yc_off + (long)b * yc_sb + j] = c;
    RNN_WRITE_H(hv)
  }
}

// GRU, linear_before_reset = 1 (fused): h~ = g(X W_h^T + Wb_h + r * (H R_h^T + Rb_h)).
// Rb_h stays out of the input projection, passed here as rbh.
__kernel void gru_step(RNN_COMMON_ARGS, int f_kind, float f_a, float f_b, int g_kind, float g_a, float g_b,
                       __global const float* rbh) {
  RNN_TILE_PROLOGUE
  RNN_TILE_DOT(acc, 3, 0, hp, hp_off, hp_sb)
  for (int bb = 0; bb < RNN_BT; ++bb) {
    RNN_ITEM_PROLOGUE(bb)
    float hv = h_prev;
    if (valid) {
      float z = cldl_act(f_kind, rnn_clip(XPROJ(0) + acc[bb][0], clip), f_a, f_b);
      float r = cldl_act(f_kind, rnn_clip(XPROJ(1) + acc[bb][1], clip), f_a, f_b);
      float hh = cldl_act(g_kind, rnn_clip(XPROJ(2) + r * (acc[bb][2] + rbh[j]), clip), g_a, g_b);
      hv = (1.0f - z) * hh + z * h_prev;
    }
    RNN_WRITE_H(hv)
  }
}

// GRU, linear_before_reset = 0, part 1: z and r, and r * h_prev for part 2. The h gate needs
// (r * h_prev) . R_h^T over all units, so it cannot share the work-item of one unit: two kernels.
// zr holds z at [b*H + j] and r*h_prev at [B*H + b*H + j].
__kernel void gru_gates(RNN_COMMON_ARGS, int f_kind, float f_a, float f_b, __global float* zr, long zr_off, int B) {
  zr += zr_off;
  RNN_TILE_PROLOGUE
  RNN_TILE_DOT(acc, 2, 0, hp, hp_off, hp_sb)
  for (int bb = 0; bb < RNN_BT; ++bb) {
    RNN_ITEM_PROLOGUE(bb)
    (void)hn_idx;
    if (!valid) continue;
    float z = cldl_act(f_kind, rnn_clip(XPROJ(0) + acc[bb][0], clip), f_a, f_b);
    float r = cldl_act(f_kind, rnn_clip(XPROJ(1) + acc[bb][1], clip), f_a, f_b);
    zr[(long)b * H + j] = z;
    zr[(long)B * H + (long)b * H + j] = r * h_prev;
  }
}

// GRU, linear_before_reset = 0, part 2: h~ = g(X W_h^T + (r * h_prev) R_h^T + Wb_h + Rb_h), update.
__kernel void gru_step_lbr0(RNN_COMMON_ARGS, int g_kind, float g_a, float g_b, __global const float* zr, long zr_off,
                            int B) {
  zr += zr_off;
  RNN_TILE_PROLOGUE
  RNN_TILE_DOT(acc, 1, 2, zr, (long)B * H, H)
  for (int bb = 0; bb < RNN_BT; ++bb) {
    RNN_ITEM_PROLOGUE(bb)
    float hv = h_prev;
    if (valid) {
      float hh = cldl_act(g_kind, rnn_clip(XPROJ(2) + acc[bb][0], clip), g_a, g_b);
      hv = (1.0f - zr[(long)b * H + j]) * hh + zr[(long)b * H + j] * h_prev;
    }
    RNN_WRITE_H(hv)
  }
}
