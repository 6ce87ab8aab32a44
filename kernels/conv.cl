// Convolution kernels (NCHW, fp32): direct (2-D and 3-D), depthwise, im2col, Winograd F(2x2,3x3) and
// F(4x4,3x3) input/output transforms, FFT-convolution helpers (pad, complex multiply-accumulate, crop) and direct ConvTranspose.
// All geometry is a runtime int16 argument so one program build (per -DACT) serves every shape; only
// the fused activation is a build-time macro (ACT, see common.cl). The direct, small-plane, grouped-rows and
// Winograd output kernels take a residual `res` (the output's layout, has_res 1): y = act(conv + bias + res),
// a residual Add fused into the epilogue; has_res 0 never reads it.

// Geometry vector `g`, filled by layers/conv.cpp (conv_geometry_arg). For ConvTranspose, C/H/W describe
// the input and K/OH/OW the output, as for Conv.
#define G_C g.s0
#define G_H g.s1
#define G_W g.s2
#define G_K g.s3
#define G_OH g.s4
#define G_OW g.s5
#define G_KH g.s6
#define G_KW g.s7
#define G_SH g.s8
#define G_SW g.s9
#define G_PT g.sa
#define G_PL g.sb
#define G_DH g.sc
#define G_DW g.sd
#define G_CG g.se  // input channels per group
#define G_KG g.sf  // output channels per group

// The n leading floats of p as a vector, zeros after them (a row's last, partial strip; n <= 0: all zeros, p
// not read).
inline float8 load8_upto(__global const float* p, int n) {
  if (n >= 8) return vload8(0, p);
  float t[8];
  for (int j = 0; j < 8; ++j) t[j] = j < n ? p[j] : 0.0f;
  return vload8(0, t);
}
inline float16 load16_upto(__global const float* p, int n) {
  if (n >= 16) return vload16(0, p);
  float t[16];
  for (int j = 0; j < 16; ++j) t[j] = j < n ? p[j] : 0.0f;
  return vload16(0, t);
}

// Output channels per work-item in the direct kernel: each input load is reused K_BLOCK times, while
// neighbouring work-items (along OW) read neighbouring pixels, which PoCL and GPUs vectorise/coalesce
// across the work-group. Any value >= 1 is correct.
#ifndef K_BLOCK
#define K_BLOCK 8
#endif

// Direct convolution, any stride/pad/dilation/groups. Blocks of K_BLOCK output channels never cross a
// group. Global (OW, OH, N * groups * ceil(KG / K_BLOCK)).
__kernel void conv_direct(int16 g, __global const float* x, long x_off, __global const float* w, long w_off,
                          __global const float* bias, long b_off, int has_bias, __global const float* res,
                          long r_off, int has_res, __global float* y, long y_off, float act_a, float act_b) {
  const int ow = get_global_id(0);
  const int oh = get_global_id(1);
  if (ow >= G_OW || oh >= G_OH) return;
  const int groups = G_C / G_CG;
  const int bpg = (G_KG + K_BLOCK - 1) / K_BLOCK;  // blocks per group
  const int z = get_global_id(2);
  const int n = z / (groups * bpg), grp = (z / bpg) % groups, blk = z % bpg;
  const int k0 = grp * G_KG + blk * K_BLOCK;
  const int nk = min(K_BLOCK, G_KG - blk * K_BLOCK);
  x += x_off + ((long)n * G_C + (long)grp * G_CG) * G_H * G_W;
  w += w_off + (long)k0 * G_CG * G_KH * G_KW;
  const int wk = G_CG * G_KH * G_KW;  // weight stride between output channels
  float acc[K_BLOCK];
  for (int i = 0; i < K_BLOCK; ++i) acc[i] = 0.0f;
  const int ih0 = oh * G_SH - G_PT, iw0 = ow * G_SW - G_PL;
  for (int c = 0; c < G_CG; ++c) {
    __global const float* xc = x + (long)c * G_H * G_W;
    for (int kh = 0; kh < G_KH; ++kh) {
      const int ih = ih0 + kh * G_DH;
      if (ih < 0 || ih >= G_H) continue;
      for (int kw = 0; kw < G_KW; ++kw) {
        const int iw = iw0 + kw * G_DW;
        if (iw < 0 || iw >= G_W) continue;
        const float xv = xc[(long)ih * G_W + iw];
        __global const float* wt = w + (c * G_KH + kh) * G_KW + kw;
        // Channels past nk repeat the last valid one (results discarded) so the loop has no branch.
        for (int i = 0; i < K_BLOCK; ++i) acc[i] = fma(xv, wt[min(i, nk - 1) * wk], acc[i]);
      }
    }
  }
  for (int i = 0; i < K_BLOCK; ++i) {
    if (i >= nk) break;
    const int k = k0 + i;
    const float b = has_bias ? bias[b_off + k] : 0.0f;
    const long yi = (((long)n * G_K + k) * G_OH + oh) * G_OW + ow;
    y[y_off + yi] = APPLY_ACT(acc[i] + b + (has_res ? res[r_off + yi] : 0.0f), act_a, act_b);
  }
}

// Grouped convolution for CPUs (RegNet's and ResNeXt's groups of 8 to 64 channels; small dense ones too): a
// work-item per (output row, n, group, block of 8 output channels of the group) computes the row in strips
// of 8 outputs, the 8 channels' accumulators in registers, so each tap's 8 inputs (one vector load inside
// the row, a gather with zeros at its edges) serve 8 FMAs. Channels past the group's end repeat its last one
// (computed, not stored). im2col + a GEMM per group made 28-56 launches of 8-row GEMMs per RegNet layer.
// Global (OH, N * groups * ceil(KG / 8)), padded.
inline float8 gr_taps(int16 g, __global const float* row, int iw) {
  // Inputs iw, iw + SW, ... iw + 7 * SW of a row: a vector load where all 8 (16 at stride 2) are inside.
  if (iw >= 0) {
    if (G_SW == 1 && iw + 8 <= G_W) return vload8(0, row + iw);
    if (G_SW == 2 && iw + 16 <= G_W) return vload16(0, row + iw).even;
  }
  float v[8];
  for (int j = 0; j < 8; ++j) {
    const int c = iw + j * G_SW;
    v[j] = c >= 0 && c < G_W ? row[c] : 0.0f;
  }
  return vload8(0, v);
}

__kernel void conv_grouped_rows(int16 g, int z_total, __global const float* x, long x_off, __global const float* w,
                                long w_off, __global const float* bias, long b_off, int has_bias,
                                __global const float* res, long r_off, int has_res, __global float* y, long y_off,
                                float act_a, float act_b) {
  const int oh = get_global_id(0);
  const int z = get_global_id(1);
  if (oh >= G_OH || z >= z_total) return;
  const int groups = G_C / G_CG, kbs = (G_KG + 7) / 8;
  const int n = z / (groups * kbs), grp = (z / kbs) % groups, kb = z % kbs;
  const int k0 = grp * G_KG + kb * 8;
  const int nk = min(8, G_KG - kb * 8);
  const int wk = G_CG * G_KH * G_KW;  // weight stride between output channels
  x += x_off + ((long)n * G_C + (long)grp * G_CG) * G_H * G_W;
  w += w_off + (long)k0 * wk;
  y += y_off + ((long)n * G_K + k0) * G_OH * G_OW + (long)oh * G_OW;
  res += r_off + ((long)n * G_K + k0) * G_OH * G_OW + (long)oh * G_OW;
  int woff[8];
  float8 b[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    woff[i] = min(i, nk - 1) * wk;
    b[i] = (float8)(has_bias ? bias[b_off + k0 + min(i, nk - 1)] : 0.0f);
  }
  const int ih0 = oh * G_SH - G_PT;
  for (int s = 0; s < G_OW; s += 8) {
    // The last strip ends at the row's end (overlapping the one before) when the row has 8 outputs or more.
    const int ow0 = G_OW >= 8 ? min(s, G_OW - 8) : 0;
    const int iw0 = ow0 * G_SW - G_PL;
    float8 acc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = (float8)(0.0f);
    for (int c = 0; c < G_CG; ++c) {
      for (int kh = 0; kh < G_KH; ++kh) {
        const int ih = ih0 + kh * G_DH;
        if (ih < 0 || ih >= G_H) continue;
        __global const float* row = x + ((long)c * G_H + ih) * G_W;
        __global const float* wt = w + (c * G_KH + kh) * G_KW;
        for (int kw = 0; kw < G_KW; ++kw) {
          const float8 v = gr_taps(g, row, iw0 + kw * G_DW);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i] = fma(v, (float8)(wt[woff[i] + kw]), acc[i]);
        }
      }
    }
    const int cols = min(8, G_OW);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (i >= nk) break;
      __global float* out = y + (long)i * G_OH * G_OW + ow0;
      float8 o = acc[i] + b[i];
      if (has_res) o += load8_upto(res + (long)i * G_OH * G_OW + ow0, cols);
#if ACT_VEC
      o = APPLY_ACT_V(o, act_a, act_b);
#endif
      if (cols == 8) {
#if ACT_VEC
        vstore8(o, 0, out);
#else
        float t[8];
        vstore8(o, 0, t);
        for (int j = 0; j < 8; ++j) out[j] = APPLY_ACT(t[j], act_a, act_b);
#endif
      } else {
        float t[8];
        vstore8(o, 0, t);
        for (int j = 0; j < cols; ++j) out[j] = ACT_VEC ? t[j] : APPLY_ACT(t[j], act_a, act_b);
      }
    }
  }
}

