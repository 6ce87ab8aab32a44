// Conv (2-D and 1-D, NCHW / NCL, ONNX semantics; 3-D NCDHW with the direct algorithm) with six algorithms,
// ConvTranspose, and the host-side BatchNorm folding into conv weights. Kernels: kernels/conv.cl; GEMM-based algorithms
// use layers/gemm.hpp.
//
// Weights are given as HOST tensors in the config and prepared once at create (uploaded, and for
// Winograd/FFT transformed); the op keeps its own device copies, so enqueue takes only the data input.
#pragma once
#include "layers/auto_pad.hpp"
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/activation.hpp"
#include "layers/gemm.hpp"
#include "layers/op.hpp"

namespace cldl {


// Algorithm choice. `automatic` heuristic (ConvOp::create, in this order):
//   groups == C == K (depthwise)                         -> depthwise
//   1x1, stride 1, no padding (dilation irrelevant)     -> gemm_1x1
//   3x3, stride 1, dilation 1, groups 1, C,K >= 16      -> winograd (F(4x4,3x3) on CPUs from 32 tiles, else F(2x2,3x3))
//   kernel >= 7x7, stride 1, dilation 1, groups 1       -> fft (FFT work does not grow with KH*KW)
//   C/group*KH*KW >= 16 (enough reduction for a GEMM)    -> im2col_gemm
//   otherwise                                           -> direct
// The order assumes a fast GEMM (layers/gemm.hpp). A tuning database entry (`cldl tune --op conv`)
// replaces the heuristic for its exact shape.
enum class ConvAlgo { automatic, im2col_gemm, gemm_1x1, direct, depthwise, winograd, fft };
std::string_view to_string(ConvAlgo a);

class Pool;  // layers/pool.hpp

struct ConvConfig {
  Shape input;        // [N, C, H, W], or [N, C, L] for 1-D convolution (treated as H = 1), or [N, C, D, H, W]
  HostTensor weight;  // f32 [K, C/groups, KH, KW] (or [K, C/groups, KL], [K, C/groups, KD, KH, KW])
  std::optional<HostTensor> bias;  // f32 [K]
  // ONNX attributes; empty = defaults (1s, 0s). 2-D: strides {sh, sw}, dilations {dh, dw},
  // pads {top, left, bottom, right}; 1-D: one / one / {begin, end}; 3-D: depth first, pads
  // {front, top, left, back, bottom, right}.
  std::vector<int64_t> strides, dilations, pads;
  AutoPad auto_pad = AutoPad::notset;
  int64_t groups = 1;
  Activation act;  // fused after bias (and the residual)
  // A residual R with the output's shape, an input after X, added after the bias and before the activation
  // (a residual Add fused into the epilogue: Y = act(conv(X) + bias + R)). gemm_1x1, im2col_gemm, winograd
  // and the 2-D direct kernels take it; applies() refuses depthwise and fft (the automatic choice then takes
  // the next applicable algorithm) and 3-D convolutions.
  bool residual = false;
  // A MaxPool of window 2x2, stride 2 (no pads, floor) after the activation: the output is [N, K, OH / 2, OW / 2].
  // conv_small_plane pools in its epilogue (its tiles are then four windows of 2x2 pixels); the other algorithms
  // write the convolution's output into the workspace and run the Pool op on it (two commands, no worse than
  // unfused). 2-D only, not with a residual.
  bool max_pool_2x2 = false;
  ConvAlgo algo = ConvAlgo::automatic;
  // Depthwise kernel: 1 = conv_depthwise (an output per work-item), 8 = conv_depthwise_rows (an output
  // row per work-item in vector strips of 8), 64 = conv_depthwise_plane (a whole plane per work-item from
  // a padded private copy; stride 1 or 2 and planes whose padded copy holds at most 2,304 floats), 16 =
  // conv_dw_flat (kernels/conv_dw.cl: float16 vectors along the flattened plane, bands of rows per work-item;
  // stride 1 with the output plane the input's size), 32 = conv_dw_s2 (kernels/conv_dw.cl: stride 2, an output
  // row per work-item from its input rows split into even and odd columns), 128 = conv_grouped_band's depthwise
  // form (kernels/conv.cl GB_DW: 8 channels x 2 rows of float16 strips per work-item from a private padded
  // copy; see grouped_band_geometry); 0 = by device: on CPUs 16 where it applies, else 64 where it applies,
  // else 128 at stride 2 on rows of 96 and more, else 32 where it applies, else 8; 1 elsewhere (neighbouring
  // items coalesce on GPUs).
  int depthwise_block = 0;
  // im2col kernel of im2col_gemm: 1 = im2col (KH*KW values per output pixel), 2 = im2col_rows (a
  // contiguous output row per work-item); 0 = by device: 2 on CPUs, 1 elsewhere.
  int im2col_kernel = 0;
  // Winograd transforms: 1 = winograd_input / _output (a tile per work-item), 2 = the _rows kernels (strips
  // of 8 tiles in float8 lanes); 0 = by device: 2 on CPUs, 1 elsewhere.
  int winograd_kernel = 0;
  // Winograd output tile: 2 = F(2x2,3x3) (16 products per tile), 4 = F(4x4,3x3) (36 products for 4x the
  // outputs: 1.8x fewer multiplies and 1.8x smaller transformed planes, slightly less accurate); 0 = by device
  // and shape: 4 on CPUs where it makes at least 32 tiles (see ConvOp::create), 2 elsewhere (unmeasured).
  int winograd_tile = 0;
  // Direct kernel (2-D): 1 = conv_direct (an output pixel per work-item, 8 channels), 2 = conv_grouped_rows
  // (an output row per work-item in float8 strips, 8 channels), 3 = conv_small_plane (8 output pixels x 16
  // channels per work-item, group 1 only), 4 = conv_grouped_band (bands of rows from a private padded copy,
  // float16 strips, 8 channels x 2 rows; see grouped_band_geometry for where it applies); 0 = by device: on
  // CPUs 4 for grouped convolutions and image stems (choose()) where it applies, else 2; 1 elsewhere; 3 where
  // choose() picks it for a small output plane on a CPU.
  int direct_kernel = 0;
};

// Resolved 2-D geometry (1-D problems have H = KH = 1).
struct ConvGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0, K = 0, KH = 0, KW = 0;
  int64_t SH = 1, SW = 1, DH = 1, DW = 1, PT = 0, PL = 0, PB = 0, PR = 0, groups = 1;
  int64_t OH = 0, OW = 0;
  bool one_d = false;
  // 3-D problems ([N, C, D, H, W]): the depth dim (input, kernel, stride, dilation, front / back pads,
  // output); 1s and 0s otherwise. They run the direct algorithm.
  int64_t D = 1, KD = 1, SD = 1, DD = 1, PF = 0, PK = 0, OD = 1;
  bool three_d = false;
  double flops() const { return 2.0 * double(N * K * OD * OH * OW) * double(C / groups * KD * KH * KW); }
};

