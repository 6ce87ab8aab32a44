// RoiAlign, GridSample, AffineGrid, CenterCropPad, Col2Im and DeformConv: shape rules, attribute checks and the kernel
// arguments of kernels/vision.cl (CenterCropPad: data.cl's pad kernel).
#include "layers/vision.hpp"

#include <algorithm>

#include "layers/gemm.hpp"
#include "layers/tensor_checks.hpp"

namespace cldl {

namespace {
// The one build of vision.cl (f32; what `cldl compile` prepares).
const ProgramVariants kVisionVariants("vision.cl", {""});

cl::Kernel vision_kernel(Context& ctx, int device, const char* name) {
  return make_kernel(ctx.program("vision.cl", "", device), name);
}

void check_io(std::string_view op, std::span<const Tensor> in, size_t n_in, std::span<const Tensor> out, size_t n_out) {
  if (in.size() != n_in || out.size() != n_out)
    invalid(op, "expects {} inputs and {} outputs, got {} and {}", n_in, n_out, in.size(), out.size());
}

cl_long4 long4_of(const std::vector<int64_t>& v) {
  cl_long4 r{};
  for (size_t i = 0; i < v.size() && i < 4; ++i) r.s[i] = v[i];
  return r;
}

cl_long8 long8_of(const std::vector<int64_t>& v, int64_t fill = 0) {
  cl_long8 r{};
  for (size_t i = 0; i < 8; ++i) r.s[i] = i < v.size() ? v[i] : fill;
  return r;
}
}  // namespace

// ---------------------------------------------------------------- RoiAlign
Shape RoiAlign::validate(const RoiAlignConfig& c) {
  if (c.input.rank() != 4) invalid("RoiAlign", "input X must be 4-D [N, C, H, W], got shape {}", c.input.str());
  check_dims("RoiAlign", c.input, "input X");
  if (c.num_rois < 0) invalid("RoiAlign", "num_rois = {} is negative", c.num_rois);
  if (c.output_height < 1 || c.output_width < 1)
    invalid("RoiAlign", "output_height and output_width must be >= 1, got {} and {}", c.output_height, c.output_width);
  if (c.sampling_ratio < 0) invalid("RoiAlign", "sampling_ratio must be >= 0, got {}", c.sampling_ratio);
  if (c.num_rois > 0 && (c.input[2] == 0 || c.input[3] == 0))
    invalid("RoiAlign", "input X has an empty spatial extent (shape {})", c.input.str());
  return Shape{c.num_rois, c.input[1], c.output_height, c.output_width};
}

std::unique_ptr<RoiAlign> RoiAlign::create(Context& ctx, int device, const RoiAlignConfig& cfg) {
  std::unique_ptr<RoiAlign> r(new RoiAlign());
  r->cfg_ = cfg;
  r->out_ = validate(cfg);
  r->kernel_ = vision_kernel(ctx, device, "roi_align");
  return r;
}

void RoiAlign::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("RoiAlign", in, 3, out, 1);
  check_tensor("RoiAlign", "input X", in[0], cfg_.input, DType::f32);
  check_tensor("RoiAlign", "input rois", in[1], Shape{cfg_.num_rois, 4}, DType::f32);
  check_tensor("RoiAlign", "input batch_indices", in[2], Shape{cfg_.num_rois}, DType::i64);
  check_tensor("RoiAlign", "output Y", out[0], out_, DType::f32);
  if (out_.numel() == 0) return;
  const Shape& s = cfg_.input;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(s[1]), cl_long(s[2]), cl_long(s[3]), cl_long(s[0]), cl_int(cfg_.output_height),
           cl_int(cfg_.output_width), cl_int(cfg_.sampling_ratio), cl_float(cfg_.spatial_scale),
           cl_int(cfg_.half_pixel ? 1 : 0), cl_int(cfg_.mode == RoiAlignMode::max ? 1 : 0), in[0].buffer,
           cl_long(in[0].offset_elems()), in[1].buffer, cl_long(in[1].offset_elems()), in[2].buffer,
           cl_long(in[2].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(cfg_.output_width), size_t(cfg_.output_height), size_t(cfg_.num_rois)),
                    cl::NullRange, "roi_align");
}