// Grouped convolution for CPUs, specialised by build macros (GB_CG input channels per group, at most 16;
// GB_KH x GB_KW kernel; GB_S stride in both axes, 1 or 2; no dilation): a work-item per (n, group, block of 8
// output channels of the group, band of `rows` output rows). It first copies the band's input (the group's
// channels, zero-padded) into private memory as GB_S x GB_S phase planes per channel, plane (pr, pc) holding
// padded input row S * (oh0 + rr) + pr and column S * j + pc at rr * pitch + j, so every tap (kh, kw) of an
// output (r, ow) reads plane (kh % S, kw % S) at (r + kh / S) * pitch + ow + kw / S: one float16 load per tap
// for 16 outputs of a row, whatever the stride and the padding. Rows are taken in pairs, so each broadcast
// weight feeds two FMAs (16 float16 accumulators: 8 channels x 2 rows). Strips of 16 outputs along the row,
// the last one ending at the row's end (overlapping the one before; rows under 16 outputs store their lanes).
// Channels past the group's end repeat its last one (computed, not stored). Against conv_grouped_rows (float8
// strips, runtime geometry, gathers at the edges) 17-30 -> 100+ GFLOP/s on RegNet's layers.
// Global (total = N * groups * ceil(KG / 8) * bands), padded.
#ifdef GB_CG
#ifndef GB_DW
#define GB_DW 0  // 1: depthwise (GB_CG 8: a block of 8 channels, each its own group)
#endif
#define GB_PRIVATE 8192  // floats of the private copy (32 KiB); ConvOp::create sizes the bands to fit
__kernel void conv_grouped_band(int16 g, int total, int rows, int bands, int pitch, int prow,
                                __global const float* x, long x_off, __global const float* w, long w_off,
                                __global const float* bias, long b_off, int has_bias, __global const float* res,
                                long r_off, int has_res, __global float* y, long y_off, float act_a, float act_b) {
  const int id = get_global_id(0);
  if (id >= total) return;
#if GB_DW
  // Depthwise: a block of 8 channels (groups of one), each output channel from its own input plane; channels
  // past the last one repeat it (computed, not stored).
  const int groups = (G_C + 7) / 8, kbs = 1;
#else
  const int groups = G_C / GB_CG, kbs = (G_KG + 7) / 8;
#endif
  const int band = id % bands, kb = (id / bands) % kbs, grp = (id / (bands * kbs)) % groups;
  const int n = id / (bands * kbs * groups);
  const int oh0 = band * rows, nr = min(rows, G_OH - oh0);
#if GB_DW
  const int k0 = grp * 8;
  const int nk = min(8, G_C - k0);
  x += x_off + ((long)n * G_C + k0) * G_H * G_W;
#else
  const int k0 = grp * G_KG + kb * 8;
  const int nk = min(8, G_KG - kb * 8);
  x += x_off + ((long)n * G_C + (long)grp * GB_CG) * G_H * G_W;
#endif
  // prow: rows of each phase plane (nr + (KH - 1) / S at most); plane length prow * pitch.
  const int plen = prow * pitch;
  __private float xs[GB_PRIVATE + 16];
  // Phase column pc: dst[j] = src[S * j + pc - PL] for the j whose column lies in the row, j in [j0, j0 + cnt).
  int j0[GB_S], cnt[GB_S];
  for (int pc = 0; pc < GB_S; ++pc) {
    j0[pc] = max(0, (G_PL - pc + GB_S - 1) / GB_S);
    const int last = G_W - 1 - pc + G_PL;  // the padded column of the row's last element
    cnt[pc] = last < 0 ? 0 : max(0, min(pitch, last / GB_S + 1) - j0[pc]);
  }
  for (int c = 0; c < GB_CG; ++c)
    for (int pr = 0; pr < GB_S; ++pr)
      for (int rr = 0; rr < prow; ++rr) {
        const int ih = GB_S * (oh0 + rr) + pr - G_PT;
        if (ih < 0 || ih >= G_H) {  // a padding row
          for (int pc = 0; pc < GB_S; ++pc) {
            float* z = xs + ((c * GB_S + pr) * GB_S + pc) * plen + rr * pitch;
            for (int j = 0; j < pitch; ++j) z[j] = 0.0f;
          }
          continue;
        }
#if GB_DW
        __global const float* row = x + ((long)min(c, nk - 1) * G_H + ih) * G_W;
#else
        __global const float* row = x + ((long)c * G_H + ih) * G_W;
#endif
        for (int pc = 0; pc < GB_S; ++pc) {
          float* z = xs + ((c * GB_S + pr) * GB_S + pc) * plen + rr * pitch;  // the padding columns
          for (int j = 0; j < j0[pc]; ++j) z[j] = 0.0f;
          for (int j = j0[pc] + cnt[pc]; j < pitch; ++j) z[j] = 0.0f;
          float* dst = z + j0[pc];
          __global const float* src = row + GB_S * j0[pc] + pc - G_PL;
          const int m = cnt[pc];
          // Vector chunks whose source span lies inside the row, the last one ending at the run's end
          // (overlapping the one before); what is left (a stride-2 run whose last span would pass the row's
          // end by one) element by element.
          int q = 0;
#if GB_S == 1
#define GB_CHUNK(V)                                                                          \
  if (m >= V) {                                                                              \
    for (; q + V <= m; q += V) vstore##V(vload##V(0, src + q), 0, dst + q);                  \
    if (q < m) vstore##V(vload##V(0, src + m - V), 0, dst + m - V);                           \
    q = m;                                                                                   \
  }
#else
          const int lim = G_W - (GB_S * j0[pc] + pc - G_PL);  // floats of the row from src on
#define GB_CHUNK(V)                                                                          \
  if (m - q >= V) {                                                                          \
    for (; q + V <= m && 2 * (q + V) <= lim; q += V) {                                       \
      const float##V a_ = vload##V(0, src + 2 * q), b_ = vload##V(0, src + 2 * q + V);        \
      vstore##V((float##V)(a_.even, b_.even), 0, dst + q);                                   \
    }                                                                                        \
    if (q < m && m >= V && 2 * m <= lim) {                                                   \
      const float##V a_ = vload##V(0, src + 2 * (m - V)), b_ = vload##V(0, src + 2 * (m - V) + V); \
      vstore##V((float##V)(a_.even, b_.even), 0, dst + m - V);                               \
      q = m;                                                                                 \
    }                                                                                        \
  }
#endif
          GB_CHUNK(16)
          GB_CHUNK(8)
          GB_CHUNK(4)
#undef GB_CHUNK
          for (; q < m; ++q) dst[q] = src[GB_S * q];
        }
      }
  // The weights padded by ConvOp::create to blocks of 8 output channels (zeros past a group's end), so the 8
  // channels of a block lie at constant offsets from one pointer: [groups][blocks][8][CG * KH * KW].
#define GB_WK ((GB_DW ? 1 : GB_CG) * GB_KH * GB_KW)  // weight stride between output channels
  __global const float* wb = w + w_off + (long)(grp * kbs + kb) * 8 * GB_WK;
  float16 bv[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) bv[i] = (float16)(has_bias ? bias[b_off + k0 + min(i, nk - 1)] : 0.0f);
  const long plane_out = (long)G_OH * G_OW;
  y += y_off + ((long)n * G_K + k0) * plane_out;
  res += r_off + ((long)n * G_K + k0) * plane_out;
  const int cols = min(16, G_OW);
  for (int r = 0; r < nr; r += 2) {
    const int r1 = min(r + 1, nr - 1);  // an odd last row pairs with itself (computed twice, stored once)
    for (int s = 0; s < G_OW; s += 16) {
      const int ow0 = G_OW >= 16 ? min(s, G_OW - 16) : 0;
      float16 a0[8], a1[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) a0[i] = a1[i] = (float16)(0.0f);
#if GB_DW
#pragma unroll
      for (int kh = 0; kh < GB_KH; ++kh)
#pragma unroll
        for (int kw = 0; kw < GB_KW; ++kw)
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const float* pl = xs + ((i * GB_S + kh % GB_S) * GB_S + kw % GB_S) * plen + kh / GB_S * pitch + kw / GB_S + ow0;
            const float wv = wb[i * GB_WK + kh * GB_KW + kw];
            a0[i] = fma(vload16(0, pl + r * pitch), (float16)(wv), a0[i]);
            a1[i] = fma(vload16(0, pl + r1 * pitch), (float16)(wv), a1[i]);
          }
#else
      // The channel loop stays a loop (its body, KH x KW taps of 16 FMAs, is unrolled): unrolled too, Intel's
      // OpenCL CPU compiler took minutes per build (the conv tests 131 -> 829 s there).
#pragma unroll 1
      for (int c = 0; c < GB_CG; ++c)
#pragma unroll
        for (int kh = 0; kh < GB_KH; ++kh)
#pragma unroll
          for (int kw = 0; kw < GB_KW; ++kw) {
            const float* pl = xs + ((c * GB_S + kh % GB_S) * GB_S + kw % GB_S) * plen + kh / GB_S * pitch + kw / GB_S + ow0;
            const float16 v0 = vload16(0, pl + r * pitch), v1 = vload16(0, pl + r1 * pitch);
            const int t = (c * GB_KH + kh) * GB_KW + kw;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              const float wv = wb[i * GB_WK + t];
              a0[i] = fma(v0, (float16)(wv), a0[i]);
              a1[i] = fma(v1, (float16)(wv), a1[i]);
            }
          }
#endif
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (i >= nk) break;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (h == 1 && r1 == r) break;
          const int oh = oh0 + (h ? r1 : r);
          __global float* out = y + (long)i * plane_out + (long)oh * G_OW + ow0;
          float16 o = (h ? a1[i] : a0[i]) + bv[i];
          if (has_res) o += load16_upto(res + (long)i * plane_out + (long)oh * G_OW + ow0, cols);
#if ACT_VEC
          o = APPLY_ACT_V(o, act_a, act_b);
          if (cols == 16) {
            vstore16(o, 0, out);
            continue;
          }
#endif
          float t_[16];
          vstore16(o, 0, t_);
          for (int j = 0; j < cols; ++j) out[j] = ACT_VEC ? t_[j] : APPLY_ACT(t_[j], act_a, act_b);
        }
      }
    }
  }
}
#endif

