// LSTM and GRU training (layers/rnn_backward.cpp): a forward step that saves what the backward needs, the fused
// step backward (gate derivatives and the cell / hidden state gradient carried one step back in one launch per
// step), the initial states' gradients. The recurrent products of each step (R h forward, dG R backward), the
// weight, input and bias gradients are GEMMs (layers/gemm.hpp). f32, fp32 accumulation; every kernel gathers (one
// work-item per element written, no atomics): the same bits every run.
//
// Layouts (ONNX): cell 0 = LSTM (gates i, o, f, c~), 1 = GRU with linear_before_reset (z, r, h~), 2 = GRU without
// (h~ from Rh (r h): r first, by rnn_gru_reset, then that product by a GEMM). G = gates * H.
// Rows: the step t, batch b of X [T, B, I] (layout 0: row t * B + b) or [B, T, I] (layout 1: row b * T + t).
// S (saved) [D, rows, G + 2H]: per row the gate activations (G), the hidden state the step read (H), and the
// cell state the step read (LSTM) or Rh h + Rbh (GRU, linear_before_reset) (H).
// Direction d runs backwards in time when d == 1 (bidirectional) or rev0 (direction "reverse").
// Launches: global (H, B, D); s is the step in the direction's processing order.

inline long row_of(int layout, int T, int B, int t, int b) { return layout ? (long)b * T + t : (long)t * B + b; }
inline int time_of(int rev, int T, int s) { return rev ? T - 1 - s : s; }
inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp(-x)); }
// [D, B, H] (layout 0) or [B, D, H] (layout 1): initial and final states.
inline long state_at(int layout, int D, int B, int H, int d, int b, int j) {
  return layout ? ((long)b * D + d) * H + j : ((long)d * B + b) * H + j;
}
// Y: [T, D, B, H] (layout 0) or [B, T, D, H] (layout 1).
inline long y_at(int layout, int T, int D, int B, int H, int t, int d, int b, int j) {
  return layout ? (((long)b * T + t) * D + d) * H + j : (((long)t * D + d) * B + b) * H + j;
}

// The first step's saved states: initial_h / initial_c, or zeros.
__kernel void rnn_train_init(int cell, int T, int B, int H, int G, int layout, int D, int rev0,
                             __global const float* h0, long h0_off, int has_h0, __global const float* c0, long c0_off,
                             int has_c0, __global float* S, long S_off) {
  const int j = get_global_id(0), b = get_global_id(1), d = get_global_id(2);
  const int t = time_of(d == 1 || rev0, T, 0);
  __global float* srow = S + S_off + ((long)d * T * B + row_of(layout, T, B, t, b)) * (G + 2 * H);
  const long at = state_at(layout, D, B, H, d, b, j);
  srow[G + j] = has_h0 ? h0[h0_off + at] : 0.0f;
  if (cell == 0) srow[G + H + j] = has_c0 ? c0[c0_off + at] : 0.0f;
}

