// Depthwise convolution for CPUs: conv_dw_flat (built with the DWF_* macros) and conv_dw_s2 (DWS_*, below).
// conv_dw_flat: "same" geometries (stride 1, output plane == input plane: every
// stride-1 depthwise layer of MobileNet v2/v3, EfficientNet, DeepLab v3 and ShuffleNet), vectorised along
// the flattened plane. Built per geometry by layers/conv.cpp; the macros have no defaults on purpose.
//
// With OW == W, output pixel p = oh * W + ow reads input p + (kh*DH - PT) * W + (kw*DW - PL) for tap
// (kh, kw): one constant offset per tap over the whole flattened plane. A work-item copies a band of
// DWF_BR output rows' inputs (with the rows above and below) into a zero-padded private buffer once, with
// float16 loads of the contiguous plane, then computes float16 vectors of outputs, each tap one unaligned
// vector load at a constant offset and one FMA. Rows above and below the plane read the buffer's zeros;
// a tap that crosses the left or right edge would read the neighbouring row, so the KH taps of one column
// kw are summed first and masked once per kw by the lanes' column (KW selects per vector, not KH*KW).
// The rows kernel in conv.cl loaded 8 outputs per tap with edge outputs one by one, the plane kernel a
// scalar padded copy per plane and float8 strips that wasted most of a 7- or 14-wide row.
//
// Macros (all required): DWF_KH, DWF_KW, DWF_DH, DWF_DW (kernel and dilation), DWF_H, DWF_W (plane),
// DWF_PT, DWF_PL (leading pads), DWF_BR (output rows per work-item), DWF_LEN (buffer floats: DWF_NV * 16 +
// (KH-1)*DH*W + (KW-1)*DW rounded up to 16), DWF_NV (float16 vectors per band: ceil(BR * W / 16)), and ACT.
// Global (bands, N*C), padded; `g` is conv.cl's geometry vector (only its K is read).

// act(v) into y[0 .. n) (n >= 1): one vector store when all 16 lanes are outputs. A partial vector still takes
// the vector activation before its lanes are stored one by one: the scalar form of SiLU (an exp and a division
// per lane, not inlined) on the 12 last outputs of each 28-wide row cost EfficientNet-B0's 5x5 stride-2 layer
// 0.2 -> 0.6 ms.
inline void dw_store16(float16 v, __global float* y, int n, float act_a, float act_b) {
#if ACT_VEC
  v = APPLY_ACT_V(v, act_a, act_b);
  if (n >= 16) {
    vstore16(v, 0, y);
    return;
  }
  float o[16];
  vstore16(v, 0, o);
  for (int i = 0; i < n; ++i) y[i] = o[i];
#else
  float o[16];
  vstore16(v, 0, o);
  for (int i = 0; i < min(n, 16); ++i) y[i] = APPLY_ACT(o[i], act_a, act_b);
#endif
}

#ifdef DWF_KH
#define DWF_HW (DWF_H * DWF_W)
#define DWF_FRONT (DWF_PT * DWF_W + DWF_PL)

__kernel void conv_dw_flat(int16 g, int nc_total, __global const float* x, long x_off, __global const float* w,
                           long w_off, __global const float* bias, long b_off, int has_bias, __global float* y,
                           long y_off, float act_a, float act_b) {
  const int band = get_global_id(0);
  const int nc = get_global_id(1);
  const int bands = (DWF_H + DWF_BR - 1) / DWF_BR;
  if (band >= bands || nc >= nc_total) return;
  const int c = nc % g.s3;
  const int p0 = band * DWF_BR * DWF_W;                 // first output of the band, flattened
  const int np = min(DWF_BR * DWF_W, DWF_HW - p0);     // outputs in the band
  x += x_off + (long)nc * DWF_HW;
  y += y_off + (long)nc * DWF_HW + p0;
  w += w_off + c * (DWF_KH * DWF_KW);

  // buf[j] = x[p0 - FRONT + j], zero outside the plane.
  float buf[DWF_LEN];
  const int base = p0 - DWF_FRONT;
  for (int j = 0; j < DWF_LEN; j += 16) {
    const int s = base + j;
    if (s >= 0 && s + 16 <= DWF_HW) {
      vstore16(vload16(0, x + s), 0, buf + j);
    } else {
      for (int i = 0; i < 16; ++i) buf[j + i] = s + i >= 0 && s + i < DWF_HW ? x[s + i] : 0.0f;
    }
  }
  float wk[DWF_KH * DWF_KW];
#pragma unroll
  for (int i = 0; i < DWF_KH * DWF_KW; ++i) wk[i] = w[i];
  const float b = has_bias ? bias[b_off + c] : 0.0f;
  const int16 lane = CLDL_IOTA16;

  // The lanes' output columns ((lane + p) % W, p0 being a multiple of W), stepped by 16 % W per vector with
  // one wrap: a vector modulo per vector cost a dozen instructions next to the taps' 2 KH KW.
  int16 col = lane % DWF_W;
  for (int v = 0; v < DWF_NV; ++v, col += 16 % DWF_W, col = select(col, col - DWF_W, col >= DWF_W)) {
    const int p = v * 16;
    if (p >= np) break;
    float16 acc = (float16)(0.0f);
#pragma unroll
    for (int kw = 0; kw < DWF_KW; ++kw) {
      float16 t = (float16)(0.0f);
#pragma unroll
      for (int kh = 0; kh < DWF_KH; ++kh)
        t = fma(vload16(0, buf + p + kh * DWF_DH * DWF_W + kw * DWF_DW), (float16)(wk[kh * DWF_KW + kw]), t);
      const int dc = kw * DWF_DW - DWF_PL;  // column offset of this tap
      if (dc == 0) {
        acc += t;
      } else {
        const int16 ic = col + dc;
        acc += select((float16)(0.0f), t, ic >= 0 && ic < DWF_W);
      }
    }
    dw_store16(acc + b, y + p, np - p, act_a, act_b);
  }
}
#endif