// ---------------------------------------------------------------- GridSample
Shape GridSample::validate(const GridSampleConfig& c) {
  const size_t r = c.input.rank();
  if (r < 3 || r > 5)
    invalid("GridSample", "input X must have 1 to 3 spatial dims ([N, C, D1 ... Dk]), got shape {}", c.input.str());
  check_dims("GridSample", c.input, "input X");
  check_dims("GridSample", c.grid, "input grid");
  const size_t k = r - 2;
  if (c.grid.rank() != r || c.grid[r - 1] != int64_t(k))
    invalid("GridSample", "input grid must have shape [N, P1 ... P{}, {}] for input X of shape {}, got {}", k, k,
            c.input.str(), c.grid.str());
  if (c.grid[0] != c.input[0])
    invalid("GridSample", "input grid has batch {}, but input X has {}", c.grid[0], c.input[0]);
  Shape out{c.input[0], c.input[1]};
  for (size_t i = 1; i + 1 < r; ++i) out.dims.push_back(c.grid[i]);
  if (out.numel() > 0)
    for (size_t i = 2; i < r; ++i)
      if (c.input[i] == 0) invalid("GridSample", "input X has an empty spatial dim (shape {})", c.input.str());
  return out;
}

std::unique_ptr<GridSample> GridSample::create(Context& ctx, int device, const GridSampleConfig& cfg) {
  std::unique_ptr<GridSample> g(new GridSample());
  g->cfg_ = cfg;
  g->out_ = validate(cfg);
  g->kernel_ = vision_kernel(ctx, device, "grid_sample");
  return g;
}

void GridSample::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("GridSample", in, 2, out, 1);
  check_tensor("GridSample", "input X", in[0], cfg_.input, DType::f32);
  check_tensor("GridSample", "input grid", in[1], cfg_.grid, DType::f32);
  check_tensor("GridSample", "output Y", out[0], out_, DType::f32);
  if (out_.numel() == 0) return;
  const int nd = int(cfg_.input.rank()) - 2;
  std::vector<int64_t> dims(cfg_.input.dims.begin() + 2, cfg_.input.dims.end());
  int64_t points = 1;
  for (size_t i = 2; i < out_.rank(); ++i) points *= out_[i];
  const int mode = cfg_.mode == GridSampleMode::linear ? 0 : cfg_.mode == GridSampleMode::nearest ? 1 : 2;
  const int padding = cfg_.padding == GridPadding::zeros ? 0 : cfg_.padding == GridPadding::border ? 1 : 2;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(nd), cl_int(mode), cl_int(padding), cl_int(cfg_.align_corners ? 1 : 0),
           cl_long(cfg_.input[1]), long4_of(dims), cl_long(points), in[0].buffer, cl_long(in[0].offset_elems()),
           in[1].buffer, cl_long(in[1].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(points), size_t(cfg_.input[0])), cl::NullRange, "grid_sample");
}

// ---------------------------------------------------------------- AffineGrid
Shape AffineGrid::validate(const AffineGridConfig& c) {
  const size_t n = c.size.size();
  if (n != 4 && n != 5) invalid("AffineGrid", "size must hold 4 values [N, C, H, W] or 5 [N, C, D, H, W], got {}", n);
  for (auto v : c.size)
    if (v < 0) invalid("AffineGrid", "size holds a negative extent {}", v);
  const int64_t nd = int64_t(n) - 2;
  if (c.theta != Shape{c.size[0], nd, nd + 1})
    invalid("AffineGrid", "theta must have shape [{}, {}, {}] for size of {} values with N = {}, got {}", c.size[0], nd,
            nd + 1, n, c.size[0], c.theta.str());
  Shape out{c.size[0]};
  for (size_t i = 2; i < n; ++i) out.dims.push_back(c.size[i]);
  out.dims.push_back(nd);
  return out;
}

std::unique_ptr<AffineGrid> AffineGrid::create(Context& ctx, int device, const AffineGridConfig& cfg) {
  std::unique_ptr<AffineGrid> a(new AffineGrid());
  a->cfg_ = cfg;
  a->out_ = validate(cfg);
  a->kernel_ = vision_kernel(ctx, device, "affine_grid");
  return a;
}

void AffineGrid::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("AffineGrid", in, 1, out, 1);
  check_tensor("AffineGrid", "input theta", in[0], cfg_.theta, DType::f32);
  check_tensor("AffineGrid", "output grid", out[0], out_, DType::f32);
  if (out_.numel() == 0) return;
  const int nd = int(cfg_.size.size()) - 2;
  std::vector<int64_t> dims(cfg_.size.begin() + 2, cfg_.size.end());
  int64_t points = 1;
  for (auto d : dims) points *= d;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(nd), cl_int(cfg_.align_corners ? 1 : 0), long4_of(dims), in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(points), size_t(cfg_.size[0])), cl::NullRange, "affine_grid");
}