// Step s of every direction: the gates from x W^T (xw, computed for all steps by one GEMM), the biases and R h
// (rec [D, B, G], this step's GEMM). Writes the gates (and GRU's Rh h + Rbh) into its own row of S, the new states
// into the next step's row (or the final state outputs), and Y.
__kernel void rnn_train_step(int cell, int T, int B, int H, int G, int layout, int D, int rev0, int s,
                             __global const float* xw, long xw_off, __global const float* rec, long rec_off,
                             __global const float* bias, long b_off, int has_bias,
                             __global const float* restrict S_in, __global float* restrict S, long S_off,
                             __global float* Y, long Y_off, int has_y, __global float* Yh, long Yh_off, int has_yh,
                             __global float* Yc, long Yc_off, int has_yc) {
  const int j = get_global_id(0), b = get_global_id(1), d = get_global_id(2);
  const int rev = d == 1 || rev0, t = time_of(rev, T, s), W = G + 2 * H;
  // S_in and S are the same buffer: the step reads the states of its own row through S_in and writes the gates
  // of its row and the states of the next one through S, disjoint elements (restrict: no reload after stores).
  __global float* srow = S + S_off + ((long)d * T * B + row_of(layout, T, B, t, b)) * W;
  __global const float* sin = S_in + S_off + ((long)d * T * B + row_of(layout, T, B, t, b)) * W;
  __global const float* xr = xw + xw_off + ((long)d * T * B + row_of(layout, T, B, t, b)) * G;
  __global const float* rh = rec + rec_off + ((long)d * B + b) * G;
  __global const float* bd = bias + b_off + (long)d * 2 * G;
  float h, c = 0.0f;
  if (cell == 0) {
    // No private array: PoCL keeps one per work-item in memory (a 6x slower step when a[4] held these).
    const float bi = has_bias ? bd[j] + bd[G + j] : 0.0f, bo = has_bias ? bd[H + j] + bd[G + H + j] : 0.0f,
                bf = has_bias ? bd[2 * H + j] + bd[G + 2 * H + j] : 0.0f,
                bc = has_bias ? bd[3 * H + j] + bd[G + 3 * H + j] : 0.0f;
    const float i = sigmoid_f(xr[j] + rh[j] + bi), o = sigmoid_f(xr[H + j] + rh[H + j] + bo),
                f = sigmoid_f(xr[2 * H + j] + rh[2 * H + j] + bf), cc = tanh(xr[3 * H + j] + rh[3 * H + j] + bc);
    c = f * sin[G + H + j] + i * cc;
    h = o * tanh(c);
    srow[j] = i;
    srow[H + j] = o;
    srow[2 * H + j] = f;
    srow[3 * H + j] = cc;
  } else {
    const float z = sigmoid_f(xr[j] + rh[j] + (has_bias ? bd[j] + bd[G + j] : 0.0f));
    const float r = sigmoid_f(xr[H + j] + rh[H + j] + (has_bias ? bd[H + j] + bd[G + H + j] : 0.0f));
    // Rh h + Rbh (cell 1), Rh (r h) + Rbh (cell 2: rec's h~ block holds Rh (r h) then, r h is in S already).
    const float lin = rh[2 * H + j] + (has_bias ? bd[G + 2 * H + j] : 0.0f);
    const float hh = tanh(xr[2 * H + j] + (has_bias ? bd[2 * H + j] : 0.0f) + (cell == 1 ? r * lin : lin));
    h = (1.0f - z) * hh + z * sin[G + j];
    srow[j] = z;
    srow[H + j] = r;
    srow[2 * H + j] = hh;
    if (cell == 1) srow[G + H + j] = lin;
  }
  if (s + 1 < T) {
    __global float* next = S + S_off + ((long)d * T * B + row_of(layout, T, B, time_of(rev, T, s + 1), b)) * W;
    next[G + j] = h;
    if (cell == 0) next[G + H + j] = c;
  } else {
    const long at = state_at(layout, D, B, H, d, b, j);
    if (has_yh) Yh[Yh_off + at] = h;
    if (has_yc) Yc[Yc_off + at] = c;
  }
  if (has_y) Y[Y_off + y_at(layout, T, D, B, H, t, d, b, j)] = h;
}

// GRU without linear_before_reset, step s: r h of the step into S (before the GEMM Rh (r h) and rnn_train_step).
__kernel void rnn_gru_reset(int T, int B, int H, int G, int layout, int rev0, int s, __global const float* xw,
                            long xw_off, __global const float* rec, long rec_off, __global const float* bias, long b_off,
                            int has_bias, __global float* S, long S_off) {
  const int j = get_global_id(0), b = get_global_id(1), d = get_global_id(2);
  const long row = (long)d * T * B + row_of(layout, T, B, time_of(d == 1 || rev0, T, s), b);
  __global float* srow = S + S_off + row * (G + 2 * H);
  __global const float* bd = bias + b_off + (long)d * 2 * G;
  const float r = sigmoid_f(xw[xw_off + row * G + H + j] + rec[rec_off + ((long)d * B + b) * G + H + j] +
                            (has_bias ? bd[H + j] + bd[G + H + j] : 0.0f));
  srow[G + H + j] = r * srow[G + j];
}

