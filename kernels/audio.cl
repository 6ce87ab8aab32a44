// Audio front-end ops on f32 (layers/audio.cpp): the gather / scatter steps around a batched complex
// transform (DFT, STFT), the direct DFT and Bluestein's steps for lengths clFFT does not support, the window generators and
// MelWeightMatrix. Complex values are interleaved (re, im) float pairs; the transform works on a contiguous
// [batch, N] buffer, batch = (outer, inner) of the input around the transformed axis.

// Gathers the input of one DFT into work[b][k], b = o * inner + i, k < N, from x[o][j][i][c] (c < cin,
// cin 1: real input). Past the input's extent n_in the signal is zero (dft_length pads); past N it is
// dropped (dft_length truncates). hermitian: x holds bins 0 .. n_in - 1 of a Hermitian spectrum (a
// one-sided inverse): bin k > N / 2 is the conjugate of bin N - k.
__kernel void dft_gather(long n_in, long inner, int cin, long n, int hermitian, __global const float* x, long x_off,
                         __global float2* work) {
  const long k = get_global_id(0), b = get_global_id(1);
  const long o = b / inner, i = b - o * inner;
  long j = k;
  float sign = 1.0f;
  if (hermitian && k > n / 2) j = n - k, sign = -1.0f;
  float2 v = (float2)(0.0f, 0.0f);
  if (j < n_in) {
    __global const float* p = x + x_off + ((o * n_in + j) * inner + i) * cin;
    v.x = p[0];
    v.y = cin == 2 ? sign * p[1] : 0.0f;
  }
  work[b * n + k] = v;
}

// One bin of a direct DFT per work-item: out[b][k] = sum_t in[b][t] * exp(-+2 pi i k t / N), the twiddle of
// (k t mod N) read from a table computed in double on the host (so no phase error grows with k t);
// accumulates in f32. inverse: exp(+...) and a 1 / N scale (ONNX's inverse, as clFFT's backward).
__kernel void dft_direct(long n, int inverse, __global const float2* twiddle, __global const float2* in,
                         __global float2* out) {
  const long k = get_global_id(0), b = get_global_id(1);
  __global const float2* row = in + b * n;
  const float s = inverse ? 1.0f : -1.0f;
  float re = 0.0f, im = 0.0f;
  long idx = 0;  // k * t mod n
  for (long t = 0; t < n; ++t) {
    const float2 v = row[t], w = twiddle[idx];  // w = (cos, sin) of 2 pi idx / n
    re += v.x * w.x - s * v.y * w.y;
    im += v.y * w.x + s * v.x * w.y;
    idx += k;
    if (idx >= n) idx -= n;
  }
  if (inverse) re /= (float)n, im /= (float)n;
  out[b * n + k] = (float2)(re, im);
}

float2 cmul(float2 a, float2 b) { return (float2)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }

// Bluestein's DFT of length n as a circular convolution of length m >= 2 n - 1 (a power of 2, through
// clFFT): with the chirp w[t] = exp(-+i pi t^2 / n) (a table made in double on the host, t^2 mod 2 n exact),
// X[k] = w[k] * sum_t (x[t] w[t]) conj(w[k - t]). Step 1: a[b][j] = x[b][j] w[j] for j < n, 0 up to m.
__kernel void bluestein_pre(long n, long m, __global const float2* chirp, __global const float2* in,
                            __global float2* a) {
  const long j = get_global_id(0), b = get_global_id(1);
  a[b * m + j] = j < n ? cmul(in[b * n + j], chirp[j]) : (float2)(0.0f, 0.0f);
}

// Step 2, between the forward and the backward transform: A[b][j] *= B[j], B the transform of the
// conjugate chirp (made once at create).
__kernel void bluestein_mul(long m, __global const float2* bf, __global float2* a) {
  const long j = get_global_id(0), b = get_global_id(1);
  a[b * m + j] = cmul(a[b * m + j], bf[j]);
}

// Step 3: X[b][k] = w[k] c[b][k] (c the circular convolution; clFFT's backward scaled it by 1 / m), times
// `scale` (1 / n for ONNX's inverse).
__kernel void bluestein_post(long n, long m, float scale, __global const float2* chirp, __global const float2* c,
                             __global float2* out) {
  const long k = get_global_id(0), b = get_global_id(1);
  out[b * n + k] = cmul(c[b * m + k], chirp[k]) * scale;
}