// Small output planes on CPUs (the digits CNN's 8x8 and 4x4 maps at batch 450; late stages of small
// models): an implicit GEMM per image. A work-item computes 8 output pixels x 16 * SP_KV output channels;
// for each tap and input channel it loads the channels' weights as SP_KV vectors (weights transposed at
// create to [C*KH*KW][kpad], kpad = K rounded up to 16 * SP_KV with zeros) and broadcasts each pixel's
// input into SP_KV float16 FMAs, so the accumulators stay in registers. No im2col matrix, no per-image GEMM of 16..64 columns,
// no Winograd tiles that are mostly padding. Planes of fewer than 8 pixels mask the rest; otherwise the
// last tile ends at the plane's end (overlapping the one before). Group 1, any stride / pad / dilation.
// Global (total = N * ceil(P / 8) * kpad / (16 * SP_KV)), padded; id = (n * tiles + tile) * kbs + kb.
#ifndef SP_KV
#define SP_KV 1  // float16 vectors of output channels per work-item: 1 or 2 (16 or 32 channels)
#endif
// SP_POOL 1: a MaxPool 2x2 / 2 (floor) after the activation. A tile's 8 pixels are then the 2x2 windows of pooled
// outputs 2t and 2t + 1 (the offsets table says which pixels), and the epilogue writes their maxima.
#ifndef SP_POOL
#define SP_POOL 0
#endif
__kernel void conv_small_plane(int16 g, int total, __global const float* x, long x_off, __global const float* wt,
                               long w_off, int kpad, __global const int* offs, long o_off, __global const float* bias,
                               long b_off, int has_bias, __global const float* res, long r_off, int has_res,
                               __global float* y, long y_off, float act_a, float act_b) {
  const int id = get_global_id(0);
  if (id >= total) return;
#if SP_POOL
  const int P = (G_OH / 2) * (G_OW / 2), tiles = (P + 1) / 2, kbs = kpad / (16 * SP_KV);
#else
  const int P = G_OH * G_OW, tiles = (P + 7) / 8, kbs = kpad / (16 * SP_KV);
#endif
  const int kb = id % kbs, t = (id / kbs) % tiles, n = id / (kbs * tiles);
  const int p0 = P >= 8 ? min(t * 8, P - 8) : 0;
  const int HW = G_H * G_W, taps = G_KH * G_KW;
  x += x_off + (long)n * G_C * HW;
  wt += w_off + kb * 16 * SP_KV;
  float16 acc[SP_KV][8];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int v = 0; v < SP_KV; ++v) acc[v][j] = (float16)(0.0f);
  for (int kh = 0; kh < G_KH; ++kh) {
    for (int kw = 0; kw < G_KW; ++kw) {
      // Where each of the tile's 8 pixels reads this tap in a channel plane, -1 in the padding or past the
      // plane: the same for every image, so a table made at create ([tiles][KH*KW][8]), not index arithmetic
      // per work-item (most of the work where C is 1).
      int off[8];
      __global const int* ot = offs + o_off + (t * taps + kh * G_KW + kw) * 8;
#pragma unroll
      for (int j = 0; j < 8; ++j) off[j] = ot[j];
      __global const float* wr = wt + (long)(kh * G_KW + kw) * kpad;
      for (int c = 0; c < G_C; ++c) {
        float16 wv[SP_KV];
#pragma unroll
        for (int v = 0; v < SP_KV; ++v) wv[v] = vload16(v, wr + (long)c * taps * kpad);
        __global const float* xc = x + (long)c * HW;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float xv = off[j] >= 0 ? xc[off[j]] : 0.0f;
#pragma unroll
          for (int v = 0; v < SP_KV; ++v) acc[v][j] = fma((float16)(xv), wv[v], acc[v][j]);
        }
      }
    }
  }
#if SP_POOL
  // Pooled outputs 2t and 2t + 1 (P is the pooled plane here): each the maximum of its window's 4 activated pixels,
  // taken on the tile's 16-channel vectors (the Pool op's comparison: a NaN never wins).
  const int q0 = 2 * t, nq = min(2, P - q0);
  y += y_off + (long)n * G_K * P + q0;
#pragma unroll
  for (int v = 0; v < SP_KV; ++v) {
    const int k0 = (kb * SP_KV + v) * 16, nk = min(16, G_K - k0);
    const float16 bv = load16_upto(bias + b_off + k0, has_bias ? nk : 0);
    for (int q = 0; q < nq; ++q) {
      float mq[16];
#if ACT_VEC
      float16 m = (float16)(-INFINITY);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float16 a = APPLY_ACT_V(acc[v][4 * q + j] + bv, act_a, act_b);
        m = select(m, a, a > m);
      }
      vstore16(m, 0, mq);
#else
      float o[4][16];
#pragma unroll
      for (int j = 0; j < 4; ++j) vstore16(acc[v][4 * q + j] + bv, 0, o[j]);
      for (int i = 0; i < 16; ++i) {
        float m = -INFINITY;
        for (int j = 0; j < 4; ++j) {
          const float a = APPLY_ACT(o[j][i], act_a, act_b);
          m = a > m ? a : m;
        }
        mq[i] = m;
      }
#endif
      for (int i = 0; i < nk; ++i) y[(long)(k0 + i) * P + q] = mq[i];
    }
  }
  return;
#endif
  const int np = min(8, P);
  y += y_off + (long)n * G_K * P + p0;
  res += r_off + (long)n * G_K * P + p0;
#pragma unroll
  for (int v = 0; v < SP_KV; ++v) {
    const int k0 = (kb * SP_KV + v) * 16, nk = min(16, G_K - k0);
    float o[8][16];
#pragma unroll
    for (int j = 0; j < 8; ++j) vstore16(acc[v][j], 0, o[j]);
    for (int i = 0; i < nk; ++i) {
      const float b = has_bias ? bias[b_off + k0 + i] : 0.0f;
      __global float* yk = y + (long)(k0 + i) * P;
      __global const float* rk = res + (long)(k0 + i) * P;
#if ACT_VEC
      if (np == 8) {  // a channel's 8 pixels are contiguous: one vector store
        float8 s = (float8)(o[0][i], o[1][i], o[2][i], o[3][i], o[4][i], o[5][i], o[6][i], o[7][i]) + b;
        if (has_res) s += vload8(0, rk);
        vstore8(APPLY_ACT_V(s, act_a, act_b), 0, yk);
        continue;
      }
#endif
      for (int j = 0; j < np; ++j) yk[j] = APPLY_ACT(o[j][i] + b + (has_res ? rk[j] : 0.0f), act_a, act_b);
    }
  }
}

// Direct 3-D convolution, any stride/pad/dilation/groups: weight [K, C/groups, KD, KH, KW], one output
// per work-item. depth = (D, OD, KD, SD, DD, PF): input depth, output depth, kernel depth, its stride,
// dilation and front padding (the 2-D geometry `g` covers H and W). Global (OW, OH, N * K * OD).
__kernel void conv_direct3d(int16 g, int8 depth, __global const float* x, long x_off, __global const float* w,
                            long w_off, __global const float* bias, long b_off, int has_bias, __global float* y,
                            long y_off, float act_a, float act_b) {
  const int D = depth.s0, OD = depth.s1, KD = depth.s2, SD = depth.s3, DD = depth.s4, PF = depth.s5;
  const int ow = get_global_id(0);
  const int oh = get_global_id(1);
  const int z = get_global_id(2);
  if (ow >= G_OW || oh >= G_OH) return;
  const int od = z % OD, nk = z / OD;
  const int n = nk / G_K, k = nk % G_K;
  const int grp = k / G_KG;
  const int id0 = od * SD - PF, ih0 = oh * G_SH - G_PT, iw0 = ow * G_SW - G_PL;
  float acc = 0.0f;
  for (int cl = 0; cl < G_CG; ++cl) {
    __global const float* xc = x + x_off + ((long)n * G_C + grp * G_CG + cl) * D * G_H * G_W;
    __global const float* wc = w + w_off + ((long)k * G_CG + cl) * KD * G_KH * G_KW;
    for (int kd = 0; kd < KD; ++kd) {
      const int id = id0 + kd * DD;
      if (id < 0 || id >= D) continue;
      for (int kh = 0; kh < G_KH; ++kh) {
        const int ih = ih0 + kh * G_DH;
        if (ih < 0 || ih >= G_H) continue;
        for (int kw = 0; kw < G_KW; ++kw) {
          const int iw = iw0 + kw * G_DW;
          if (iw < 0 || iw >= G_W) continue;
          acc = fma(xc[((long)id * G_H + ih) * G_W + iw], wc[(kd * G_KH + kh) * G_KW + kw], acc);
        }
      }
    }
  }
  if (has_bias) acc += bias[b_off + k];
  y[y_off + (((long)nk * OD + od) * G_OH + oh) * G_OW + ow] = APPLY_ACT(acc, act_a, act_b);
}

// Depthwise convolution (groups == C == K): weight [C, 1, KH, KW]. Global (OW, OH, N*C).
__kernel void conv_depthwise(int16 g, __global const float* x, long x_off, __global const float* w, long w_off,
                             __global const float* bias, long b_off, int has_bias, __global float* y, long y_off,
                             float act_a, float act_b) {
  const int ow = get_global_id(0);
  const int oh = get_global_id(1);
  const int nc = get_global_id(2);
  if (ow >= G_OW || oh >= G_OH) return;
  const int c = nc % G_C;
  x += x_off + (long)nc * G_H * G_W;
  w += w_off + c * G_KH * G_KW;
  const int ih0 = oh * G_SH - G_PT, iw0 = ow * G_SW - G_PL;
  float acc = 0.0f;
  for (int kh = 0; kh < G_KH; ++kh) {
    const int ih = ih0 + kh * G_DH;
    if (ih < 0 || ih >= G_H) continue;
    for (int kw = 0; kw < G_KW; ++kw) {
      const int iw = iw0 + kw * G_DW;
      if (iw >= 0 && iw < G_W) acc = fma(x[(long)ih * G_W + iw], w[kh * G_KW + kw], acc);
    }
  }
  if (has_bias) acc += bias[b_off + c];
  y[y_off + (long)nc * G_OH * G_OW + oh * G_OW + ow] = APPLY_ACT(acc, act_a, act_b);
}