// conv_grouped_band (kernels/conv.cl, grouped convolutions on CPUs): bands of `rows` output rows per work-item,
// the band's padded input copied into private memory as stride x stride phase planes of `prow` rows of `pitch`
// floats per input channel, at most kGroupedBandPrivate floats (GB_PRIVATE in conv.cl).
constexpr int64_t kGroupedBandPrivate = 8192;
struct GroupedBand {
  bool fits = false;
  bool depthwise = false;  // blocks of 8 channels, each its own group (GB_DW)
  int64_t rows = 0, bands = 0, pitch = 0, prow = 0;
};
// The bands for `g` (at least 64 work-items, or 8 per compute unit); fits false with `why` where the kernel
// does not apply (3-D, dilated, over 16 input channels per group, unequal strides or strides over 2, a kernel
// over 7x7, or a row's copy over the private budget).
GroupedBand grouped_band_geometry(const ConvGeometry& g, uint32_t compute_units, std::string* why = nullptr,
                                  bool depthwise = false);
int64_t grouped_band_items(const ConvGeometry& g, const GroupedBand& b);
// The weights as conv_grouped_band reads them: per group, blocks of 8 output channels, zeros past the group's
// last one ([groups][ceil(KG / 8)][8][C / groups * KH * KW]; depthwise: [ceil(C / 8)][8][KH * KW]).
HostTensor grouped_band_weights(const HostTensor& w, const ConvGeometry& g, bool depthwise);