// Scatters bins 0 .. m - 1 of work[b][k] (b = o * inner + i) to y[o][k][i][c]: cout 2 complex, cout 1 the
// real part (a one-sided inverse).
__kernel void dft_scatter(long m, long inner, long n, int cout, __global const float2* work, __global float* y,
                          long y_off) {
  const long i = get_global_id(0), k = get_global_id(1), o = get_global_id(2);
  const float2 v = work[(o * inner + i) * n + k];
  __global float* p = y + y_off + ((o * m + k) * inner + i) * cout;
  p[0] = v.x;
  if (cout == 2) p[1] = v.y;
}

// STFT frames: work[b * frames + f][t] = x[b][f * step + t] * window[t] (t < N; window 1 when absent).
__kernel void stft_frames(long length, int cin, long step, long n, long frames, int has_window,
                          __global const float* x, long x_off, __global const float* w, long w_off,
                          __global float2* work) {
  const long t = get_global_id(0), f = get_global_id(1), b = get_global_id(2);
  __global const float* p = x + x_off + (b * length + f * step + t) * cin;
  const float g = has_window ? w[w_off + t] : 1.0f;
  work[(b * frames + f) * n + t] = (float2)(p[0] * g, cin == 2 ? p[1] * g : 0.0f);
}

// HannWindow (kind 0), HammingWindow (1), BlackmanWindow (2) of `size` points: phase 2 pi i / d with d =
// size (periodic) or size - 1 (symmetric; a one-point symmetric window is [1]). cospi / sinpi keep the
// phase exact in the ratio i / d.
__kernel void window(int kind, long size, int periodic, __global float* y, long y_off) {
  const long i = get_global_id(0);
  const long d = periodic ? size : size - 1;
  float v = 1.0f;
  if (d > 0) {
    const float r = (float)i / (float)d;
    if (kind == 0) {
      const float s = sinpi(r);
      v = s * s;
    } else if (kind == 1) {
      v = 25.0f / 46.0f - (21.0f / 46.0f) * cospi(2.0f * r);
    } else {
      v = 0.42f - 0.5f * cospi(2.0f * r) + 0.08f * cospi(4.0f * r);
    }
  }
  y[y_off + i] = v;
}

// The frequency bin of mel point p of MelWeightMatrix: points p = 0 .. num_mel + 1 lie evenly on the mel
// scale (mel = 2595 log10(1 + hz / 700)) from the lower edge in steps of (high - low) / (num_mel + 2), as
// ONNX's reference places them; bin = floor((dft_length + 1) * hz / sample_rate).
long mel_point(long p, float low_mel, float step, long dft_length, float sample_rate) {
  const float mel = low_mel + (float)p * step;
  const float hz = 700.0f * (exp10(mel / 2595.0f) - 1.0f);
  return (long)floor((float)(dft_length + 1) * hz / sample_rate);
}

// One mel filter (column i of y [bins, num_mel]) per work-item, every row of it: rising from its left
// point to its centre, falling to its right one (the falling side wins at the centre, as in the
// reference); where left == centre the centre row is 1. Points outside [0, bins) touch no row (a constant
// matrix with such points is refused at load).
__kernel void mel_weight_matrix(long num_mel, long dft_length, long bins, int rate_i64, __global const void* rate,
                                long rate_off, __global const float* lower, long lower_off, __global const float* upper,
                                long upper_off, __global float* y, long y_off) {
  const long i = get_global_id(0);
  const float sr = rate_i64 ? (float)((__global const long*)rate)[rate_off] : (float)((__global const int*)rate)[rate_off];
  const float low_mel = 2595.0f * log10(1.0f + lower[lower_off] / 700.0f);
  const float high_mel = 2595.0f * log10(1.0f + upper[upper_off] / 700.0f);
  const float step = (high_mel - low_mel) / (float)(num_mel + 2);
  const long l = mel_point(i, low_mel, step, dft_length, sr), c = mel_point(i + 1, low_mel, step, dft_length, sr),
             h = mel_point(i + 2, low_mel, step, dft_length, sr);
  for (long j = 0; j < bins; ++j) {
    float v = 0.0f;
    if (h > c && j >= c && j < h) v = (float)(h - j) / (float)(h - c);
    else if (l == c && j == c) v = 1.0f;
    else if (l < c && j >= l && j <= c) v = (float)(j - l) / (float)(c - l);
    y[y_off + j * num_mel + i] = v;
  }
}