// Depthwise, a whole output row per work-item (CPUs, where the one-output kernel above re-reads each
// input KW times from separate work-items and checks bounds per tap). The outputs whose taps all lie
// inside the input row go in vector strips of 8 (each tap's 8 inputs one vector load: stride 1 vload8,
// stride 2 the even lanes of vload16; the last strip may overlap the one before, rewriting the same
// values); the few outputs at the edges are computed one by one with bounds checks.
// Global (OH, N*C), padded to the work-group size.
//
// The host may build the rows and plane kernels for one kernel size and stride (-DDW_KH=3 -DDW_KW=3 -DDW_SH=1
// -DDW_SW=1, dilation 1): the tap loops then unroll and the strip loads have constant offsets. Otherwise
// the runtime geometry.
#ifdef DW_KH
#define DWP_KH DW_KH
#define DWP_KW DW_KW
#define DWP_SH DW_SH
#define DWP_SW DW_SW
#define DWP_DH 1
#define DWP_DW 1
#else
#define DWP_KH G_KH
#define DWP_KW G_KW
#define DWP_SH G_SH
#define DWP_SW G_SW
#define DWP_DH G_DH
#define DWP_DW G_DW
#endif
inline void dw_strip(int16 g, __global const float* x, __global const float* w, __global float* y, int ih0, int ow0,
                     float b, float act_a, float act_b) {
  const int iw0 = ow0 * DWP_SW - G_PL;
  float8 acc = (float8)(0.0f);
  for (int kh = 0; kh < DWP_KH; ++kh) {
    const int ih = ih0 + kh * DWP_DH;
    if (ih < 0 || ih >= G_H) continue;
    __global const float* row = x + (long)ih * G_W + iw0;
    for (int kw = 0; kw < DWP_KW; ++kw) {
      const float8 v = DWP_SW == 1 ? vload8(0, row + kw * DWP_DW) : vload16(0, row + kw * DWP_DW).even;
      acc = fma(v, (float8)(w[kh * DWP_KW + kw]), acc);
    }
  }
#if ACT_VEC
  vstore8(APPLY_ACT_V(acc + b, act_a, act_b), 0, y + ow0);
#else
  float o[8];
  vstore8(acc, 0, o);
  for (int j = 0; j < 8; ++j) o[j] = APPLY_ACT(o[j] + b, act_a, act_b);
  vstore8(vload8(0, o), 0, y + ow0);
#endif
}

// Four strips (32 outputs) at once: four independent accumulator chains instead of one, whose FMA
// latency (KH*KW dependent FMAs) otherwise bounds a strip.
inline void dw_strip4(int16 g, __global const float* x, __global const float* w, __global float* y, int ih0, int ow0,
                      float b, float act_a, float act_b) {
  const int iw0 = ow0 * DWP_SW - G_PL, step = 8 * DWP_SW;
  float8 a0 = (float8)(0.0f), a1 = a0, a2 = a0, a3 = a0;
  for (int kh = 0; kh < DWP_KH; ++kh) {
    const int ih = ih0 + kh * DWP_DH;
    if (ih < 0 || ih >= G_H) continue;
    __global const float* row = x + (long)ih * G_W + iw0;
    for (int kw = 0; kw < DWP_KW; ++kw) {
      __global const float* p = row + kw * DWP_DW;
      const float8 wt = (float8)(w[kh * DWP_KW + kw]);
      if (DWP_SW == 1) {
        a0 = fma(vload8(0, p), wt, a0);
        a1 = fma(vload8(0, p + step), wt, a1);
        a2 = fma(vload8(0, p + 2 * step), wt, a2);
        a3 = fma(vload8(0, p + 3 * step), wt, a3);
      } else {
        a0 = fma(vload16(0, p).even, wt, a0);
        a1 = fma(vload16(0, p + step).even, wt, a1);
        a2 = fma(vload16(0, p + 2 * step).even, wt, a2);
        a3 = fma(vload16(0, p + 3 * step).even, wt, a3);
      }
    }
  }
#if ACT_VEC
  vstore8(APPLY_ACT_V(a0 + b, act_a, act_b), 0, y + ow0);
  vstore8(APPLY_ACT_V(a1 + b, act_a, act_b), 1, y + ow0);
  vstore8(APPLY_ACT_V(a2 + b, act_a, act_b), 2, y + ow0);
  vstore8(APPLY_ACT_V(a3 + b, act_a, act_b), 3, y + ow0);
#else
  float o[32];
  vstore8(a0, 0, o);
  vstore8(a1, 1, o);
  vstore8(a2, 2, o);
  vstore8(a3, 3, o);
  for (int j = 0; j < 32; ++j) y[ow0 + j] = APPLY_ACT(o[j] + b, act_a, act_b);
#endif
}

inline void dw_one(int16 g, __global const float* x, __global const float* w, __global float* y, int ih0, int ow,
                   float b, float act_a, float act_b) {
  const int iw0 = ow * G_SW - G_PL;
  float acc = 0.0f;
  for (int kh = 0; kh < G_KH; ++kh) {
    const int ih = ih0 + kh * G_DH;
    if (ih < 0 || ih >= G_H) continue;
    for (int kw = 0; kw < G_KW; ++kw) {
      const int iw = iw0 + kw * G_DW;
      if (iw >= 0 && iw < G_W) acc = fma(x[(long)ih * G_W + iw], w[kh * G_KW + kw], acc);
    }
  }
  y[ow] = APPLY_ACT(acc + b, act_a, act_b);
}

__kernel void conv_depthwise_rows(int16 g, int nc_total, __global const float* x, long x_off, __global const float* w,
                                  long w_off, __global const float* bias, long b_off, int has_bias, __global float* y,
                                  long y_off, float act_a, float act_b) {
  const int oh = get_global_id(0);
  const int nc = get_global_id(1);
  if (oh >= G_OH || nc >= nc_total) return;
  const int c = nc % G_C;
  x += x_off + (long)nc * G_H * G_W;
  w += w_off + c * G_KH * G_KW;
  y += y_off + (long)nc * G_OH * G_OW + oh * G_OW;
  const int ih0 = oh * G_SH - G_PT;
  const float b = has_bias ? bias[b_off + c] : 0.0f;
  // Strip starts s in [lo, hi] read inputs s*SW - PL .. + (KW-1)*DW + lanes - 1, all inside the row.
  const int lanes = G_SW == 1 ? 8 : 16;
  const int lo = (G_PL + G_SW - 1) / G_SW;
  const int room = G_W - lanes - (G_KW - 1) * G_DW + G_PL;
  const int hi = (G_SW == 1 || G_SW == 2) && room >= 0 ? min(G_OW - 8, room / G_SW) : -1;
  if (hi < lo) {
    for (int ow = 0; ow < G_OW; ++ow) dw_one(g, x, w, y, ih0, ow, b, act_a, act_b);
    return;
  }
  for (int ow = 0; ow < lo; ++ow) dw_one(g, x, w, y, ih0, ow, b, act_a, act_b);
  int s = lo;
  for (; s + 24 < hi; s += 32) dw_strip4(g, x, w, y, ih0, s, b, act_a, act_b);
  for (; s < hi; s += 8) dw_strip(g, x, w, y, ih0, s, b, act_a, act_b);
  dw_strip(g, x, w, y, ih0, hi, b, act_a, act_b);
  for (int ow = hi + 8; ow < G_OW; ++ow) dw_one(g, x, w, y, ih0, ow, b, act_a, act_b);
}