// Stride-2 depthwise convolution for CPUs (the downsampling depthwise layers of MobileNet v2/v3, EfficientNet,
// MnasNet: 3x3 and 5x5, undilated), a band of DWS_BR output rows per work-item. Output column ow reads input
// column 2 ow + d for tap column d = kw - PL: an even column (ow + d / 2) when d is even, an odd one
// (ow + (d - 1) / 2) when it is odd. So each of the band's 2 BR + KH - 2 input rows is split once into its even
// and its odd columns (private, zero-padded: DWS_FP in front, zeros past the row's end and for rows outside the
// plane), 32 columns at a time as two float16 loads whose even and odd lanes are taken apart (lanes past the
// row's end cleared by a select), and every tap is then one unaligned float16 load at a constant offset of one
// of them and one FMA. A band of rows splits each input row once where a work-item per output row split it
// KH / 2 times over, and the split had a scalar loop for every row's last columns (EfficientNet-B0's 5x5 on
// 144 x 56 x 56, device time in the model: 0.43 -> 0.25 ms; ONNX Runtime's node takes 0.07 ms).
//
// Macros (all required): DWS_KH, DWS_KW, DWS_W (input row), DWS_OW, DWS_PL (left pad), DWS_FP (front zeros,
// ceil(PL / 2)), DWS_NV (float16 vectors per output row: ceil(OW / 16)), DWS_LEN (floats per split row, a
// multiple of 16 covering FP + NV * 16 + the largest tap offset and FP + the split row in whole vectors),
// DWS_BR (output rows per work-item), and ACT. H, OH and PT come from `g` (conv.cl).
// Global (ceil(OH / BR), N*C), padded.
#ifdef DWS_KH
#define DWS_HALF_E ((DWS_W + 1) / 2)  // even columns of an input row
#define DWS_HALF_O (DWS_W / 2)        // odd columns
#define DWS_ROWS (2 * DWS_BR + DWS_KH - 2)
__kernel void conv_dw_s2(int16 g, int nc_total, __global const float* x, long x_off, __global const float* w,
                         long w_off, __global const float* bias, long b_off, int has_bias, __global float* y,
                         long y_off, float act_a, float act_b) {
  const int oh0 = get_global_id(0) * DWS_BR;
  const int nc = get_global_id(1);
  const int H = g.s1, OH = g.s4, PT = g.sa;
  if (oh0 >= OH || nc >= nc_total) return;
  const int c = nc % g.s3;
  const int nr = min(DWS_BR, OH - oh0);  // output rows of this band
  const int rows = 2 * nr + DWS_KH - 2;   // input rows they read
  x += x_off + (long)nc * H * DWS_W;
  y += y_off + ((long)nc * OH + oh0) * DWS_OW;
  w += w_off + c * (DWS_KH * DWS_KW);
  const int16 lane = CLDL_IOTA16;
  float ev[DWS_ROWS][DWS_LEN], od[DWS_ROWS][DWS_LEN];
  for (int r = 0; r < rows; ++r) {
    const int ih = oh0 * 2 - PT + r;
    for (int j = 0; j < DWS_LEN; j += 16) {
      vstore16((float16)(0.0f), 0, ev[r] + j);
      vstore16((float16)(0.0f), 0, od[r] + j);
    }
    if (ih < 0 || ih >= H) continue;
    __global const float* row = x + (long)ih * DWS_W;
    const int left = (H - ih) * DWS_W;  // floats from the row's start to the plane's end
    int j = 0;
    for (; j < DWS_HALF_E && 2 * j + 32 <= left; j += 16) {
      const float16 a = vload16(0, row + 2 * j), b = vload16(0, row + 2 * j + 16);
      const int16 col = lane + j;
      vstore16(select((float16)(0.0f), (float16)(a.even, b.even), col < DWS_HALF_E), 0, ev[r] + DWS_FP + j);
      vstore16(select((float16)(0.0f), (float16)(a.odd, b.odd), col < DWS_HALF_O), 0, od[r] + DWS_FP + j);
    }
    for (; j < DWS_HALF_E; ++j) {  // the plane's last columns, where 32 floats would read past it
      ev[r][DWS_FP + j] = row[2 * j];
      if (j < DWS_HALF_O) od[r][DWS_FP + j] = row[2 * j + 1];
    }
  }
  float wk[DWS_KH * DWS_KW];
#pragma unroll
  for (int i = 0; i < DWS_KH * DWS_KW; ++i) wk[i] = w[i];
  const float b = has_bias ? bias[b_off + c] : 0.0f;
  for (int ro = 0; ro < nr; ++ro) {
    for (int v = 0; v < DWS_NV; ++v) {
      const int p = v * 16;
      float16 acc = (float16)(b);
#pragma unroll
      for (int kh = 0; kh < DWS_KH; ++kh)
#pragma unroll
        for (int kw = 0; kw < DWS_KW; ++kw) {
          const int d = kw - DWS_PL;
          const int e = d >= 0 ? d / 2 : -((1 - d) / 2);  // floor(d / 2)
          const float* src = (d & 1) ? od[2 * ro + kh] : ev[2 * ro + kh];
          acc = fma(vload16(0, src + DWS_FP + p + e), (float16)(wk[kh * DWS_KW + kw]), acc);
        }
      dw_store16(acc, y + (long)ro * DWS_OW + p, DWS_OW - p, act_a, act_b);
    }
  }
}
#endif