// Step s of the backward (s from T - 1 down to 0): dh = dY_t (+ dY_h at the last step) + what step s + 1 sends
// back (dhrec [D, B, H] = dGR of step s + 1 times R, a GEMM, plus GRU's direct term z dh, the carry); then the gate
// pre-activation derivatives into dG (for W, X and Wb) and dGR (for R and Rb; GRU's h~ row differs:
// d(Rh h + Rbh) = dh~ r), and the carry: dc of the state step s read (LSTM), z dh (GRU).
__kernel void rnn_grad_step(int cell, int T, int B, int H, int G, int layout, int D, int rev0, int s,
                            __global const float* S, long S_off, __global const float* dhrec, long dhrec_off,
                            __global const float* dY, long dY_off, int has_dy, __global const float* dYh,
                            long dYh_off, int has_dyh, __global const float* dYc, long dYc_off, int has_dyc,
                            __global float* dG, long dG_off, __global float* dGR, long dGR_off,
                            __global float* carry, long carry_off) {
  const int j = get_global_id(0), b = get_global_id(1), d = get_global_id(2);
  const int rev = d == 1 || rev0, t = time_of(rev, T, s), W = G + 2 * H;
  const long row = (long)d * T * B + row_of(layout, T, B, t, b);
  __global const float* srow = S + S_off + row * W;
  __global float* cy = carry + carry_off + ((long)d * B + b) * H + j;
  float dh = has_dy ? dY[dY_off + y_at(layout, T, D, B, H, t, d, b, j)] : 0.0f, dc = 0.0f;
  if (s == T - 1) {
    const long at = state_at(layout, D, B, H, d, b, j);
    if (has_dyh) dh += dYh[dYh_off + at];
    if (has_dyc) dc = dYc[dYc_off + at];
  } else {
    dh += dhrec[dhrec_off + ((long)d * B + b) * H + j];
    if (cell == 0) dc = *cy;
    else dh += *cy;  // GRU: z dh (+ q r without linear_before_reset) of step s + 1
  }
  __global float* g = dG + dG_off + row * G;
  if (cell == 0) {
    const float i = srow[j], o = srow[H + j], f = srow[2 * H + j], cc = srow[3 * H + j], cp = srow[G + H + j];
    const float tc = tanh(f * cp + i * cc);
    dc += dh * o * (1.0f - tc * tc);
    g[j] = dc * cc * i * (1.0f - i);
    g[H + j] = dh * tc * o * (1.0f - o);
    g[2 * H + j] = dc * cp * f * (1.0f - f);
    g[3 * H + j] = dc * i * (1.0f - cc * cc);
    *cy = dc * f;
  } else {
    const float z = srow[j], r = srow[H + j], hh = srow[2 * H + j], hp = srow[G + j], rh = srow[G + H + j];
    const float dz = dh * (hp - hh) * z * (1.0f - z), dhh = dh * (1.0f - z) * (1.0f - hh * hh);
    __global float* gr = dGR + dGR_off + row * G;
    g[j] = gr[j] = dz;
    g[2 * H + j] = dhh;
    *cy = dh * z;
    if (cell == 1) {
      const float dr = dhh * rh * r * (1.0f - r);
      g[H + j] = gr[H + j] = dr;
      gr[2 * H + j] = dhh * r;
    } else {
      gr[2 * H + j] = dhh;  // r's derivative needs dh~ Rh: rnn_gru_reset_grad after a GEMM
    }
  }
}

// GRU without linear_before_reset, backward step s, after q [D, B, H] = dh~ Rh (a GEMM): d(r h) = q, so r's
// derivative dq h r (1 - r) and the hidden state's q r (added to the carry).
__kernel void rnn_gru_reset_grad(int T, int B, int H, int G, int layout, int rev0, int s, __global const float* S,
                                 long S_off, __global const float* q, long q_off, __global float* dG, long dG_off,
                                 __global float* dGR, long dGR_off, __global float* carry, long carry_off) {
  const int j = get_global_id(0), b = get_global_id(1), d = get_global_id(2);
  const long row = (long)d * T * B + row_of(layout, T, B, time_of(d == 1 || rev0, T, s), b);
  __global const float* srow = S + S_off + row * (G + 2 * H);
  const long k = ((long)d * B + b) * H + j;
  const float r = srow[H + j], qk = q[q_off + k];
  dG[dG_off + row * G + H + j] = dGR[dGR_off + row * G + H + j] = qk * srow[G + j] * r * (1.0f - r);
  carry[carry_off + k] += qk * r;
}

// The initial states' gradients, from step 0's: dhrec (step 0's dGR times R) plus GRU's carry; LSTM's carry is dc.
__kernel void rnn_grad_initial(int cell, int T, int B, int H, int G, int layout, int D, int rev0,
                               __global const float* dhrec, long dhrec_off, __global const float* carry,
                               long carry_off, __global float* dh0, long dh0_off, int has_dh0, __global float* dc0,
                               long dc0_off, int has_dc0) {
  const int j = get_global_id(0), b = get_global_id(1), d = get_global_id(2);
  const long k = ((long)d * B + b) * H + j, at = state_at(layout, D, B, H, d, b, j);
  const float cy = carry[carry_off + k];
  if (has_dh0) dh0[dh0_off + at] = dhrec[dhrec_off + k] + (cell != 0 ? cy : 0.0f);
  if (has_dc0) dc0[dc0_off + at] = cy;
}

// Rt [D, H, G] = R [D, G, H] transposed per direction (the per-step GEMM reads R^T rows contiguously). global (G, H, D).
__kernel void rnn_transpose_r(int G, int H, __global const float* R, long R_off, __global float* Rt, long Rt_off) {
  const int u = get_global_id(0), k = get_global_id(1), d = get_global_id(2);
  Rt[Rt_off + ((long)d * H + k) * G + u] = R[R_off + ((long)d * G + u) * H + k];
}

__kernel void rnn_fill(float v, __global float* x, long x_off) { x[x_off + get_global_id(0)] = v; }