// ---------------------------------------------------------------- CenterCropPad
namespace {
// Output shape and, per dim, output index - input index (the pad kernel's begin; negative crops).
Shape center_crop_pad_plan(const CenterCropPadConfig& c, std::vector<int64_t>& begin) {
  const int64_t r = int64_t(c.input.rank());
  if (r > 8) invalid("CenterCropPad", "input rank {} exceeds the supported 8", r);
  check_dims("CenterCropPad", c.input, "input");
  std::vector<int64_t> axes = c.axes;
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  if (c.shape.size() != axes.size())
    invalid("CenterCropPad", "shape holds {} values, expected {} (one per axis)", c.shape.size(), axes.size());
  Shape out = c.input;
  begin.assign(size_t(r), 0);
  std::vector<bool> seen(size_t(r), false);
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t a = axes[k];
    if (a < -r || a >= r) invalid("CenterCropPad", "axes[{}] = {} is out of range for rank {}", k, a, r);
    if (a < 0) a += r;
    if (seen[size_t(a)]) invalid("CenterCropPad", "axis {} appears twice in axes", a);
    seen[size_t(a)] = true;
    const int64_t want = c.shape[k], have = c.input[size_t(a)];
    if (want < 0) invalid("CenterCropPad", "shape[{}] = {} is negative", k, want);
    out[size_t(a)] = want;
    begin[size_t(a)] = want >= have ? (want - have) / 2 : -((have - want) / 2);
  }
  return out;
}
}  // namespace

Shape CenterCropPad::validate(const CenterCropPadConfig& c) {
  std::vector<int64_t> begin;
  return center_crop_pad_plan(c, begin);
}

std::unique_ptr<CenterCropPad> CenterCropPad::create(Context& ctx, int device, const CenterCropPadConfig& cfg) {
  std::unique_ptr<CenterCropPad> p(new CenterCropPad());
  p->cfg_ = cfg;
  p->out_ = center_crop_pad_plan(cfg, p->begin_);
  const size_t es = dtype_size(cfg.dtype);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    invalid("CenterCropPad", "dtype {} is not supported (elements of 1, 2, 4 or 8 bytes)", to_string(cfg.dtype));
  // data.cl's Pad kernel in constant mode reads input index = output index - begin, zero outside the input:
  // a negative begin is a centre crop.
  p->kernel_ = make_kernel(ctx.program("data.cl", "", device), fmt::format("pad_{}", es).c_str());
  return p;
}

void CenterCropPad::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                            ExecutionContext& ec) {
  check_io("CenterCropPad", in, 1, out, 1);
  check_tensor("CenterCropPad", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("CenterCropPad", "output", out[0], out_, cfg_.dtype);
  if (out_.numel() == 0) return;
  const bool scalar = cfg_.input.rank() == 0;
  const std::vector<int64_t> is = scalar ? std::vector<int64_t>{1} : cfg_.input.dims;
  const std::vector<int64_t> os = scalar ? std::vector<int64_t>{1} : out_.dims;
  const std::vector<int64_t> begin = scalar ? std::vector<int64_t>{0} : begin_;
  std::lock_guard lock(launch_mutex_);
  auto launch = [&](auto zero) {
    set_args(kernel_, cl_int(is.size()), cl_int(0), zero, long8_of(os), long8_of(is), long8_of(begin), in[0].buffer,
             cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  };
  switch (dtype_size(cfg_.dtype)) {
    case 1:
      launch(cl_uchar(0));
      break;
    case 2:
      launch(cl_ushort(0));
      break;
    case 4:
      launch(cl_uint(0));
      break;
    default:
      launch(cl_ulong(0));
      break;
  }
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(out_.numel())), cl::NullRange, "center_crop_pad");
}

