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
// Weight layout, chosen per device at create (all correct everywhere; CLDL_RNN_WEIGHT_LAYOUT forces one).
// LSTM on CPUs uses the third, "tiles", with the register-blocked *_tile kernels at the end of this file;
// the two below serve GPUs (k-major) and GRU / RNN on CPUs (rows):
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

// ---------------------------------------------------------------------------------------------------
// Register-blocked tile kernels (the default on CPU devices; layers/rnn.cpp "tiles" weight layout).
// A work-item computes rg row groups of RNN_MR batch rows x RNN_TW hidden units (one tile) for every gate
// of the cell: the recurrent product h . R^T as a small register-blocked GEMM (per k: one vector of RNN_TW
// weights per gate, one broadcast h value per row, MR x G fmas on those vectors; the row groups take the
// k range block by block, RNN_KB_ACC), fused with the biases, gate
// non-linearities and the state update. Weights are re-laid out once at create into gate-interleaved
// tiles (TW = RNN_TW):
//   Rt[n][k][g][u] = R[g*H + TW*n + u][k]   (n: tile of TW units, zero for TW*n + u >= H)
//   Wt[d][n][k][g][u] = W[d][g*H + TW*n + u][k]
// so each k step reads G*TW contiguous floats. Every output element accumulates with fma over k from 0,
// then adds the bias (projection) and the recurrent sum, in this order, in all paths: the fused
// sequential kernel (x_t W^T computed per step here) and the separate projection kernel give the same
// bits, whatever the tile width. Units past H (last tile when H % TW != 0) are computed on zero weights
// and never stored.
// RNN_TW is the tile width, the vector width of every tile kernel: 8 (float8: AVX2's ymm registers) or
// 16 (float16: AVX-512's zmm, twice the FMA width; the host picks it where the device prefers float16).
// ---------------------------------------------------------------------------------------------------
#ifndef RNN_TW
#define RNN_TW 8
#endif
#if RNN_TW == 8
typedef float8 tvec;
#define TVLOAD vload8
#define TVSTORE vstore8
#elif RNN_TW == 16
typedef float16 tvec;
#define TVLOAD vload16
#define TVSTORE vstore16
#else
#error "RNN_TW must be 8 or 16"
#endif
#ifndef RNN_PMR
#define RNN_PMR 4
#endif

inline tvec rnn_loadt(__global const float* p, int n) {
  if (n >= RNN_TW) return TVLOAD(0, p);
  float tmp[RNN_TW];
  for (int u = 0; u < RNN_TW; ++u) tmp[u] = u < n ? p[u] : 0.0f;
  return TVLOAD(0, tmp);
}

inline void rnn_storet(tvec v, __global float* p, int n) {
  if (n >= RNN_TW) {
    TVSTORE(v, 0, p);
    return;
  }
  float tmp[RNN_TW];
  TVSTORE(v, 0, tmp);
  for (int u = 0; u < n; ++u) p[u] = tmp[u];
}

// Stores of the projection's output: streaming (CLDL_NT_STORE, common.cl) on full aligned tiles, since xw
// ([T][B][4H], 26 MB at T100 B32 H512) is far larger than the caches and is read back step by step much
// later. PoCL/AVX-512, 2 threads, stacks with either store alternating in one process: time parallel
// T100 B32 I512 H512 0.956x, layer parallel T200 B64 H256 L2 0.935x the time with plain stores.
inline void rnn_storet_nt(tvec v, __global float* p, int n) {
  if (n >= RNN_TW && ((ulong)p & (sizeof(tvec) - 1)) == 0)
    CLDL_NT_STORE(v, (__global tvec*)p);
  else
    rnn_storet(v, p, n);
}

// Vector forms of the common gate activations; anything else element by element through cldl_act.
inline tvec rnn_actt(int kind, tvec x, float a, float b) {
  if (kind == ACT_SIGMOID) return 1.0f / (1.0f + exp(-x));
  if (kind == ACT_TANH) return tanh(x);
  float tmp[RNN_TW];
  TVSTORE(x, 0, tmp);
  for (int u = 0; u < RNN_TW; ++u) tmp[u] = cldl_act(kind, tmp[u], a, b);
  return TVLOAD(0, tmp);
}