// Inputs: X, [R] (cfg.residual); output: Y (must not overlap R). Workspace: workspace_bytes() (im2col columns, Winograd/FFT planes).
class ConvOp : public Op {
 public:
  // Checks the config; returns the output shape. Errors name Conv, the argument and the value.
  static Shape validate(const ConvConfig& cfg);
  static ConvGeometry geometry(const ConvConfig& cfg);  // validates too
  // Whether `algo` can run this (valid) config; `why` says why not.
  static bool applies(const ConvConfig& cfg, ConvAlgo algo, std::string* why = nullptr);
  // The algorithm `create` would use (cfg.algo, or the heuristic above when automatic); `why` says why.
  static ConvAlgo choose(const ConvConfig& cfg, std::string* why = nullptr);
  // What create() uses: the tuning database's choice for this shape on `info` (family "conv") when
  // cfg.algo is automatic and an entry exists, else choose(cfg).
  static ConvAlgo choose(const ConvConfig& cfg, const DeviceInfo& info, std::string* why = nullptr);
  // The Winograd output tile create() uses for this config on `info` (cfg.winograd_tile, or 4 / 2 by device
  // and shape).
  static int winograd_tile_for(const ConvConfig& cfg, const DeviceInfo& info);
  int winograd_tile() const { return winograd_m_; }
  bool grouped_band() const { return band_.fits; }  // runs conv_grouped_band
  bool depthwise_s2() const { return depthwise_s2_; }  // runs conv_dw_s2
  // The GEMMs this op runs (GEMM-based algorithms), as configured before the GEMM's own choices.
  std::vector<GemmConfig> gemm_configs() const;
  static std::unique_ptr<ConvOp> create(Context& ctx, int device, const ConvConfig& cfg);
  ~ConvOp() override;