// ---------------------------------------------------------------- Col2Im
namespace {
struct Col2ImGeometry {
  std::vector<int64_t> dil, pad_begin, stride, blocks;
};

Col2ImGeometry col2im_geometry(const Col2ImConfig& c) {
  const size_t nd = c.image.size();
  if (nd < 1 || nd > 8) invalid("Col2Im", "image_shape must hold 1 to 8 values, got {}", nd);
  if (c.block.size() != nd)
    invalid("Col2Im", "block_shape holds {} values, but image_shape holds {}", c.block.size(), nd);
  Col2ImGeometry g;
  g.dil = c.dilations.empty() ? std::vector<int64_t>(nd, 1) : c.dilations;
  g.stride = c.strides.empty() ? std::vector<int64_t>(nd, 1) : c.strides;
  std::vector<int64_t> pads = c.pads.empty() ? std::vector<int64_t>(2 * nd, 0) : c.pads;
  if (g.dil.size() != nd) invalid("Col2Im", "dilations holds {} values, expected {}", g.dil.size(), nd);
  if (g.stride.size() != nd) invalid("Col2Im", "strides holds {} values, expected {}", g.stride.size(), nd);
  if (pads.size() != 2 * nd) invalid("Col2Im", "pads holds {} values, expected {}", pads.size(), 2 * nd);
  for (size_t i = 0; i < nd; ++i) {
    if (c.image[i] < 1) invalid("Col2Im", "image_shape[{}] = {} must be >= 1", i, c.image[i]);
    if (c.block[i] < 1) invalid("Col2Im", "block_shape[{}] = {} must be >= 1", i, c.block[i]);
    if (g.dil[i] < 1) invalid("Col2Im", "dilations[{}] = {} must be >= 1", i, g.dil[i]);
    if (g.stride[i] < 1) invalid("Col2Im", "strides[{}] = {} must be >= 1", i, g.stride[i]);
    if (pads[i] < 0 || pads[i + nd] < 0)
      invalid("Col2Im", "pads on dim {} are negative ({}, {})", i, pads[i], pads[i + nd]);
    const int64_t span = c.image[i] + pads[i] + pads[i + nd] - g.dil[i] * (c.block[i] - 1) - 1;
    if (span < 0)
      invalid("Col2Im", "the block (extent {}, dilation {}) does not fit image dim {} of {} with pads ({}, {})",
              c.block[i], g.dil[i], i, c.image[i], pads[i], pads[i + nd]);
    g.blocks.push_back(span / g.stride[i] + 1);
    g.pad_begin.push_back(pads[i]);
  }
  return g;
}
}  // namespace

Shape Col2Im::validate(const Col2ImConfig& c) {
  if (c.input.rank() != 3)
    invalid("Col2Im", "input must be 3-D [N, C * prod(block_shape), L], got shape {}", c.input.str());
  check_dims("Col2Im", c.input, "input");
  Col2ImGeometry g = col2im_geometry(c);
  int64_t kernel = 1, length = 1;
  for (size_t i = 0; i < c.block.size(); ++i) kernel *= c.block[i], length *= g.blocks[i];
  if (c.input[1] % kernel != 0)
    invalid("Col2Im", "input dim 1 ({}) is not a multiple of the block size {} (product of block_shape)", c.input[1],
            kernel);
  if (c.input[2] != length)
    invalid("Col2Im", "input dim 2 is {}, but the image and block shapes give {} sliding blocks", c.input[2], length);
  Shape out{c.input[0], c.input[1] / kernel};
  for (auto d : c.image) out.dims.push_back(d);
  return out;
}

std::unique_ptr<Col2Im> Col2Im::create(Context& ctx, int device, const Col2ImConfig& cfg) {
  std::unique_ptr<Col2Im> c(new Col2Im());
  c->cfg_ = cfg;
  c->out_ = validate(cfg);
  c->blocks_ = col2im_geometry(cfg).blocks;
  c->kernel_ = vision_kernel(ctx, device, "col2im");
  return c;
}

void Col2Im::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Col2Im", in, 1, out, 1);
  check_tensor("Col2Im", "input", in[0], cfg_.input, DType::f32);
  check_tensor("Col2Im", "output", out[0], out_, DType::f32);
  if (out_.numel() == 0) return;
  Col2ImGeometry g = col2im_geometry(cfg_);
  int64_t spatial = 1;
  for (auto d : cfg_.image) spatial *= d;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(cfg_.image.size()), long8_of(cfg_.image, 1), long8_of(cfg_.block, 1), long8_of(g.dil, 1),
           long8_of(g.pad_begin), long8_of(g.stride, 1), long8_of(g.blocks, 1), cl_long(out_[1]), in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(spatial), size_t(out_[0] * out_[1])), cl::NullRange, "col2im");
}