inline tvec rnn_clipt(tvec x, float clip) { return clip > 0.0f ? fmin(fmax(x, -clip), clip) : x; }

// acc[r][g0 + g] += sum_k rows[r][k] * Wt[k][g0 + g][0..TW) for NGP gates from g0, tile stride NGT*TW floats per k.
// The k loop unrolled by 4 by hand: a pass is only ~14 instructions per k, the loop overhead was measurable
// (PoCL, AVX2), and `#pragma unroll 4` is not honoured on the larger instances (clang warns "loop not
// unrolled" at every program build). Each element still accumulates over k in increasing order.
#define RNN_TILE_ACC_K(acc, MR, NGP, g0, NGT, kk, wt, rows)                                  \
  {                                                                                          \
    tvec w_[NGP];                                                                            \
    _Pragma("unroll") for (int g = 0; g < (NGP); ++g)                                          \
      w_[g] = TVLOAD(0, (wt) + (long)(kk) * ((NGT) * RNN_TW) + ((g0) + g) * RNN_TW);                     \
    _Pragma("unroll") for (int r = 0; r < (MR); ++r) {                                         \
      const tvec a_ = (tvec)(rows[r][kk]);                                                 \
      _Pragma("unroll") for (int g = 0; g < (NGP); ++g)                                        \
        acc[r][(g0) + g] = fma(a_, w_[g], acc[r][(g0) + g]);                                   \
    }                                                                                          \
  }
#define RNN_TILE_ACC_PASS(acc, MR, NGP, g0, NGT, K, wt, rows)                                  \
  {                                                                                          \
    int k_ = 0;                                                                              \
    _Pragma("unroll 1") for (; k_ + 4 <= (K); k_ += 4) {                                      \
      RNN_TILE_ACC_K(acc, MR, NGP, g0, NGT, k_, wt, rows)                                    \
      RNN_TILE_ACC_K(acc, MR, NGP, g0, NGT, k_ + 1, wt, rows)                                \
      RNN_TILE_ACC_K(acc, MR, NGP, g0, NGT, k_ + 2, wt, rows)                                \
      RNN_TILE_ACC_K(acc, MR, NGP, g0, NGT, k_ + 3, wt, rows)                                \
    }                                                                                        \
    _Pragma("unroll 1") for (; k_ < (K); ++k_) RNN_TILE_ACC_K(acc, MR, NGP, g0, NGT, k_, wt, rows) \
  }

// Gates per pass over k of a tile product of MR rows (1, 2, 4 or 8; NG a multiple of it): one pass's
// accumulators (MR x gates vectors) and weights must fit the vector registers. 4 rows x 4 gates (16
// accumulators + 4 weights) do not fit AVX2's 16 ymm registers: LLVM spilled and shuffled inside the k
// loop and the step ran ~1.7x slower than in two passes of 2 gates. So: at most RNN_MAXACC accumulators
// per pass, 8 with float8 tiles (16 ymm) and 16 with float16 tiles (AVX-512's 32 zmm: 4 rows x 4 gates
// + 4 weights in one pass, each broadcast row value used for 4 FMAs).
// RNN_GPASS forces one width for every kernel. Every split gives the same bits: each element still sums
// over k from 0 in order.
#ifndef RNN_MAXACC
#define RNN_MAXACC (RNN_TW == 16 ? 16 : 8)
#endif
#ifdef RNN_GPASS
#define RNN_GP(MR) (RNN_GPASS)
#else
#define RNN_GP(MR) ((MR) >= RNN_MAXACC ? 1 : 2 * (MR) >= RNN_MAXACC ? 2 : 4)
#endif
// acc[r][g] += sum_k rows[r][k] * Wt[k][g][0..TW) for all NG gates of the tiles.
#define RNN_TILE_ACC(acc, MR, NG, K, wt, rows)                                                 \
  _Pragma("unroll") for (int gp_ = 0; gp_ < (NG); gp_ += RNN_GP(MR))                           \
    RNN_TILE_ACC_PASS(acc, MR, RNN_GP(MR), gp_, NG, K, wt, rows)