// Depthwise on small planes, for CPUs (EfficientNet's and MobileNet's late stages: 7x7 to 28x28 planes,
// hundreds of channels): a work-item per (n, c) plane copies the plane with its zero padding into private
// memory once, then computes every output row in float8 strips with no bounds checks (the rows kernel's
// edge outputs, one by one with a check per tap, were most of a 14x14 plane). pr x pc: the padded copy,
// pc covering round_up(OW, 8) outputs (plus 8 columns for stride 2's float16 loads); at most
// DW_PLANE_MAX floats (the host checks). Global (N*C), padded.
#define DW_PLANE_MAX 2304
#ifndef DWP_R
#define DWP_R 4
#endif
__kernel void conv_depthwise_plane(int16 g, int nc_total, int pr, int pc, __global const float* x, long x_off,
                                   __global const float* w, long w_off, __global const float* bias, long b_off,
                                   int has_bias, __global float* y, long y_off, float act_a, float act_b) {
  const int nc = get_global_id(0);
  if (nc >= nc_total) return;
  const int c = nc % G_C;
  x += x_off + (long)nc * G_H * G_W;
  w += w_off + c * DWP_KH * DWP_KW;
  y += y_off + (long)nc * G_OH * G_OW;
  float buf[DW_PLANE_MAX];
  for (int r = 0; r < pr; ++r) {
    const int ih = r - G_PT;
    const bool in_row = ih >= 0 && ih < G_H;
    for (int q = 0; q < pc; ++q) {
      const int iw = q - G_PL;
      buf[r * pc + q] = in_row && iw >= 0 && iw < G_W ? x[ih * G_W + iw] : 0.0f;
    }
  }
#ifdef DW_KH
  float wk[DW_KH * DW_KW];
  for (int i = 0; i < DW_KH * DW_KW; ++i) wk[i] = w[i];
#else
  __global const float* wk = w;
#endif
  const float b = has_bias ? bias[b_off + c] : 0.0f;
  // DWP_R output rows per pass, each with its own accumulator: a strip's KH * KW FMAs were one dependency chain
  // (25 x the FMA latency for a 5x5), DWP_R chains overlap. The last pass's rows past OH recompute row OH - 1
  // (reads stay inside the copy) and are not stored.
  for (int oh0 = 0; oh0 < G_OH; oh0 += DWP_R) {
    for (int ow0 = 0; ow0 < G_OW; ow0 += 8) {
      float8 acc[DWP_R];
#pragma unroll
      for (int r = 0; r < DWP_R; ++r) acc[r] = (float8)(0.0f);
      for (int kh = 0; kh < DWP_KH; ++kh) {
        for (int kw = 0; kw < DWP_KW; ++kw) {
          const float wv = wk[kh * DWP_KW + kw];
#pragma unroll
          for (int r = 0; r < DWP_R; ++r) {
            const float* row = buf + (min(oh0 + r, G_OH - 1) * DWP_SH + kh * DWP_DH) * pc + ow0 * DWP_SW + kw * DWP_DW;
            const float8 v = DWP_SW == 1 ? vload8(0, row) : vload16(0, row).even;
            acc[r] = fma(v, (float8)(wv), acc[r]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < DWP_R; ++r) {
        const int oh = oh0 + r;
        if (oh >= G_OH) break;
        float o[8];
#if ACT_VEC
        vstore8(APPLY_ACT_V(acc[r] + b, act_a, act_b), 0, o);
        if (ow0 + 8 <= G_OW) {
          vstore8(vload8(0, o), 0, y + oh * G_OW + ow0);
          continue;
        }
#else
        vstore8(acc[r] + b, 0, o);
        for (int j = 0; j < 8; ++j) o[j] = APPLY_ACT(o[j], act_a, act_b);
#endif
        const int n = min(8, G_OW - ow0);
        for (int j = 0; j < n; ++j) y[oh * G_OW + ow0 + j] = o[j];
      }
    }
  }
}

// im2col: col[n][c*KH*KW + kh*KW + kw][oh*OW + ow] (zero where the tap falls in the padding).
// Rows of one group are contiguous, so a group's GEMM operand is a plain offset view. One work-item
// writes the KH*KW taps of one (n, c, oh, ow): index arithmetic (integer division is slow on CPUs) is
// paid once per pixel, and neighbouring work-items write neighbouring addresses. Global (OW, OH, N*C).
__kernel void im2col(int16 g, __global const float* x, long x_off, __global float* col, long col_off) {
  const int ow = get_global_id(0);
  const int oh = get_global_id(1);
  const int nc = get_global_id(2);
  if (ow >= G_OW || oh >= G_OH) return;
  const long P = (long)G_OH * G_OW;
  __global const float* xc = x + x_off + (long)nc * G_H * G_W;
  __global float* out = col + col_off + (long)nc * G_KH * G_KW * P + (long)oh * G_OW + ow;
  const int ih0 = oh * G_SH - G_PT, iw0 = ow * G_SW - G_PL;
  for (int kh = 0; kh < G_KH; ++kh) {
    const int ih = ih0 + kh * G_DH;
    const bool row_in = ih >= 0 && ih < G_H;
    for (int kw = 0; kw < G_KW; ++kw) {
      const int iw = iw0 + kw * G_DW;
      out[(kh * G_KW + kw) * P] = (row_in && iw >= 0 && iw < G_W) ? xc[(long)ih * G_W + iw] : 0.0f;
    }
  }
}

// One output row oh of im2col for tap kk = kh * KW + kw of plane nc (im2col_rows).
inline void im2col_row(int16 g, __global const float* x, long x_off, __global float* col, long col_off, long nc,
                       int kk, int oh) {
  const int kh = kk / G_KW, kw = kk % G_KW;
  __global float* out = col + col_off + (nc * G_KH * G_KW + kk) * ((long)G_OH * G_OW) + (long)oh * G_OW;
  const int ih = oh * G_SH - G_PT + kh * G_DH;
  if (ih < 0 || ih >= G_H) {
    for (int ow = 0; ow < G_OW; ow += 16) store16_upto((float16)(0.0f), out + ow, G_OW - ow);
    return;
  }
  __global const float* row = x + x_off + nc * G_H * G_W + (long)ih * G_W;
  const int off = kw * G_DW - G_PL;  // output ow reads input column ow * SW + off
  // 16 outputs at a time, as vectors: a load of 16 (stride 2: 32, the even lanes) input columns, the columns
  // outside the row (the padding; the neighbouring row's values) zeroed by a select, the last partial run
  // stored in pieces. Element by element only where the load would leave X (its first and last rows); rows of
  // 28 or 14 outputs had run element by element. PoCL compiled the element loops to scalar moves.
  const long x_total = (long)get_global_size(2) * G_H * G_W;  // N * C planes
  const long row_at = nc * G_H * G_W + (long)ih * G_W;
  for (int ow = 0; ow < G_OW; ow += 16) {
    const int c0 = ow * G_SW + off;  // input column of lane 0
    const int16 col = c0 + CLDL_IOTA16 * G_SW;
    const long at = row_at + c0;
    float16 v;
    if ((G_SW == 1 || G_SW == 2) && at >= 0 && at + 16 * G_SW <= x_total) {
      if (G_SW == 1) {
        v = vload16(0, row + c0);
      } else {
        const float16 a = vload16(0, row + c0), b = vload16(0, row + c0 + 16);
        v = (float16)(a.even, b.even);
      }
      v = select(v, (float16)(0.0f), col < 0 || col >= G_W);
    } else {
      float t[16];
      for (int j = 0; j < 16; ++j) {
        const int c = c0 + j * G_SW;
        t[j] = c >= 0 && c < G_W ? row[c] : 0.0f;
      }
      v = vload16(0, t);
    }
    store16_upto(v, out + ow, G_OW - ow);
  }
}

// im2col for CPUs, same layout: a work-item per (n, c, kh, kw, `rows` output rows) writes contiguous rows
// of OW outputs, each from one input row (a straight copy between the zero edges for stride 1), instead
// of KH*KW values P apart per output pixel. Global (ceil(OH / rows), KH*KW, N*C), padded to the
// work-group size.
__kernel void im2col_rows(int16 g, int rows, __global const float* x, long x_off, __global float* col, long col_off) {
  const int oh0 = get_global_id(0) * rows;
  const int kk = get_global_id(1);
  const long nc = get_global_id(2);
  if (oh0 >= G_OH || kk >= G_KH * G_KW) return;
  const int oh1 = min(oh0 + rows, G_OH);
  for (int oh = oh0; oh < oh1; ++oh) im2col_row(g, x, x_off, col, col_off, nc, kk, oh);
}

// Winograd F(2x2,3x3) input transform V = B^T d B of each 4x4 input tile (stride 2 between tiles).
// V layout [16][C][P] with P = N * tiles_h * tiles_w, so the 16 products are one strided-batch GEMM.
// Global (tiles_h*tiles_w, C, N).
__kernel void winograd_input(int16 g, int tiles_h, int tiles_w, __global const float* x, long x_off,
                             __global float* v, long v_off) {
  const int t = get_global_id(0);
  const int c = get_global_id(1);
  const int n = get_global_id(2);
  const int T = tiles_h * tiles_w;
  if (t >= T) return;
  const int th = t / tiles_w, tw = t % tiles_w;
  const int ih0 = th * 2 - G_PT, iw0 = tw * 2 - G_PL;
  __global const float* xc = x + x_off + ((long)n * G_C + c) * G_H * G_W;
  float d[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int ih = ih0 + i, iw = iw0 + j;
      d[i][j] = (ih >= 0 && ih < G_H && iw >= 0 && iw < G_W) ? xc[(long)ih * G_W + iw] : 0.0f;
    }
  float tmp[4][4];  // B^T d
  for (int j = 0; j < 4; ++j) {
    tmp[0][j] = d[0][j] - d[2][j];
    tmp[1][j] = d[1][j] + d[2][j];
    tmp[2][j] = d[2][j] - d[1][j];
    tmp[3][j] = d[1][j] - d[3][j];
  }
  const long P = (long)get_global_size(2) * T;
  const long plane = (long)G_C * P;
  __global float* out = v + v_off + (long)c * P + (long)n * T + t;
  for (int i = 0; i < 4; ++i) {  // (B^T d) B
    out[(i * 4 + 0) * plane] = tmp[i][0] - tmp[i][2];
    out[(i * 4 + 1) * plane] = tmp[i][1] + tmp[i][2];
    out[(i * 4 + 2) * plane] = tmp[i][2] - tmp[i][1];
    out[(i * 4 + 3) * plane] = tmp[i][1] - tmp[i][3];
  }
}

// Winograd output transform Y = A^T m A per tile, plus bias and activation. M layout [16][K][P].
// Global (tiles_h*tiles_w, K, N).
__kernel void winograd_output(int16 g, int tiles_h, int tiles_w, __global const float* m, long m_off,
                              __global const float* bias, long b_off, int has_bias, __global const float* res,
                              long r_off, int has_res, __global float* y, long y_off, float act_a, float act_b) {
  const int t = get_global_id(0);
  const int k = get_global_id(1);
  const int n = get_global_id(2);
  const int T = tiles_h * tiles_w;
  if (t >= T) return;
  const long P = (long)get_global_size(2) * T;
  const long plane = (long)G_K * P;
  __global const float* src = m + m_off + (long)k * P + (long)n * T + t;
  float a[4][4];
  for (int i = 0; i < 16; ++i) a[i / 4][i % 4] = src[i * plane];
  float tmp[2][4];  // A^T m
  for (int j = 0; j < 4; ++j) {
    tmp[0][j] = a[0][j] + a[1][j] + a[2][j];
    tmp[1][j] = a[1][j] - a[2][j] - a[3][j];
  }
  const float b = has_bias ? bias[b_off + k] : 0.0f;
  const int oh0 = (t / tiles_w) * 2, ow0 = (t % tiles_w) * 2;
  __global float* yk = y + y_off + ((long)n * G_K + k) * G_OH * G_OW;
  __global const float* rk = res + r_off + ((long)n * G_K + k) * G_OH * G_OW;
  for (int i = 0; i < 2; ++i) {
    const float r0 = tmp[i][0] + tmp[i][1] + tmp[i][2];
    const float r1 = tmp[i][1] - tmp[i][2] - tmp[i][3];
    const int oh = oh0 + i;
    if (oh >= G_OH) continue;
    const int o = oh * G_OW + ow0;
    yk[o] = APPLY_ACT(r0 + b + (has_res ? rk[o] : 0.0f), act_a, act_b);
    if (ow0 + 1 < G_OW) yk[o + 1] = APPLY_ACT(r1 + b + (has_res ? rk[o + 1] : 0.0f), act_a, act_b);
  }
}

// 16 input columns c0 .. c0 + 15 of a row (r points at column c0) as one load, the lanes outside the row (over
// the padding: the neighbouring row's values) zeroed: the Winograd row kernels' edge strips. Every strip of a
// row of 8 tiles or fewer is such an edge strip; element by element they were most of the transforms' time.
inline float16 wino_edge16(int16 g, __global const float* r, int c0) {
  const int16 c = CLDL_IOTA16 + c0;
  return select(vload16(0, r), (float16)(0.0f), c < 0 || c >= G_W);
}

// Winograd input transform for CPUs, same V layout: a work-item per (n, c, tile row, strip of 8 tiles)
// loads each of the strip's 4 input rows as two float16 (their even / odd lanes are the 8 tiles' 4
// columns), transforms 8 tiles at once in float8 lanes and writes 8 adjacent tiles of each of the 16
// planes as one float8; the one-tile kernel above made 16 scattered scalar stores and bounds checks per
// tile. Global (ceil(tiles_w / 8), tiles_h, batch * C), padded to the work-group size.
__kernel void winograd_input_rows(int16 g, int tiles_h, int tiles_w, int batch, __global const float* x,
                                  long x_off, __global float* v, long v_off) {
  const int j0 = get_global_id(0) * 8;
  const int tr = get_global_id(1);
  const int nc = get_global_id(2);
  if (j0 >= tiles_w || tr >= tiles_h) return;
  const int n = nc / G_C, c = nc % G_C;
  const int T = tiles_h * tiles_w;
  const long P = (long)batch * T, plane = (long)G_C * P;
  const int row0 = tr * 2 - G_PT, col0 = j0 * 2 - G_PL;
  __global const float* xc = x + x_off + (long)nc * G_H * G_W;
  const long x_total = (long)batch * G_C * G_H * G_W;
  float8 d[4][4];
  for (int i = 0; i < 4; ++i) {
    const int ih = row0 + i;
    float16 a, b;
    const long flat = (long)nc * G_H * G_W + (long)ih * G_W + col0;  // the segment's start from x_off
    if (ih >= 0 && ih < G_H && col0 >= 0 && col0 + 18 <= G_W) {
      __global const float* r = xc + (long)ih * G_W + col0;
      a = vload16(0, r);
      b = vload16(0, r + 2);
    } else if (ih < 0 || ih >= G_H) {  // a padding row
      a = b = (float16)(0.0f);
    } else if (flat >= 0 && flat + 18 <= x_total) {  // over the left or right padding, loads inside X
      __global const float* r = xc + (long)ih * G_W + col0;
      a = wino_edge16(g, r, col0);
      b = wino_edge16(g, r + 2, col0 + 2);
    } else {  // the first and last rows of X: the same 18 columns element by element, zero outside the image
      float buf[18];
      for (int q = 0; q < 18; ++q) {
        const int iw = col0 + q;
        buf[q] = ih >= 0 && ih < G_H && iw >= 0 && iw < G_W ? xc[(long)ih * G_W + iw] : 0.0f;
      }
      a = vload16(0, buf);
      b = vload16(0, buf + 2);
    }
    d[i][0] = a.even;
    d[i][1] = a.odd;
    d[i][2] = b.even;
    d[i][3] = b.odd;
  }
  float8 t[4][4];  // B^T d
  for (int j = 0; j < 4; ++j) {
    t[0][j] = d[0][j] - d[2][j];
    t[1][j] = d[1][j] + d[2][j];
    t[2][j] = d[2][j] - d[1][j];
    t[3][j] = d[1][j] - d[3][j];
  }
  float8 o[16];  // (B^T d) B
  for (int i = 0; i < 4; ++i) {
    o[i * 4 + 0] = t[i][0] - t[i][2];
    o[i * 4 + 1] = t[i][1] + t[i][2];
    o[i * 4 + 2] = t[i][2] - t[i][1];
    o[i * 4 + 3] = t[i][1] - t[i][3];
  }
  __global float* out = v + v_off + (long)c * P + (long)n * T + (long)tr * tiles_w + j0;
  const int nt = min(8, tiles_w - j0);
  for (int q = 0; q < 16; ++q) store8_upto(o[q], out + q * plane, nt);
}

// Winograd output transform for CPUs, same M layout: a work-item per (n, k, tile row, strip of 8 tiles)
// reads 8 adjacent tiles of each of the 16 planes as one float8 and writes the strip's two output rows as
// float16 (the tiles' two columns interleaved). Global (ceil(tiles_w / 8), tiles_h, batch * K), padded.
__kernel void winograd_output_rows(int16 g, int tiles_h, int tiles_w, int batch, __global const float* m,
                                   long m_off, __global const float* bias, long b_off, int has_bias,
                                   __global const float* res, long r_off, int has_res, __global float* y, long y_off,
                                   float act_a, float act_b) {
  const int j0 = get_global_id(0) * 8;
  const int tr = get_global_id(1);
  const int nk = get_global_id(2);
  if (j0 >= tiles_w || tr >= tiles_h) return;
  const int n = nk / G_K, k = nk % G_K;
  const int T = tiles_h * tiles_w;
  const long P = (long)batch * T, plane = (long)G_K * P;
  __global const float* src = m + m_off + (long)k * P + (long)n * T + (long)tr * tiles_w + j0;
  const int nt = min(8, tiles_w - j0);
  float8 a[16];
  // A partial strip reads whole vectors too (the lanes past the row's tiles feed only outputs past the row,
  // never stored) unless the last plane's read would leave M.
  const long s_at = (long)k * P + (long)n * T + (long)tr * tiles_w + j0;
  if (nt == 8 || s_at + 8 <= plane) {
    for (int q = 0; q < 16; ++q) a[q] = vload8(0, src + q * plane);
  } else {
    for (int q = 0; q < 16; ++q) {
      float buf[8];
      for (int i = 0; i < 8; ++i) buf[i] = i < nt ? src[q * plane + i] : 0.0f;
      a[q] = vload8(0, buf);
    }
  }
  float8 t[2][4];  // A^T m
  for (int j = 0; j < 4; ++j) {
    t[0][j] = a[j] + a[4 + j] + a[8 + j];
    t[1][j] = a[4 + j] - a[8 + j] - a[12 + j];
  }
  const float b = has_bias ? bias[b_off + k] : 0.0f;
  __global float* yk = y + y_off + (long)nk * G_OH * G_OW;
  const int ow0 = j0 * 2, nw = min(16, G_OW - ow0);
  for (int i = 0; i < 2; ++i) {
    const int oh = tr * 2 + i;
    if (oh >= G_OH) break;
    float16 r;
    r.even = t[i][0] + t[i][1] + t[i][2] + b;
    r.odd = t[i][1] - t[i][2] - t[i][3] + b;
    __global float* yr = yk + (long)oh * G_OW + ow0;
    if (has_res) r += load16_upto(res + r_off + (long)nk * G_OH * G_OW + (long)oh * G_OW + ow0, nw);
#if ACT_VEC
    store16_upto(APPLY_ACT_V(r, act_a, act_b), yr, nw);
#else
    float buf[16];
    vstore16(r, 0, buf);
    for (int q = 0; q < nw; ++q) yr[q] = APPLY_ACT(buf[q], act_a, act_b);
#endif
  }
}

// Winograd F(4x4,3x3): 6x6 input tiles at stride 4, 36 element-wise products, 4x4 outputs per tile.
// Against F(2x2,3x3) it does 2.25 instead of 4 multiplies per output and channel pair, and its transformed
// planes hold 2.25x instead of 4x the input / output, so both the GEMMs and the transforms' memory traffic
// shrink by about 1.8x. Its transforms' larger constants cost accuracy: about 1e-6 relative to the
// output's scale on standard-normal data, against about 2e-7 for F(2x2,3x3) (tests/test_conv.cpp).
// Matrices (Lavin & Gray): B^T rows below; G in layers/conv.cpp; A^T in the output transforms.
// V layout [36][C][P], M layout [36][K][P], P = N * tiles_h * tiles_w, as for F(2x2,3x3).
#define WINO4_BT(d, o)                                 \
  do {                                                 \
    o##0 = 4.0f * d##0 - 5.0f * d##2 + d##4;           \
    o##1 = -4.0f * (d##1 + d##2) + d##3 + d##4;        \
    o##2 = 4.0f * (d##1 - d##2) - d##3 + d##4;         \
    o##3 = 2.0f * (d##3 - d##1) - d##2 + d##4;         \
    o##4 = 2.0f * (d##1 - d##3) - d##2 + d##4;         \
    o##5 = 4.0f * d##1 - 5.0f * d##3 + d##5;           \
  } while (0)
#define WINO4_AT(m, o)                                       \
  do {                                                       \
    o##0 = m##0 + m##1 + m##2 + m##3 + m##4;                 \
    o##1 = m##1 - m##2 + 2.0f * (m##3 - m##4);               \
    o##2 = m##1 + m##2 + 4.0f * (m##3 + m##4);               \
    o##3 = m##1 - m##2 + 8.0f * (m##3 - m##4) + m##5;        \
  } while (0)

// F(4x4,3x3) input transform V = B^T d B, a tile per work-item. Global (tiles_h*tiles_w, C, N).
__kernel void winograd4_input(int16 g, int tiles_h, int tiles_w, __global const float* x, long x_off,
                              __global float* v, long v_off) {
  const int t = get_global_id(0);
  const int c = get_global_id(1);
  const int n = get_global_id(2);
  const int T = tiles_h * tiles_w;
  if (t >= T) return;
  const int ih0 = (t / tiles_w) * 4 - G_PT, iw0 = (t % tiles_w) * 4 - G_PL;
  __global const float* xc = x + x_off + ((long)n * G_C + c) * G_H * G_W;
  float r[6][6];  // B^T applied down each column of the tile
  for (int j = 0; j < 6; ++j) {
    float d0, d1, d2, d3, d4, d5, e[6];
    for (int i = 0; i < 6; ++i) {
      const int ih = ih0 + i, iw = iw0 + j;
      e[i] = (ih >= 0 && ih < G_H && iw >= 0 && iw < G_W) ? xc[(long)ih * G_W + iw] : 0.0f;
    }
    d0 = e[0], d1 = e[1], d2 = e[2], d3 = e[3], d4 = e[4], d5 = e[5];
    float o0, o1, o2, o3, o4, o5;
    WINO4_BT(d, o);
    r[0][j] = o0, r[1][j] = o1, r[2][j] = o2, r[3][j] = o3, r[4][j] = o4, r[5][j] = o5;
  }
  const long P = (long)get_global_size(2) * T;
  const long plane = (long)G_C * P;
  __global float* out = v + v_off + (long)c * P + (long)n * T + t;
  for (int i = 0; i < 6; ++i) {  // (B^T d) B: B^T along each row
    float d0 = r[i][0], d1 = r[i][1], d2 = r[i][2], d3 = r[i][3], d4 = r[i][4], d5 = r[i][5];
    float o0, o1, o2, o3, o4, o5;
    WINO4_BT(d, o);
    out[(i * 6 + 0) * plane] = o0;
    out[(i * 6 + 1) * plane] = o1;
    out[(i * 6 + 2) * plane] = o2;
    out[(i * 6 + 3) * plane] = o3;
    out[(i * 6 + 4) * plane] = o4;
    out[(i * 6 + 5) * plane] = o5;
  }
}

// F(4x4,3x3) output transform Y = A^T m A plus bias and activation, a tile per work-item.
// Global (tiles_h*tiles_w, K, N).
__kernel void winograd4_output(int16 g, int tiles_h, int tiles_w, __global const float* m, long m_off,
                               __global const float* bias, long b_off, int has_bias, __global const float* res,
                               long r_off, int has_res, __global float* y, long y_off, float act_a, float act_b) {
  const int t = get_global_id(0);
  const int k = get_global_id(1);
  const int n = get_global_id(2);
  const int T = tiles_h * tiles_w;
  if (t >= T) return;
  const long P = (long)get_global_size(2) * T;
  const long plane = (long)G_K * P;
  __global const float* src = m + m_off + (long)k * P + (long)n * T + t;
  float r[4][6];  // A^T m: A^T down each column
  for (int j = 0; j < 6; ++j) {
    const float m0 = src[(0 * 6 + j) * plane], m1 = src[(1 * 6 + j) * plane], m2 = src[(2 * 6 + j) * plane];
    const float m3 = src[(3 * 6 + j) * plane], m4 = src[(4 * 6 + j) * plane], m5 = src[(5 * 6 + j) * plane];
    float o0, o1, o2, o3;
    WINO4_AT(m, o);
    r[0][j] = o0, r[1][j] = o1, r[2][j] = o2, r[3][j] = o3;
  }
  const float b = has_bias ? bias[b_off + k] : 0.0f;
  const int oh0 = (t / tiles_w) * 4, ow0 = (t % tiles_w) * 4;
  __global float* yk = y + y_off + ((long)n * G_K + k) * G_OH * G_OW;
  __global const float* rk = res + r_off + ((long)n * G_K + k) * G_OH * G_OW;
  for (int i = 0; i < 4; ++i) {
    const int oh = oh0 + i;
    if (oh >= G_OH) break;
    const float m0 = r[i][0], m1 = r[i][1], m2 = r[i][2], m3 = r[i][3], m4 = r[i][4], m5 = r[i][5];
    float o0, o1, o2, o3;
    WINO4_AT(m, o);
    const float o[4] = {o0, o1, o2, o3};
    for (int q = 0; q < 4 && ow0 + q < G_OW; ++q) {
      const int yi = oh * G_OW + ow0 + q;
      yk[yi] = APPLY_ACT(o[q] + b + (has_res ? rk[yi] : 0.0f), act_a, act_b);
    }
  }
}

// F(4x4,3x3) input transform for CPUs, same V layout: a work-item per (n, c, tile row, strip of 8 tiles)
// loads each of the strip's 6 input rows (34 columns) once, takes the 8 tiles' column q as the float8 of
// columns q, q + 4, ..., q + 28, transforms the 8 tiles at once in float8 lanes and writes 8 adjacent tiles
// of each of the 36 planes as one float8. Global (ceil(tiles_w / 8), tiles_h, batch * C), padded.
__kernel void winograd4_input_rows(int16 g, int tiles_h, int tiles_w, int batch, __global const float* x,
                                   long x_off, __global float* v, long v_off) {
  const int j0 = get_global_id(0) * 8;
  const int tr = get_global_id(1);
  const int nc = get_global_id(2);
  if (j0 >= tiles_w || tr >= tiles_h) return;
  const int n = nc / G_C, c = nc % G_C;
  const int T = tiles_h * tiles_w;
  const long P = (long)batch * T, plane = (long)G_C * P;
  const int row0 = tr * 4 - G_PT, col0 = j0 * 4 - G_PL;
  __global const float* xc = x + x_off + (long)nc * G_H * G_W;
  const long x_total = (long)batch * G_C * G_H * G_W;
  float8 h[6][6];  // d B: each input row's 6 tile columns transformed
  for (int i = 0; i < 6; ++i) {
    const int ih = row0 + i;
    float16 a, b;
    float e32, e33;
    const long flat = (long)nc * G_H * G_W + (long)ih * G_W + col0;  // the segment's start from x_off
    if (ih >= 0 && ih < G_H && col0 >= 0 && col0 + 34 <= G_W) {
      __global const float* r = xc + (long)ih * G_W + col0;
      a = vload16(0, r);
      b = vload16(0, r + 16);
      e32 = r[32];
      e33 = r[33];
    } else if (ih < 0 || ih >= G_H) {  // a padding row
      a = b = (float16)(0.0f);
      e32 = e33 = 0.0f;
    } else if (flat >= 0 && flat + 34 <= x_total) {  // over the left or right padding, loads inside X
      __global const float* r = xc + (long)ih * G_W + col0;
      a = wino_edge16(g, r, col0);
      b = wino_edge16(g, r + 16, col0 + 16);
      e32 = col0 + 32 >= 0 && col0 + 32 < G_W ? r[32] : 0.0f;
      e33 = col0 + 33 >= 0 && col0 + 33 < G_W ? r[33] : 0.0f;
    } else {  // the first and last rows of X: the same 34 columns element by element, zero outside the image
      float buf[34];
      for (int q = 0; q < 34; ++q) {
        const int iw = col0 + q;
        buf[q] = ih >= 0 && ih < G_H && iw >= 0 && iw < G_W ? xc[(long)ih * G_W + iw] : 0.0f;
      }
      a = vload16(0, buf);
      b = vload16(0, buf + 16);
      e32 = buf[32];
      e33 = buf[33];
    }
    const float8 d0 = (float8)(a.s048c, b.s048c), d1 = (float8)(a.s159d, b.s159d);
    const float8 d2 = (float8)(a.s26ae, b.s26ae), d3 = (float8)(a.s37bf, b.s37bf);
    const float8 d4 = (float8)(a.s48c, b.s048c, e32), d5 = (float8)(a.s59d, b.s159d, e33);
    float8 o0, o1, o2, o3, o4, o5;
    WINO4_BT(d, o);
    h[i][0] = o0, h[i][1] = o1, h[i][2] = o2, h[i][3] = o3, h[i][4] = o4, h[i][5] = o5;
  }
  __global float* out = v + v_off + (long)c * P + (long)n * T + (long)tr * tiles_w + j0;
  const int nt = min(8, tiles_w - j0);
  for (int j = 0; j < 6; ++j) {  // B^T (d B): down each column
    const float8 d0 = h[0][j], d1 = h[1][j], d2 = h[2][j], d3 = h[3][j], d4 = h[4][j], d5 = h[5][j];
    float8 o[6];
    float8 o0, o1, o2, o3, o4, o5;
    WINO4_BT(d, o);
    o[0] = o0, o[1] = o1, o[2] = o2, o[3] = o3, o[4] = o4, o[5] = o5;
    for (int i = 0; i < 6; ++i) store8_upto(o[i], out + (i * 6 + j) * plane, nt);
  }
}

// F(4x4,3x3) output transform for CPUs, same M layout: a work-item per (n, k, tile row, strip of 8 tiles)
// reads 8 adjacent tiles of each of the 36 planes as one float8 and writes the strip's four output rows as
// two float16 each (the tiles' four columns interleaved). Global (ceil(tiles_w / 8), tiles_h, batch * K),
// padded.
__kernel void winograd4_output_rows(int16 g, int tiles_h, int tiles_w, int batch, __global const float* m,
                                    long m_off, __global const float* bias, long b_off, int has_bias,
                                    __global const float* res, long r_off, int has_res, __global float* y,
                                    long y_off, float act_a, float act_b) {
  const int j0 = get_global_id(0) * 8;
  const int tr = get_global_id(1);
  const int nk = get_global_id(2);
  if (j0 >= tiles_w || tr >= tiles_h) return;
  const int n = nk / G_K, k = nk % G_K;
  const int T = tiles_h * tiles_w;
  const long P = (long)batch * T, plane = (long)G_K * P;
  __global const float* src = m + m_off + (long)k * P + (long)n * T + (long)tr * tiles_w + j0;
  const int nt = min(8, tiles_w - j0);
  // A partial strip reads whole vectors too (the lanes past the row's tiles feed only outputs past the row,
  // never stored) unless the last plane's read would leave M.
  const long s_at = (long)k * P + (long)n * T + (long)tr * tiles_w + j0;
  const bool whole = nt == 8 || s_at + 8 <= plane;
  float8 t[4][6];  // A^T m: down each column
  for (int j = 0; j < 6; ++j) {
    float8 a[6];
    for (int i = 0; i < 6; ++i) {
      __global const float* s = src + (i * 6 + j) * plane;
      if (whole) {
        a[i] = vload8(0, s);
      } else {
        float buf[8];
        for (int q = 0; q < 8; ++q) buf[q] = q < nt ? s[q] : 0.0f;
        a[i] = vload8(0, buf);
      }
    }
    const float8 m0 = a[0], m1 = a[1], m2 = a[2], m3 = a[3], m4 = a[4], m5 = a[5];
    float8 o0, o1, o2, o3;
    WINO4_AT(m, o);
    t[0][j] = o0, t[1][j] = o1, t[2][j] = o2, t[3][j] = o3;
  }
  const float b = has_bias ? bias[b_off + k] : 0.0f;
  __global float* yk = y + y_off + (long)nk * G_OH * G_OW;
  const int ow0 = j0 * 4, nw = min(32, G_OW - ow0);
  for (int i = 0; i < 4; ++i) {
    const int oh = tr * 4 + i;
    if (oh >= G_OH) break;
    const float8 m0 = t[i][0], m1 = t[i][1], m2 = t[i][2], m3 = t[i][3], m4 = t[i][4], m5 = t[i][5];
    float8 y0, y1, y2, y3;
    WINO4_AT(m, y);
    // Output column 4 * tile + q is lane `tile` of y_q.
    float16 lo = (float16)(y0.s0, y1.s0, y2.s0, y3.s0, y0.s1, y1.s1, y2.s1, y3.s1, y0.s2, y1.s2, y2.s2, y3.s2,
                           y0.s3, y1.s3, y2.s3, y3.s3) + b;
    float16 hi = (float16)(y0.s4, y1.s4, y2.s4, y3.s4, y0.s5, y1.s5, y2.s5, y3.s5, y0.s6, y1.s6, y2.s6, y3.s6,
                           y0.s7, y1.s7, y2.s7, y3.s7) + b;
    __global float* yr = yk + (long)oh * G_OW + ow0;
    if (has_res) {
      __global const float* rr = res + r_off + (long)nk * G_OH * G_OW + (long)oh * G_OW + ow0;
      lo += load16_upto(rr, nw);
      hi += load16_upto(rr + 16, nw - 16);
    }
#if ACT_VEC
    store16_upto(APPLY_ACT_V(lo, act_a, act_b), yr, nw);
    store16_upto(APPLY_ACT_V(hi, act_a, act_b), yr + 16, nw - 16);
#else
    float buf[32];
    vstore16(lo, 0, buf);
    vstore16(hi, 0, buf + 16);
    for (int q = 0; q < nw; ++q) yr[q] = APPLY_ACT(buf[q], act_a, act_b);
#endif
  }
}

// FFT convolution, step 1: each (n, c) plane zero-padded into an FH x FW real plane (FH >= H + pads).
// Global (FW, FH, N*C).
__kernel void fft_pad(int16 g, int fh, int fw, __global const float* x, long x_off, __global float* out) {
  const int j = get_global_id(0);
  const int i = get_global_id(1);
  const int nc = get_global_id(2);
  const int ih = i - G_PT, iw = j - G_PL;
  float v = 0.0f;
  if (ih >= 0 && ih < G_H && iw >= 0 && iw < G_W) v = x[x_off + ((long)nc * G_H + ih) * G_W + iw];
  out[((long)nc * fh + i) * fw + j] = v;
}

// FFT convolution, step 2: Y[n,k,f] = sum_c X[n,c,f] * conj(Wf[k,c,f]) (cross-correlation, as Conv is).
// F complex bins per plane. Global (F, K, N).
__kernel void fft_multiply(int F, int C, int K, __global const float2* X, __global const float2* Wf, long wf_off,
                           __global float2* Y) {
  const int f = get_global_id(0);
  const int k = get_global_id(1);
  const int n = get_global_id(2);
  if (f >= F) return;
  float2 acc = (float2)(0.0f, 0.0f);
  for (int c = 0; c < C; ++c) {
    const float2 a = X[((long)n * C + c) * F + f];
    const float2 b = Wf[wf_off + ((long)k * C + c) * F + f];
    acc.x += a.x * b.x + a.y * b.y;
    acc.y += a.y * b.x - a.x * b.y;
  }
  Y[((long)n * K + k) * F + f] = acc;
}

// FFT convolution, step 3: the valid OH x OW corner of each inverse-transformed plane, plus bias and
// activation. Global (OW, OH, N*K).
__kernel void fft_crop(int16 g, int fh, int fw, __global const float* src, __global const float* bias, long b_off,
                       int has_bias, __global float* y, long y_off, float act_a, float act_b) {
  const int ow = get_global_id(0);
  const int oh = get_global_id(1);
  const int nk = get_global_id(2);
  float v = src[((long)nk * fh + oh) * fw + ow];
  if (has_bias) v += bias[b_off + nk % G_K];
  y[y_off + ((long)nk * G_OH + oh) * G_OW + ow] = APPLY_ACT(v, act_a, act_b);
}

// ConvTranspose (1-D to 3-D) as a gather: each output pixel sums the input taps that scatter onto it.
// Weight [C, K/groups, KD, KH, KW]. depth = (D, OD, KD, SD, DD, PF): the depth dim of a 3-D problem,
// (1, 1, 1, 1, 1, 0) otherwise. Global (OW, OH, N*K*OD).
__kernel void conv_transpose_direct(int16 g, int8 depth, __global const float* x, long x_off,
                                    __global const float* w, long w_off, __global const float* bias, long b_off,
                                    int has_bias, __global float* y, long y_off, float act_a, float act_b) {
  const int D = depth.s0, OD = depth.s1, KD = depth.s2, SD = depth.s3, DD = depth.s4, PF = depth.s5;
  const int ow = get_global_id(0);
  const int oh = get_global_id(1);
  const int z = get_global_id(2);
  if (ow >= G_OW || oh >= G_OH) return;
  const int od = z % OD, nk = z / OD;
  const int n = nk / G_K, k = nk % G_K;
  const int grp = k / G_KG, kl = k % G_KG;
  float acc = 0.0f;
  for (int kd = 0; kd < KD; ++kd) {
    const int dn = od + PF - kd * DD;
    if (dn < 0 || dn % SD) continue;
    const int id = dn / SD;
    if (id >= D) continue;
    for (int kh = 0; kh < G_KH; ++kh) {
      const int hn = oh + G_PT - kh * G_DH;
      if (hn < 0 || hn % G_SH) continue;
      const int ih = hn / G_SH;
      if (ih >= G_H) continue;
      for (int kw = 0; kw < G_KW; ++kw) {
        const int wn = ow + G_PL - kw * G_DW;
        if (wn < 0 || wn % G_SW) continue;
        const int iw = wn / G_SW;
        if (iw >= G_W) continue;
        for (int cl = 0; cl < G_CG; ++cl) {
          const int c = grp * G_CG + cl;
          acc = fma(x[x_off + ((((long)n * G_C + c) * D + id) * G_H + ih) * G_W + iw],
                    w[w_off + ((((long)c * G_KG + kl) * KD + kd) * G_KH + kh) * G_KW + kw], acc);
        }
      }
    }
  }
  if (has_bias) acc += bias[b_off + k];
  y[y_off + (((long)nk * OD + od) * G_OH + oh) * G_OW + ow] = APPLY_ACT(acc, act_a, act_b);
}

// ConvTranspose as GEMM + col2im, second step: the GEMM wrote col[n][grp][(kl*KH + kh)*KW + kw][ih*W + iw]
// (each group's weight^T times its input channels); each output pixel gathers the taps that land on it,
// then bias and activation. Deterministic (no atomics). 2-D (and 1-D as H = 1). Global (OW, OH, N*K).
__kernel void col2im_transpose(int16 g, __global const float* col, long col_off, __global const float* bias,
                               long b_off, int has_bias, __global float* y, long y_off, float act_a, float act_b) {
  const int ow = get_global_id(0);
  const int oh = get_global_id(1);
  const int nk = get_global_id(2);
  if (ow >= G_OW || oh >= G_OH) return;
  const int k = nk % G_K;
  const long HW = (long)G_H * G_W;
  // Channel k of image n is row block (n * K + k) * KH * KW: groups are contiguous in k.
  __global const float* c = col + col_off + (long)nk * G_KH * G_KW * HW;
  float acc = 0.0f;
  for (int kh = 0; kh < G_KH; ++kh) {
    const int hn = oh + G_PT - kh * G_DH;
    if (hn < 0 || hn % G_SH) continue;
    const int ih = hn / G_SH;
    if (ih >= G_H) continue;
    for (int kw = 0; kw < G_KW; ++kw) {
      const int wn = ow + G_PL - kw * G_DW;
      if (wn < 0 || wn % G_SW) continue;
      const int iw = wn / G_SW;
      if (iw >= G_W) continue;
      acc += c[(kh * G_KW + kw) * HW + (long)ih * G_W + iw];
    }
  }
  if (has_bias) acc += bias[b_off + k];
  y[y_off + (long)nk * G_OH * G_OW + oh * G_OW + ow] = APPLY_ACT(acc, act_a, act_b);
}

// col2im for CPUs: a whole output row per work-item, scattered from col's input columns into the row
// (which only this work-item writes) instead of gathered per output pixel: no division or remainder per
// tap, and the row stays in the cache. The row starts at the bias; the activation is a last pass.
// Global (OH, N*K), padded to the work-group size.
__kernel void col2im_transpose_rows(int16 g, int nk_total, __global const float* col, long col_off,
                                    __global const float* bias, long b_off, int has_bias, __global float* y,
                                    long y_off, float act_a, float act_b) {
  const int oh = get_global_id(0);
  const int nk = get_global_id(1);
  if (oh >= G_OH || nk >= nk_total) return;
  const int k = nk % G_K;
  const long HW = (long)G_H * G_W;
  __global const float* c = col + col_off + (long)nk * G_KH * G_KW * HW;
  __global float* yr = y + y_off + (long)nk * G_OH * G_OW + (long)oh * G_OW;
  const float b = has_bias ? bias[b_off + k] : 0.0f;
  for (int ow = 0; ow < G_OW; ++ow) yr[ow] = b;
  for (int kh = 0; kh < G_KH; ++kh) {
    const int hn = oh + G_PT - kh * G_DH;
    if (hn < 0 || hn % G_SH) continue;
    const int ih = hn / G_SH;
    if (ih >= G_H) continue;
    for (int kw = 0; kw < G_KW; ++kw) {
      // Input column iw lands on ow = iw * SW + off; keep 0 <= ow < OW.
      const int off = kw * G_DW - G_PL;
      const int lo = off >= 0 ? 0 : (-off + G_SW - 1) / G_SW;
      const int hi = min(G_W, (G_OW - off + G_SW - 1) / G_SW);
      __global const float* src = c + (kh * G_KW + kw) * HW + (long)ih * G_W;
      for (int iw = lo; iw < hi; ++iw) yr[iw * G_SW + off] += src[iw];
    }
  }
#if ACT != ACT_NONE
  for (int ow = 0; ow < G_OW; ++ow) yr[ow] = APPLY_ACT(yr[ow], act_a, act_b);
#endif
}