// ---------------------------------------------------------------- DeformConv
namespace {
struct DeformGeometry {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

DeformGeometry deform_geometry(const DeformConvConfig& c) {
  auto two = [&](const std::vector<int64_t>& v, int64_t def, const char* name, size_t n) {
    if (v.empty()) return std::vector<int64_t>(n, def);
    if (v.size() != n) invalid("DeformConv", "{} holds {} values, expected {}", name, v.size(), n);
    return v;
  };
  auto s = two(c.strides, 1, "strides", 2), p = two(c.pads, 0, "pads", 4), d = two(c.dilations, 1, "dilations", 2);
  for (int i = 0; i < 2; ++i) {
    if (s[i] < 1) invalid("DeformConv", "strides[{}] = {} must be >= 1", i, s[i]);
    if (d[i] < 1) invalid("DeformConv", "dilations[{}] = {} must be >= 1", i, d[i]);
  }
  for (int i = 0; i < 4; ++i)
    if (p[i] < 0) invalid("DeformConv", "pads[{}] = {} is negative", i, p[i]);
  return {s[0], s[1], p[0], p[1], d[0], d[1]};
}
}  // namespace

Shape DeformConv::validate(const DeformConvConfig& c) {
  if (c.input.rank() != 4) invalid("DeformConv", "input X must be 4-D [N, C, H, W], got shape {}", c.input.str());
  if (c.weight.rank() != 4)
    invalid("DeformConv", "input W must be 4-D [oC, C / group, kH, kW], got shape {}", c.weight.str());
  check_dims("DeformConv", c.input, "input X");
  check_dims("DeformConv", c.weight, "input W");
  if (c.group < 1 || c.offset_group < 1)
    invalid("DeformConv", "group ({}) and offset_group ({}) must be >= 1", c.group, c.offset_group);
  if (c.input[1] != c.weight[1] * c.group || c.weight[0] % c.group != 0)
    invalid("DeformConv",
            "input X has {} channels and W shape {}: expected C = W[1] * group ({}) and W[0] a multiple of group",
            c.input[1], c.weight.str(), c.group);
  if (c.input[1] % c.offset_group != 0)
    invalid("DeformConv", "input X's {} channels are not a multiple of offset_group {}", c.input[1], c.offset_group);
  DeformGeometry g = deform_geometry(c);
  std::vector<int64_t> p = c.pads.empty() ? std::vector<int64_t>(4, 0) : c.pads;
  const int64_t oh = (c.input[2] + p[0] + p[2] - ((c.weight[2] - 1) * g.dh + 1)) / g.sh + 1;
  const int64_t ow = (c.input[3] + p[1] + p[3] - ((c.weight[3] - 1) * g.dw + 1)) / g.sw + 1;
  if (oh < 1 || ow < 1)
    invalid("DeformConv", "the kernel {}x{} (dilations {}, {}) does not fit input {} with pads [{}, {}, {}, {}]",
            c.weight[2], c.weight[3], g.dh, g.dw, c.input.str(), p[0], p[1], p[2], p[3]);
  return Shape{c.input[0], c.weight[0], oh, ow};
}

std::unique_ptr<DeformConv> DeformConv::create(Context& ctx, int device, const DeformConvConfig& cfg) {
  std::unique_ptr<DeformConv> d(new DeformConv());
  d->cfg_ = cfg;
  d->out_ = validate(cfg);
  d->kernel_ = vision_kernel(ctx, device, "deform_conv");
  d->im2col_ = vision_kernel(ctx, device, "deform_im2col");
  const int64_t taps = cfg.weight[2] * cfg.weight[3], K = cfg.weight[1] * taps, P = d->out_[2] * d->out_[3];
  GemmConfig g;
  g.M = cfg.weight[0] / cfg.group, g.N = P, g.K = K;
  g.bias = cfg.has_bias ? GemmBias::per_row : GemmBias::none;
  if (g.M * g.N * g.K > 0) d->gemm_ = Gemm::create(ctx, device, g);
  return d;
}

std::string DeformConv::algorithm() const {
  return gemm_ ? "sampled columns + " + gemm_->algorithm() + " per group (direct without a workspace)" : "direct";
}

size_t DeformConv::workspace_bytes() const {
  return size_t(cfg_.input[1] * cfg_.weight[2] * cfg_.weight[3] * out_[2] * out_[3]) * sizeof(float);
}

void DeformConv::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* workspace,
                         ExecutionContext& ec) {
  check_io("DeformConv", in, 3 + size_t(cfg_.has_bias) + size_t(cfg_.has_mask), out, 1);
  const Shape& x = cfg_.input;
  const int64_t taps = cfg_.weight[2] * cfg_.weight[3];
  check_tensor("DeformConv", "input X", in[0], x, DType::f32);
  check_tensor("DeformConv", "input W", in[1], cfg_.weight, DType::f32);
  check_tensor("DeformConv", "input offset", in[2], Shape{x[0], cfg_.offset_group * 2 * taps, out_[2], out_[3]},
               DType::f32);
  size_t next = 3;
  const Tensor* bias = nullptr;
  const Tensor* mask = nullptr;
  if (cfg_.has_bias) {
    bias = &in[next++];
    check_tensor("DeformConv", "input B", *bias, Shape{cfg_.weight[0]}, DType::f32);
  }
  if (cfg_.has_mask) {
    mask = &in[next++];
    check_tensor("DeformConv", "input mask", *mask, Shape{x[0], cfg_.offset_group * taps, out_[2], out_[3]},
                 DType::f32);
  }
  check_tensor("DeformConv", "output Y", out[0], out_, DType::f32);
  if (out_.numel() == 0) return;
  DeformGeometry g = deform_geometry(cfg_);
  // Absent bias / mask: the offset buffer stands in (never read).
  const Tensor& b = bias ? *bias : in[2];
  const Tensor& m = mask ? *mask : in[2];
  std::lock_guard lock(launch_mutex_);
  const size_t ws_bytes = workspace_bytes();
  if (gemm_ && workspace && workspace->bytes() >= ws_bytes) {
    const int64_t K = cfg_.weight[1] * taps, P = out_[2] * out_[3], ocpg = out_[1] / cfg_.group;
    for (int64_t n = 0; n < x[0]; ++n) {
      set_args(im2col_, cl_long(n), cl_long(x[1]), cl_long(x[2]), cl_long(x[3]), cl_long(out_[2]), cl_long(out_[3]),
               cl_int(cfg_.weight[2]), cl_int(cfg_.weight[3]), cl_int(g.sh), cl_int(g.sw), cl_int(g.ph), cl_int(g.pw),
               cl_int(g.dh), cl_int(g.dw), cl_long(cfg_.offset_group), cl_int(mask ? 1 : 0), in[0].buffer,
               cl_long(in[0].offset_elems()), in[2].buffer, cl_long(in[2].offset_elems()), m.buffer,
               cl_long(m.offset_elems()), workspace->buffer, cl_long(workspace->offset_elems()));
      ec.enqueue_kernel(im2col_, cl::NDRange(size_t(P), size_t(taps), size_t(x[1])), cl::NullRange, "deform_im2col");
      for (int64_t gi = 0; gi < cfg_.group; ++gi) {
        Tensor a = in[1].slice_elems(gi * ocpg * K, ocpg * K, Shape{ocpg, K});
        Tensor bm = workspace->slice_elems(gi * K * P, K * P, Shape{K, P});
        Tensor c = out[0].slice_elems((n * out_[1] + gi * ocpg) * P, ocpg * P, Shape{ocpg, P});
        Tensor bias_g = bias ? bias->slice_elems(gi * ocpg, ocpg, Shape{ocpg}) : Tensor{};
        static_cast<Gemm&>(*gemm_).run(a, bm, c, ec, bias ? &bias_g : nullptr);
      }
    }
    return;
  }
  set_args(kernel_, cl_long(x[1]), cl_long(x[2]), cl_long(x[3]), cl_long(out_[1]), cl_long(out_[2]), cl_long(out_[3]),
           cl_int(cfg_.weight[2]), cl_int(cfg_.weight[3]), cl_int(g.sh), cl_int(g.sw), cl_int(g.ph), cl_int(g.pw),
           cl_int(g.dh), cl_int(g.dw), cl_long(cfg_.group), cl_long(cfg_.offset_group), cl_int(mask ? 1 : 0),
           cl_int(bias ? 1 : 0), in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
           cl_long(in[1].offset_elems()), in[2].buffer, cl_long(in[2].offset_elems()), b.buffer,
           cl_long(b.offset_elems()), m.buffer, cl_long(m.offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(out_[3]), size_t(out_[2]), size_t(out_[0] * out_[1])), cl::NullRange,
                    "deform_conv");
}

}  // namespace cldl