// Row groups per work-item of a step, at most RNN_RGMAX (private accumulators for RNN_MR * RNN_RGMAX rows).
#ifndef RNN_RGMAX
#define RNN_RGMAX 8
#endif
#define RNN_ROWS (RNN_MR * RNN_RGMAX)

// k-blocked tile product over nrg row groups of MR rows: accs[q * MR + r][g] += sum_k ROW(q * MR + r)[k] *
// wt[k][g][0..TW), with k in blocks of kb. Per block, each row group's accumulators move from private memory
// into registers, take the block's k, and go back; so the block's weights (kb * NG * TW floats, 16 KB at
// kb 64 and float16 tiles) are loaded from L2 or memory once and then serve every row group from L1. With
// one row group per work-item each group streamed the whole tile from L2, and the first also from L3.
// Every element still sums over k from 0 in order: the same bits for any kb and nrg.
#define RNN_KB_ACC(accs, MR, NG, nrg, K, kb, wt, ROW)                                                   \
  for (int kb0_ = 0; kb0_ < (K); kb0_ += (kb)) {                                                        \
    const int kn_ = min((kb), (K) - kb0_);                                                             \
    _Pragma("unroll 1") for (int q_ = 0; q_ < (nrg); ++q_) {                                            \
      __global const float* rows_[MR];                                                                  \
      _Pragma("unroll") for (int r = 0; r < (MR); ++r) rows_[r] = ROW(q_ * (MR) + r) + kb0_;           \
      tvec blk_[MR][NG];                                                                                \
      _Pragma("unroll") for (int r = 0; r < (MR); ++r)                                                  \
        _Pragma("unroll") for (int g = 0; g < (NG); ++g) blk_[r][g] = accs[q_ * (MR) + r][g];         \
      RNN_TILE_ACC(blk_, MR, NG, kn_, (wt) + (long)kb0_ * ((NG) * RNN_TW), rows_)                      \
      _Pragma("unroll") for (int r = 0; r < (MR); ++r)                                                  \
        _Pragma("unroll") for (int g = 0; g < (NG); ++g) accs[q_ * (MR) + r][g] = blk_[r][g];         \
    }                                                                                                   \
  }

// The tile of this work-item at step s: on odd steps each half of the tiles in reverse order. PoCL hands
// the first half of a launch's work-groups (one per tile, in order) to one worker thread and the rest to the
// others, so each core walks its tiles 0..k on even steps and k..0 on odd ones: the tiles it read last
// (still in its L2) come first. A permutation of the same work: the same bits. PoCL/AVX-512, T100 B32 H512,
// 2 threads, both orders' stacks alternating in one process: 0.98-0.99x the time of the plain order (time
// parallel and sequential, 40-60 rounds each; the same stacks against themselves: 1.000x).
inline int rnn_step_tile(int s) {
  const int nt = (int)get_global_size(1), g = (int)get_global_id(1), h = (nt + 1) / 2;
  if (!(s & 1)) return g;
  return g < h ? h - 1 - g : nt - 1 - (g - h);
}

// Work-item setup of a step tile: tile n (units j0 .. j0 + nu), rows m0 .. m0 + nrow of the batch (rg row
// groups of RNN_MR rows); per row its batch item (clamped to the last one: extra rows compute duplicates,
// never stored), its length, whether step s is valid, and its time index (clamped into [0, T) for reads).
// rg and kb are clamped only to keep the private arrays in bounds; the host validates them.
// RNN_STEP_N / RNN_STEP_ITEM: the tile and the row block of the work-item (one launch per step); the
// all-steps kernels (lstm_steps_tile_m*) redefine them to their loop's tile and their work-item.
#define RNN_STEP_N rnn_step_tile(s)
#define RNN_STEP_ITEM (int)get_global_id(0)
#define RNN_STEP_TILE_PROLOGUE                                               \
  const int n = RNN_STEP_N;                                                  \
  const int nrg = clamp(rg, 1, RNN_RGMAX), kbl = max(kb, 1);                 \
  const int nrow = RNN_MR * nrg;                                             \
  const int m0 = b0 + RNN_STEP_ITEM * nrow;                                  \
  const int j0 = n * RNN_TW;                                                 \
  if (j0 >= H || m0 >= b0 + nb) return;                                      \
  const int nu = min(RNN_TW, H - j0);                                        \
  W += w_off;                                                                \
  bx += bx_off;                                                              \
  int rb[RNN_ROWS], rt[RNN_ROWS], rvalid[RNN_ROWS], rtr[RNN_ROWS];           \
  for (int i = 0; i < nrow; ++i) {                                           \
    rb[i] = min(m0 + i, b0 + nb - 1);                                        \
    const int len_ = clamp(lens[lens_off + rb[i]], 0, T);                    \
    rvalid[i] = s < len_;                                                    \
    rt[i] = reverse ? len_ - 1 - s : s;                                      \
    rtr[i] = clamp(rt[i], 0, T - 1);                                         \
  }