  std::string_view type() const override { return "Conv"; }
  std::string algorithm() const override;
  ConvAlgo algo() const { return algo_; }
  size_t workspace_bytes() const override { return workspace_; }
  const ConvGeometry& geom() const { return g_; }
  Shape output_shape() const { return pool_shape_.rank() ? pool_shape_ : out_shape_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ConvOp() = default;
  void prepare_fft(const ConvConfig& cfg);  // layers/conv_fft.cpp
  void enqueue_fft(const Tensor& x, const Tensor& y, const Tensor& ws, ExecutionContext& ec);
  void release_fft();
  Context* ctx_ = nullptr;
  int device_ = 0;
  ConvGeometry g_;
  Shape out_shape_;
  Activation act_;
  bool residual_ = false;  // inputs[1] is added in the epilogue
  Shape pool_shape_;       // max_pool_2x2: the pooled output's shape (rank 0 without)
  std::unique_ptr<Pool> pool_;  // max_pool_2x2 where the kernel does not pool: the Pool op after it
  size_t pool_ws_off_ = 0;            // ... and where its input (the convolution's output) lies in the workspace
  void run(std::span<const Tensor> inputs, const Tensor& y, const Tensor* workspace, ExecutionContext& ec);
  ConvAlgo algo_ = ConvAlgo::direct;
  size_t workspace_ = 0;
  Tensor weight_, bias_;  // device copies (weight_ transformed for Winograd / FFT)
  bool has_bias_ = false;
  cl::Kernel main_, pre_, post_;                 // algorithm kernels (see create)
  cl::NDRange local_main_ = cl::NullRange, local_pre_ = cl::NullRange, local_post_ = cl::NullRange;
  cl::NDRange global_main_ = cl::NullRange;      // conv_depthwise_rows: padded to local_main_
  bool depthwise_rows_ = false;                  // depthwise: conv_depthwise_rows (a row per work-item)
  bool depthwise_plane_ = false;                 // depthwise: conv_depthwise_plane (a plane per work-item)
  int dw_pr_ = 0, dw_pc_ = 0;                    // conv_depthwise_plane: rows and columns of the padded copy
  bool im2col_rows_ = false;                     // im2col_gemm: im2col_rows (a row per work-item)
  bool winograd_rows_ = false;                   // winograd: the _rows transforms (strips of 8 tiles)
  int winograd_m_ = 2;                           // winograd: output tile (2: F(2x2,3x3), 4: F(4x4,3x3))
  bool direct_plane_ = false;                    // direct: conv_small_plane (8 pixels x 16 channels per work-item)
  int64_t kpad_ = 0;  // conv_small_plane: K rounded up to 16 * sp_kv_ (the transposed weight's row)
  Tensor offsets_;    // conv_small_plane: each tile's input offsets per tap (i32 [tiles][KH*KW][8])
  int sp_kv_ = 1;     // conv_small_plane: float16 vectors of output channels per work-item (SP_KV)
  bool direct_rows_ = false;                     // direct: conv_grouped_rows (a row per work-item)
  GroupedBand band_;                             // direct: conv_grouped_band where band_.fits
  cl::NDRange global_post_ = cl::NullRange;      // winograd_output_rows: padded to local_post_
  cl::NDRange global_pre_ = cl::NullRange;       // im2col_rows: padded to local_pre_
  std::vector<std::unique_ptr<Gemm>> gemm_;      // one per group (GEMM-based) or one (Winograd)
  // FFT: plan handles (clfftPlanHandle), transform sizes.
  size_t fft_fwd_ = 0, fft_inv_ = 0, fft_inv_batch_ = 0;
  bool fft_plans_ = false;
  int64_t fh_ = 0, fw_ = 0;
  bool depthwise_flat_ = false;  // depthwise: conv_dw_flat (kernels/conv_dw.cl), dw_pr_ bands of rows
  bool depthwise_s2_ = false;    // depthwise: conv_dw_s2 (kernels/conv_dw.cl), dw_pr_ bands of rows
};

enum class ConvTransposeAlgo { automatic, direct, gemm_col2im };

struct ConvTransposeConfig {
  Shape input;                     // [N, C, H, W], [N, C, L] or [N, C, D, H, W]
  HostTensor weight;               // f32 [C, K/groups, KH, KW] (or [C, K/groups, KL], [C, K/groups, KD, KH, KW])
  std::optional<HostTensor> bias;  // f32 [K]
  // Empty = defaults; layout as Conv (3-D: {sd, sh, sw}, pads {front, top, left, back, bottom, right}).
  std::vector<int64_t> strides, dilations, pads, output_padding;
  int64_t groups = 1;
  Activation act;
  ConvTransposeAlgo algo = ConvTransposeAlgo::automatic;
};

// ConvTranspose (ONNX, 1-D to 3-D), two algorithms:
// - direct: a gather kernel, each output pixel sums its taps over the input channels (any rank);
// - gemm_col2im (1-D, 2-D): per group, col = weight^T x input as one batched GEMM (the GEMM library's
//   speed), then col2im adds each output pixel's taps from col, bias and activation: on CPUs an output
//   row per work-item scattered from col's rows (col2im_transpose_rows), elsewhere a gather per pixel
//   (col2im_transpose).
//   Needs a workspace of N * K * KH * KW * H * W floats.
// automatic: gemm_col2im for 1-D / 2-D problems with at least 8 input channels per group (the GEMM's
// reduction), direct otherwise (measurements in layers/conv_transpose.cpp). Logged at debug level.
// Output H = SH*(H-1) + output_padding + (KH-1)*DH + 1 - PT - PB (and so for D and W).
class ConvTransposeOp : public Op {
 public:
  static Shape validate(const ConvTransposeConfig& cfg);
  static std::unique_ptr<ConvTransposeOp> create(Context& ctx, int device, const ConvTransposeConfig& cfg);
  std::string_view type() const override { return "ConvTranspose"; }
  std::string algorithm() const override { return algo_ == ConvTransposeAlgo::direct ? "direct" : "gemm_col2im"; }
  ConvTransposeAlgo algo() const { return algo_; }
  size_t workspace_bytes() const override { return workspace_; }
  Shape output_shape() const { return out_shape_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ConvTransposeOp() = default;
  ConvGeometry g_;
  cl_int8 depth_{};  // D, OD, KD, SD, DD, PF of a 3-D problem; 1, 1, 1, 1, 1, 0 otherwise
  Shape out_shape_;
  Activation act_;
  Tensor weight_, bias_;
  bool has_bias_ = false;
  cl::Kernel kernel_;
  ConvTransposeAlgo algo_ = ConvTransposeAlgo::direct;
  std::unique_ptr<Gemm> gemm_;  // gemm_col2im: col = weight^T x input, one group (views select the group)
  bool col2im_rows_ = false;    // col2im_transpose_rows (CPUs) instead of col2im_transpose
  cl::NDRange col2im_global_, col2im_local_;
  size_t workspace_ = 0;
};

// Folds an inference BatchNorm y = scale * (x - mean) / sqrt(var + epsilon) + b that follows a conv into
// the conv's weight [K, ...] and bias [K] (created as zeros when absent). Works for Dense weights
// [K, ...] too. Errors name BatchNorm and the mismatched argument.
void fold_batch_norm(HostTensor& weight, std::optional<HostTensor>& bias, const HostTensor& scale,
                     const HostTensor& b, const HostTensor& mean, const HostTensor& var, float epsilon);

}  // namespace cldl