// Accumulators acc[ROWS][NG], the first nrow rows zero.
#define RNN_ZERO_ROWS(acc, ROWS, NG)                    \
  tvec acc[ROWS][NG];                                   \
  for (int i = 0; i < nrow; ++i)                        \
    _Pragma("unroll") for (int g = 0; g < (NG); ++g) acc[i][g] = (tvec)(0.0f);

// Input projection of the tile's rows for NG gates into xp[i][g]: from xw, or computed here (fused).
#define RNN_XROW(i) (x + x_off + (long)rtr[i] * x_st + (long)rb[i] * x_sb)
#define RNN_STEP_TILE_XPROJ(xp, NG)                                                                     \
  RNN_ZERO_ROWS(xp, RNN_ROWS, NG)                                                                       \
  if (fuse_input) {                                                                                     \
    RNN_KB_ACC(xp, RNN_MR, NG, nrg, I, kbl, W + (long)n * I * (NG * RNN_TW), RNN_XROW)                  \
    for (int i = 0; i < nrow; ++i)                                                                      \
      _Pragma("unroll") for (int g = 0; g < NG; ++g) xp[i][g] += rnn_loadt(bx + g * H + j0, nu);        \
  } else {                                                                                              \
    for (int i = 0; i < nrow; ++i)                                                                      \
      _Pragma("unroll") for (int g = 0; g < NG; ++g) xp[i][g] =                                         \
          rnn_loadt(xw + xw_off + (long)rtr[i] * xw_st + (long)rb[i] * xw_sb + g * H + j0, nu);         \
  }

// Recurrent sums acc[i][g] of the NG gates over the previous state's rows (RNN_HROW).
#define RNN_HROW(i) (hp + hp_off + (long)rb[i] * hp_sb)
#define RNN_STEP_TILE_DOT(acc, NG)                                                                      \
  RNN_ZERO_ROWS(acc, RNN_ROWS, NG)                                                                      \
  if (!zero_prev) RNN_KB_ACC(acc, RNN_MR, NG, nrg, H, kbl, RT + (long)n * H * ((NG) * RNN_TW), RNN_HROW)

// Per stored row i: batch item b, previous h, validity and time; Y / Y_h writes of the new h.
#define RNN_TILE_ROW_PROLOGUE(i)                                                         \
  if (m0 + (i) >= b0 + nb) break;                                                        \
  const int b = m0 + (i);                                                                \
  const int valid = rvalid[i], t = rt[i];                                                \
  const tvec h_prev = zero_prev ? (tvec)(0.0f) : rnn_loadt(hp + hp_off + (long)b * hp_sb + j0, nu);

#define RNN_TILE_WRITE_H(hv)                                                            \
  rnn_storet((hv), hn + hn_off + (long)b * H + j0, nu);                                 \
  if (has_y) {                                                                          \
    long yi = y_off + (long)s * y_st + (long)b * y_sb + j0;                             \
    if (valid) yi = y_off + (long)t * y_st + (long)b * y_sb + j0;                       \
    rnn_storet(valid ? (hv) : (tvec)(0.0f), Y + yi, nu);                              \
  }                                                                                     \
  if (last && has_yh) rnn_storet((hv), Yh + yh_off + (long)b * yh_sb + j0, nu);

// The LSTM tile step on the names of lstm_step_tile_m*'s arguments (the wave kernels below define them
// per layer).
#define RNN_LSTM_STEP_TILE_BODY                                                                                          \
  RNN_STEP_TILE_PROLOGUE                                                                                                 \
  RNN_STEP_TILE_XPROJ(xp, 4)                                                                                             \
  RNN_STEP_TILE_DOT(acc, 4)                                                                                              \
  const tvec pi = has_p ? rnn_loadt(P + j0, nu) : (tvec)(0.0f);                                                      \
  const tvec po = has_p ? rnn_loadt(P + H + j0, nu) : (tvec)(0.0f);                                                  \
  const tvec pf = has_p ? rnn_loadt(P + 2 * H + j0, nu) : (tvec)(0.0f);                                              \
  for (int i = 0; i < nrow; ++i) {                                                                                       \
    RNN_TILE_ROW_PROLOGUE(i)                                                                                             \
    const tvec c_prev = zero_c ? (tvec)(0.0f) : rnn_loadt(cp + cp_off + (long)b * cp_sb + j0, nu);                   \
    tvec hv = h_prev, c = c_prev;                                                                                      \
    if (valid) {                                                                                                         \
      const tvec gi = rnn_actt(f_kind, rnn_clipt(xp[i][0] + acc[i][0] + pi * c_prev, clip), f_a, f_b);                 \
      const tvec gf = input_forget ? 1.0f - gi                                                                         \
                                     : rnn_actt(f_kind, rnn_clipt(xp[i][2] + acc[i][2] + pf * c_prev, clip), f_a, f_b);  \
      const tvec gc = rnn_actt(g_kind, rnn_clipt(xp[i][3] + acc[i][3], clip), g_a, g_b);                               \
      c = gf * c_prev + gi * gc;                                                                                         \
      const tvec go = rnn_actt(f_kind, rnn_clipt(xp[i][1] + acc[i][1] + po * c, clip), f_a, f_b);                      \
      hv = go * rnn_actt(h_kind, c, h_a, h_b);                                                                           \
    }                                                                                                                    \
    rnn_storet(c, cn + cn_off + (long)b * H + j0, nu);                                                                   \
    if (last && has_yc) rnn_storet(c, Yc + yc_off + (long)b * yc_sb + j0, nu);                                           \
    RNN_TILE_WRITE_H(hv)                                                                                                 \
  }

#define RNN_LSTM_STEP_TILE(name)                                                                                         \
__kernel void name(RNN_COMMON_ARGS, int f_kind, float f_a, float f_b, int g_kind, float g_a, float g_b,                  \
                             int h_kind, float h_a, float h_b, int zero_c, __global const float* cp, long cp_off,        \
                             long cp_sb, __global float* cn, long cn_off, __global float* Yc, long yc_off, long yc_sb,   \
                             int has_yc, __global const float* P, int has_p, int input_forget, int rg, int kb) {         \
  RNN_LSTM_STEP_TILE_BODY                                                                                                \
}

// Wavefront over a stack of forward LSTM layers (layers/rnn_schedule.cpp, strategy "wavefront"): the launch of
// wave w runs step s = w - lag * l of every layer l at once (NDRange dimension 2 = layer), so a stack of L
// layers takes T + lag * (L - 1) launches instead of T * L. Two ways to get a layer's input projection:
// - lag 1, fused (xw offset < 0): computed in the step as in the sequential path; layer l > 0 reads its
//   input Y_{l-1}[s] straight from layer l-1's state h(s), which the previous wave left in ping-pong slot
//   s & 1 (this wave writes h(s + 1) of layer l-1 into the other slot). Each step streams W and R.
// - lag K, projected: read from xw ([T][B][4H] in `st`), which lstm_project_tile fills chunk by chunk of K
//   steps between waves (the host enqueues them as soon as layer l-1 has written those steps of its Y
//   into `st`); W is read once per chunk instead of once per step.
// Either way the per-element arithmetic is the sequential path's, so are the numbers. Y_h / Y_c are the
// states after the last wave (the host copies them out); the last layer writes Y into Yo.
// Per layer, RNN_WAVE_LW longs of `lt` (floats as their int bits): H, I, offsets into `wts` of the tiled W,
// the tiled R, the bias and the peepholes, offsets into `st` of the h and c states ([2][B][H] each), whether
// initial_h / initial_c were copied into slot 1, the activations (kind, alpha, beta for f, g, h), clip,
// input_forget, the offset of xw in `st` (-1: fused), the offset of Y in `st` (intermediate layers of the
// projected form; -1: none).
#define RNN_WAVE_LW 24
#define RNN_LSTM_WAVE_TILE(name)                                                                                         \
__kernel void name(int wave, int lag, int T, int B, __global const int* lens, long lens_off, __global const float* x0,  \
                   long x0_off, long x0_st, long x0_sb, __global const float* wts, __global const long* lt,             \
                   __global float* st, __global float* Yo, long yo_off, long yo_st, long yo_sb, int has_yo, int rg,     \
                   int kb) {                                                                                            \
  const int l = get_global_id(2);                                                                                        \
  const int s = wave - lag * l;                                                                                          \
  if (s < 0 || s >= T) return;                                                                                           \
  __global const long* p = lt + l * RNN_WAVE_LW;                                                                         \
  const int H = (int)p[0], I = (int)p[1], reverse = 0, b0 = 0, nb = B, fuse_input = p[21] < 0;                          \
  __global const float* xw = st;                                                                                         \
  const long xw_off = p[21], xw_st = (long)B * 4 * H, xw_sb = 4 * H;                                                     \
  __global const float* x = l == 0 ? x0 : (__global const float*)st;                                                    \
  const long x_off = l == 0 ? x0_off : p[6 - RNN_WAVE_LW] + (long)(s & 1) * B * p[-RNN_WAVE_LW];                          \
  const long x_st = l == 0 ? x0_st : 0, x_sb = l == 0 ? x0_sb : p[-RNN_WAVE_LW];                                         \
  __global const float* W = wts;                                                                                         \
  __global const float* bx = wts;                                                                                        \
  const long w_off = p[2], bx_off = p[4];                                                                                \
  __global const float* RT = wts + p[3];                                                                                 \
  const int zero_prev = s == 0 && !p[8], zero_c = s == 0 && !p[9];                                                       \
  __global const float* hp = st;                                                                                         \
  __global float* hn = st;                                                                                               \
  const long hp_off = p[6] + (long)((s + 1) & 1) * B * H, hn_off = p[6] + (long)(s & 1) * B * H, hp_sb = H;             \
  __global const float* cp = st;                                                                                         \
  __global float* cn = st;                                                                                               \
  const long cp_off = p[7] + (long)((s + 1) & 1) * B * H, cn_off = p[7] + (long)(s & 1) * B * H, cp_sb = H;             \
  const int top = l == (int)get_global_size(2) - 1;                                                                      \
  __global float* Y = top ? Yo : st;                                                                                     \
  const long y_off = top ? yo_off : p[22], y_st = top ? yo_st : (long)B * H, y_sb = top ? yo_sb : H;                    \
  const int has_y = top ? has_yo : p[22] >= 0;                                                                           \
  __global float* Yh = st;                                                                                               \
  __global float* Yc = st;                                                                                               \
  const long yh_off = 0, yh_sb = 0, yc_off = 0, yc_sb = 0;                                                               \
  const int has_yh = 0, has_yc = 0, last = 0;                                                                            \
  const int f_kind = (int)p[10], g_kind = (int)p[11], h_kind = (int)p[12];                                               \
  const float f_a = as_float((int)p[13]), f_b = as_float((int)p[14]), g_a = as_float((int)p[15]);                       \
  const float g_b = as_float((int)p[16]), h_a = as_float((int)p[17]), h_b = as_float((int)p[18]);                       \
  const float clip = as_float((int)p[19]);                                                                               \
  __global const float* P = wts + p[5];                                                                                  \
  const int has_p = 1, input_forget = (int)p[20];                                                                        \
  (void)Yh; (void)Yc; (void)yh_off; (void)yh_sb; (void)yc_off;         \
  (void)yc_sb; (void)has_yh; (void)has_yc; (void)last;                                                                   \
  RNN_LSTM_STEP_TILE_BODY                                                                                                \
}

// Steps [s0, s1) of the LSTM tile step in one launch (RnnKernelParams::launch): work-item i takes batch rows
// [b0 + i * nrow, + nrow) (its shard: rg row groups of RNN_MR) through every step, all tiles of a step
// before the next. No shard needs another's results, so no step waits for the device's other threads: one
// launch instead of one per step, with no wake-up of worker threads in between (ONNX Runtime's LSTM runs
// its batch-parallel threads the same way). Each shard reads all of R per step, so the host uses it on CPU
// devices where that pays (all_steps_shards in layers/rnn.cpp). A work-item reads back only states it wrote
// itself (program order), so it needs no fence. Per step the state slots and first-step inputs are the ones the host passes
// the per-step kernels: h from h0 (has_h0) or zero at step 0, else from slot (s + 1) & 1 of the state
// ([2][Bs][H] at sh_off), written into slot s & 1; c likewise (c0, sc_off). The per-element arithmetic is
// the step kernels': the same bits.
#define RNN_LSTM_STEPS_TILE(name)                                                                                        \
__kernel void name(int H, int I, int T, int s0, int s1, int reverse, int b0, int nb, int Bs, __global const int* lens, \
                   long lens_off, int fuse_input, __global const float* xw, long xw_off, long xw_st, long xw_sb,        \
                   __global const float* x, long x_off, long x_st, long x_sb, __global const float* W_, long w_off,     \
                   __global const float* bx_, long bx_off, __global const float* RT, __global float* st, long sh_off,   \
                   long sc_off, int has_h0, __global const float* h0, long h0_off, long h0_sb, int has_c0,              \
                   __global const float* c0, long c0_off, long c0_sb, __global float* Y, long y_off, long y_st,         \
                   long y_sb, int has_y, __global float* Yh, long yh_off, long yh_sb, int has_yh, __global float* Yc,   \
                   long yc_off, long yc_sb, int has_yc, float clip, int f_kind, float f_a, float f_b, int g_kind,       \
                   float g_a, float g_b, int h_kind, float h_a, float h_b, __global const float* P, int has_p,          \
                   int input_forget, int rg, int kb) {                                                                  \
  const int item_ = (int)get_global_id(0), nt_ = (H + RNN_TW - 1) / RNN_TW;                                             \
  if (item_ * RNN_MR * clamp(rg, 1, RNN_RGMAX) >= nb) return;                                                           \
  for (int s = s0; s < s1; ++s) {                                                                                        \
    const int first = s == 0, last = s == T - 1, zero_prev = first && !has_h0, zero_c = first && !has_c0;               \
    __global const float* hp = first && has_h0 ? h0 : st;                                                               \
    const long hp_off = first && has_h0 ? h0_off : sh_off + (long)((s + 1) & 1) * Bs * H;                               \
    const long hp_sb = first && has_h0 ? h0_sb : H;                                                                     \
    __global const float* cp = first && has_c0 ? c0 : st;                                                               \
    const long cp_off = first && has_c0 ? c0_off : sc_off + (long)((s + 1) & 1) * Bs * H;                              \
    const long cp_sb = first && has_c0 ? c0_sb : H;                                                                     \
    __global float* hn = st;                                                                                             \
    __global float* cn = st;                                                                                             \
    const long hn_off = sh_off + (long)(s & 1) * Bs * H, cn_off = sc_off + (long)(s & 1) * Bs * H;                     \
    for (int tn_ = 0; tn_ < nt_; ++tn_) {                                                                                \
      __global const float* W = W_;                                                                                      \
      __global const float* bx = bx_;                                                                                    \
      RNN_LSTM_STEP_TILE_BODY                                                                                            \
    }                                                                                                                    \
  }                                                                                                                      \
}

// One kernel per rows-per-work-item (lstm_step_tile_m1 / _m2 / _m4, lstm_wave_tile_m*, lstm_steps_tile_m*): the host
// picks by batch size.
#undef RNN_MR
#define RNN_MR 1
RNN_LSTM_STEP_TILE(lstm_step_tile_m1)
RNN_LSTM_WAVE_TILE(lstm_wave_tile_m1)
#undef RNN_MR
#define RNN_MR 2
RNN_LSTM_STEP_TILE(lstm_step_tile_m2)
RNN_LSTM_WAVE_TILE(lstm_wave_tile_m2)
#undef RNN_MR
#define RNN_MR 4
RNN_LSTM_STEP_TILE(lstm_step_tile_m4)
RNN_LSTM_WAVE_TILE(lstm_wave_tile_m4)
#undef RNN_STEP_N
#undef RNN_STEP_ITEM
#define RNN_STEP_N tn_
#define RNN_STEP_ITEM item_
#undef RNN_MR
#define RNN_MR 1
RNN_LSTM_STEPS_TILE(lstm_steps_tile_m1)
#undef RNN_MR
#define RNN_MR 2
RNN_LSTM_STEPS_TILE(lstm_steps_tile_m2)
#undef RNN_MR
#define RNN_MR 4
RNN_LSTM_STEPS_TILE(lstm_steps_tile_m4)
#undef RNN_STEP_N
#undef RNN_STEP_ITEM
#define RNN_STEP_N rnn_step_tile(s)
#define RNN_STEP_ITEM (int)get_global_id(0)

// Input projection x_t W^T + bias for steps [t0, t0 + nrows / nb) and batch items [b0, b0 + nb), all
// NG gates of one direction, with the same per-element order as the fused step kernels. Rows q of the
// GEMM are (t, b) pairs, rg groups of RNN_PMR per work-item, k-blocked as in the step (RNN_KB_ACC: a
// block of a tile's weights serves all the work-item's rows from L1). NDRange: dimension 0 = work-items
// of a block of rows, 1 = tiles, 2 = row blocks: a block's x rows stay in cache while every tile of W
// passes over them, so W is read from memory once per block.
#define RNN_PROWS (RNN_PMR * RNN_RGMAX)
#define RNN_PXROW(i) xrow[i]
#define RNN_PROJECT_TILE(name, NG)                                                                                \
  __kernel void name(int H, int I, int nrows, int nb, int b0, int t0, __global const float* x, long x_off,        \
                     long x_st, long x_sb, __global const float* Wt, long w_off, __global const float* bx,        \
                     long bx_off, __global float* xw, long xw_off, long xw_st, long xw_sb, int rg, int kb) {      \
    const int n = get_global_id(1), j0 = n * RNN_TW;                                                              \
    const int nrg = clamp(rg, 1, RNN_RGMAX), kbl = max(kb, 1), nrow = RNN_PMR * nrg;                              \
    const int q0 = (int)(get_global_id(2) * get_global_size(0) + get_global_id(0)) * nrow;                       \
    if (j0 >= H || q0 >= nrows) return;                                                                           \
    const int nu = min(RNN_TW, H - j0);                                                                           \
    __global const float* xrow[RNN_PROWS];                                                                        \
    long orow[RNN_PROWS];                                                                                         \
    for (int i = 0; i < nrow; ++i) {                                                                              \
      const int q = min(q0 + i, nrows - 1), t = t0 + q / nb, b = b0 + q % nb;                                     \
      xrow[i] = x + x_off + (long)t * x_st + (long)b * x_sb;                                                      \
      orow[i] = xw_off + (long)t * xw_st + (long)b * xw_sb;                                                       \
    }                                                                                                             \
    RNN_ZERO_ROWS(acc, RNN_PROWS, NG)                                                                             \
    RNN_KB_ACC(acc, RNN_PMR, NG, nrg, I, kbl, Wt + w_off + (long)n * I * (NG * RNN_TW), RNN_PXROW)               \
    for (int i = 0; i < nrow; ++i) {                                                                              \
      if (q0 + i >= nrows) break;                                                                                 \
      _Pragma("unroll") for (int g = 0; g < NG; ++g)                                                              \
        rnn_storet_nt(acc[i][g] + rnn_loadt(bx + bx_off + g * H + j0, nu), xw + orow[i] + g * H + j0, nu);       \
    }                                                                                                             \
    CLDL_NT_FENCE();                                                                                              \
  }

RNN_PROJECT_TILE(lstm_project_tile, 4)
