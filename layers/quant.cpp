// Quantization ops: validation, scale layouts, shapes and enqueue (kernels/quant.cl).
#include "layers/quant.hpp"

#include <algorithm>

#include "layers/strided.hpp"
#include "runtime/log.hpp"
#include "runtime/minifloat.hpp"

namespace cldl {

namespace {
const ProgramVariants kQuantVariants("quant.cl", {"-DQTILE=16"});

bool is_float_scale(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }
bool is_quant_int(DType t) {
  return t == DType::u8 || t == DType::i8 || t == DType::u16 || t == DType::i16 || t == DType::u4 || t == DType::i4 ||
         t == DType::u2 || t == DType::i2;
}
// Targets of QuantizeLinear (and sources of DequantizeLinear): integers and the float8 / float4 types.
bool is_quant_type(DType t) { return is_quant_int(t) || (is_minifloat(t) && t != DType::f8e8m0); }
bool is_byte_int(DType t) { return t == DType::u8 || t == DType::i8; }

// A tensor that is present, with the expected dtype and element count (shape checked by the caller).
void check_input(std::string_view op, const char* arg, const Tensor& t, DType dt, int64_t numel) {
  if (!t.valid()) invalid(op, "input {} is missing", arg);
  if (t.dtype != dt) invalid(op, "input {} has dtype {}, expected {}", arg, to_string(t.dtype), to_string(dt));
  if (t.numel() != numel)
    invalid(op, "input {} has shape {} ({} elements), expected {}", arg, t.shape.str(), t.numel(), numel);
}

// An optional input slot: present or an empty tensor.
bool present(std::span<const Tensor> in, size_t i) { return i < in.size() && in[i].valid(); }

cl_long off(const Tensor& t) { return cl_long(t.offset_elems()); }
}  // namespace

// ---------------------------------------------------------------- QuantizeLinear / DequantizeLinear
QuantLayout QuantizeLinear::layout(const QuantizeConfig& c) {
  const char* op = c.dequantize ? "DequantizeLinear" : "QuantizeLinear";
  if (!is_float_scale(c.scale_dtype))
    invalid(op, "scale has dtype {}, expected f32, f16 or bf16", to_string(c.scale_dtype));
  if (c.dequantize) {
    if (!is_quant_type(c.x_dtype) && c.x_dtype != DType::i32)
      invalid(op,
              "input x has dtype {}, expected a quantized type (i8, u8, i16, u16, i4, u4, i2, u2, i32, float8, "
              "float4e2m1)",
              to_string(c.x_dtype));
    if (!is_float_scale(c.y_dtype)) invalid(op, "output dtype {} is not f32, f16 or bf16", to_string(c.y_dtype));
  } else {
    if (!is_float_scale(c.x_dtype))
      invalid(op, "input x has dtype {}, expected f32, f16 or bf16", to_string(c.x_dtype));
    if (!is_quant_type(c.y_dtype))
      invalid(op, "output dtype {} is not a quantized type (i8, u8, i16, u16, i4, u4, i2, u2, float8, float4e2m1)",
              to_string(c.y_dtype));
  }
  for (auto d : c.x.dims)
    if (d < 0) invalid(op, "input x has a negative dimension in shape {}", c.x.str());
  if (c.block_size < 0) invalid(op, "block_size must be non-negative, got {}", c.block_size);
  QuantLayout l;
  if (c.scale.numel() == 1) return l;  // per tensor (ONNX ignores axis and block_size then)
  const int64_t r = int64_t(c.x.rank());
  if (c.axis < -r || c.axis >= r) invalid(op, "axis {} is out of range for input x of shape {}", c.axis, c.x.str());
  const size_t ax = size_t(c.axis < 0 ? c.axis + r : c.axis);
  l.axis_len = c.x[ax];
  for (size_t i = ax + 1; i < c.x.rank(); ++i) l.inner *= c.x[i];
  if (c.block_size == 0) {
    if (c.scale.rank() != 1 || c.scale[0] != l.axis_len)
      invalid(op, "scale has shape {}; per-axis quantization along axis {} needs [{}] (or one value per tensor)",
              c.scale.str(), c.axis, l.axis_len);
    l.sa = 1;
    return l;
  }
  Shape want = c.x;
  want[ax] = (l.axis_len + c.block_size - 1) / c.block_size;
  if (c.scale != want)
    invalid(op, "scale has shape {}; blocked quantization (block_size {}, axis {}) of x {} needs {}", c.scale.str(),
            c.block_size, c.axis, c.x.str(), want.str());
  l.block = c.block_size;
  l.so = want[ax] * l.inner;
  l.sa = l.inner;
  l.si = 1;
  return l;
}

Shape QuantizeLinear::validate(const QuantizeConfig& c) {
  layout(c);
  return c.x;
}

std::unique_ptr<QuantizeLinear> QuantizeLinear::create(Context& ctx, int device, const QuantizeConfig& cfg) {
  std::unique_ptr<QuantizeLinear> q(new QuantizeLinear());
  q->cfg_ = cfg;
  q->lay_ = layout(cfg);
  q->kernel_ = make_kernel(ctx.program("quant.cl", "-DQTILE=16", device),
                           cfg.dequantize ? "dequantize_linear" : "quantize_linear");
  return q;
}

std::string QuantizeLinear::algorithm() const {
  const char* mode = lay_.sa == 0 ? "per tensor" : lay_.block > 1 || lay_.si ? "blocked" : "per axis";
  return fmt::format("element-wise, {} -> {}, {}", to_string(cfg_.x_dtype), to_string(cfg_.y_dtype), mode);
}

void QuantizeLinear::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                             ExecutionContext& ec) {
  const std::string_view op = type();
  if (in.size() < 2 || in.size() > 3 || out.size() != 1)
    invalid(op, "expects 2 or 3 inputs and 1 output, got {} and {}", in.size(), out.size());
  check_input(op, "x", in[0], cfg_.x_dtype, cfg_.x.numel());
  check_input(op, "scale", in[1], cfg_.scale_dtype, cfg_.scale.numel());
  const bool zp = present(in, 2);
  if (zp != cfg_.has_zero_point)
    invalid(op, "zero point is {}, the op was created {} one", zp ? "given" : "missing",
            cfg_.has_zero_point ? "with" : "without");
  const DType zdt = cfg_.dequantize ? cfg_.x_dtype : cfg_.y_dtype;
  if (zp) check_input(op, "zero point", in[2], zdt, cfg_.scale.numel());
  if (out[0].dtype != cfg_.y_dtype || out[0].shape != cfg_.x)
    invalid(op, "output y is {} {}, expected {} {}", to_string(out[0].dtype), out[0].shape.str(),
            to_string(cfg_.y_dtype), cfg_.x.str());
  const int64_t n = cfg_.x.numel();
  if (n == 0) return;
  const Tensor& z = zp ? in[2] : in[1];
  const QuantLayout& l = lay_;
  std::lock_guard lock(launch_mutex_);
  if (cfg_.dequantize)
    set_args(kernel_, cl_int(cfg_.x_dtype), cl_int(cfg_.scale_dtype), cl_int(cfg_.y_dtype), cl_int(zp), cl_long(n),
             cl_long(l.inner), cl_long(l.axis_len), cl_long(l.block), cl_long(l.so), cl_long(l.sa), cl_long(l.si),
             in[0].buffer, off(in[0]), in[1].buffer, off(in[1]), z.buffer, off(z), out[0].buffer, off(out[0]));
  else
    set_args(kernel_, cl_int(cfg_.x_dtype), cl_int(cfg_.scale_dtype), cl_int(cfg_.y_dtype), cl_int(zp),
             cl_int(cfg_.saturate), cl_long(n), cl_long(l.inner), cl_long(l.axis_len), cl_long(l.block), cl_long(l.so),
             cl_long(l.sa), cl_long(l.si), in[0].buffer, off(in[0]), in[1].buffer, off(in[1]), z.buffer, off(z),
             out[0].buffer, off(out[0]));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(n)), cl::NullRange, cfg_.dequantize ? "dequantize" : "quantize");
}

// ---------------------------------------------------------------- MatMulInteger / QLinearMatMul
namespace {
struct MatMulShape {
  int64_t M, N, K;
  Shape batch, out;
};

MatMulShape matmul_shape(std::string_view op, const Shape& a, const Shape& b) {
  if (a.rank() == 0 || b.rank() == 0) invalid(op, "inputs must have rank >= 1, got A {} and B {}", a.str(), b.str());
  MatMulShape s;
  s.M = a.rank() == 1 ? 1 : a[a.rank() - 2];
  s.K = a[a.rank() - 1];
  const int64_t kb = b.rank() == 1 ? b[0] : b[b.rank() - 2];
  s.N = b.rank() == 1 ? 1 : b[b.rank() - 1];
  if (kb != s.K) invalid(op, "A {} and B {} disagree on K ({} vs {})", a.str(), b.str(), s.K, kb);
  for (auto d : a.dims)
    if (d < 0) invalid(op, "input A has a negative dimension in shape {}", a.str());
  for (auto d : b.dims)
    if (d < 0) invalid(op, "input B has a negative dimension in shape {}", b.str());
  auto batch_of = [](const Shape& t) {
    return t.rank() <= 2 ? Shape{} : Shape(std::vector<int64_t>(t.dims.begin(), t.dims.end() - 2));
  };
  s.batch = broadcast_shapes(op, {batch_of(a), batch_of(b)});
  s.out = s.batch;
  if (a.rank() > 1) s.out.dims.push_back(s.M);
  if (b.rank() > 1) s.out.dims.push_back(s.N);
  return s;
}
}  // namespace

Shape IntegerMatMul::validate(const IntegerMatMulConfig& c) {
  const char* op = c.qlinear ? "QLinearMatMul" : "MatMulInteger";
  if (!is_byte_int(c.a_dtype)) invalid(op, "input A has dtype {}, expected u8 or i8", to_string(c.a_dtype));
  if (!is_byte_int(c.b_dtype)) invalid(op, "input B has dtype {}, expected u8 or i8", to_string(c.b_dtype));
  MatMulShape s = matmul_shape(op, c.a, c.b);
  auto count = [&](const char* arg, int64_t n, int64_t per, const char* what, bool optional) {
    if ((optional && n == 0) || n == 1 || n == per) return;
    invalid(op, "{} has {} elements, expected 1 (per tensor) or {} (per {})", arg, n, per, what);
  };
  count("a_zero_point", c.a_zero_points, s.M, "row of A", true);
  count("b_zero_point", c.b_zero_points, s.N, "column of B", true);
  if (c.qlinear) {
    count("a_scale", c.a_scales, s.M, "row of A", false);
    count("b_scale", c.b_scales, s.N, "column of B", false);
    if (!is_float_scale(c.scale_dtype))
      invalid(op, "scales have dtype {}, expected f32, f16 or bf16", to_string(c.scale_dtype));
    if (!is_byte_int(c.y_dtype)) invalid(op, "output dtype {} is not u8 or i8", to_string(c.y_dtype));
  }
  return s.out;
}

std::unique_ptr<IntegerMatMul> IntegerMatMul::create(Context& ctx, int device, const IntegerMatMulConfig& cfg) {
  std::unique_ptr<IntegerMatMul> m(new IntegerMatMul());
  m->cfg_ = cfg;
  m->out_ = validate(cfg);
  MatMulShape s = matmul_shape(m->type(), cfg.a, cfg.b);
  m->M_ = s.M;
  m->N_ = s.N;
  m->K_ = s.K;
  m->batches_ = s.batch.numel();
  // Element offsets of A and B for every output batch (numpy broadcasting over the batch dims).
  const size_t rb = s.batch.rank();
  auto batch_strides = [&](const Shape& t, int64_t matrix) {
    const size_t r = t.rank() <= 2 ? 0 : t.rank() - 2;
    std::vector<int64_t> st(rb, 0);
    int64_t acc = matrix;
    for (size_t i = r; i-- > 0;) {
      const size_t o = rb - r + i;
      st[o] = t[i] == 1 ? 0 : acc;
      acc *= t[i];
    }
    return st;
  };
  const auto sa = batch_strides(cfg.a, s.M * s.K), sb = batch_strides(cfg.b, s.K * s.N);
  HostTensor offs(DType::i64, Shape{std::max<int64_t>(m->batches_, 1), 2});
  int64_t* p = offs.as<int64_t>();
  for (int64_t bi = 0; bi < m->batches_; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0;
    for (size_t i = rb; i-- > 0;) {
      const int64_t idx = rem % s.batch[i];
      rem /= s.batch[i];
      oa += idx * sa[i];
      ob += idx * sb[i];
    }
    p[2 * bi] = oa;
    p[2 * bi + 1] = ob;
  }
  m->batch_offsets_ = ctx.upload(offs, device);
  // The tile must fit a work-group; every device runs 4x4.
  const size_t max_wg = ctx.device(device).info.max_work_group_size;
  m->tile_ = max_wg >= 256 ? 16 : max_wg >= 64 ? 8 : 4;
  m->kernel_ = make_kernel(ctx.program("quant.cl", fmt::format("-DQTILE={}", m->tile_), device), "matmul_integer");
  log::debug("{} {} x {} -> {}: {}", m->type(), cfg.a.str(), cfg.b.str(), m->out_.str(), m->algorithm());
  return m;
}

void IntegerMatMul::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                            ExecutionContext& ec) {
  const std::string_view op = type();
  const auto& c = cfg_;
  // Input slots: MatMulInteger A, B, a_zp, b_zp; QLinearMatMul a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp.
  const size_t ia = 0, ib = c.qlinear ? 3 : 1, iaz = 2, ibz = c.qlinear ? 5 : 3;
  if (in.size() < (c.qlinear ? 7u : 2u) || in.size() > (c.qlinear ? 8u : 4u) || out.size() != 1)
    invalid(op, "got {} inputs and {} outputs", in.size(), out.size());
  check_input(op, "A", in[ia], c.a_dtype, c.a.numel());
  check_input(op, "B", in[ib], c.b_dtype, c.b.numel());
  const bool az = present(in, iaz), bz = present(in, ibz);
  if (az != (c.a_zero_points > 0) || bz != (c.b_zero_points > 0))
    invalid(op, "zero points given differ from the ones the op was created with");
  if (az) check_input(op, "a_zero_point", in[iaz], c.a_dtype, c.a_zero_points);
  if (bz) check_input(op, "b_zero_point", in[ibz], c.b_dtype, c.b_zero_points);
  const DType ydt = c.qlinear ? c.y_dtype : DType::i32;
  if (out[0].dtype != ydt || out[0].shape != out_)
    invalid(op, "output Y is {} {}, expected {} {}", to_string(out[0].dtype), out[0].shape.str(), to_string(ydt),
            out_.str());
  const Tensor& dummy = in[ia];
  const Tensor *as = &dummy, *bs = &dummy, *ys = &dummy, *yz = &dummy;
  bool yzp = false;
  if (c.qlinear) {
    check_input(op, "a_scale", in[1], c.scale_dtype, c.a_scales);
    check_input(op, "b_scale", in[4], c.scale_dtype, c.b_scales);
    check_input(op, "y_scale", in[6], c.scale_dtype, 1);
    yzp = present(in, 7);
    if (yzp != c.has_y_zero_point) invalid(op, "y_zero_point given differs from the op's config");
    if (yzp) check_input(op, "y_zero_point", in[7], c.y_dtype, 1);
    as = &in[1];
    bs = &in[4];
    ys = &in[6];
    if (yzp) yz = &in[7];
  }
  if (out_.numel() == 0) return;
  const Tensor& azt = az ? in[iaz] : dummy;
  const Tensor& bzt = bz ? in[ibz] : dummy;
  auto mode = [](int64_t n) { return cl_int(n == 0 ? 0 : n == 1 ? 1 : 2); };
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(c.a_dtype), cl_int(c.b_dtype), cl_int(M_), cl_int(N_), cl_int(K_), batch_offsets_.buffer,
           off(batch_offsets_), in[ia].buffer, off(in[ia]), in[ib].buffer, off(in[ib]), mode(c.a_zero_points),
           azt.buffer, off(azt), mode(c.b_zero_points), bzt.buffer, off(bzt), cl_int(c.qlinear), cl_int(c.scale_dtype),
           cl_int(ydt), mode(c.a_scales), as->buffer, off(*as), mode(c.b_scales), bs->buffer, off(*bs), ys->buffer,
           off(*ys), cl_int(yzp), yz->buffer, off(*yz), out[0].buffer, off(out[0]));
  ec.enqueue_kernel(kernel_, cl::NDRange(round_up(size_t(N_), tile_), round_up(size_t(M_), tile_), size_t(batches_)),
                    cl::NDRange(tile_, tile_, 1), "matmul_integer");
}

// ---------------------------------------------------------------- ConvInteger / QLinearConv
namespace {
// Output shape and resolved pads (begins, then ends) of an integer convolution.
Shape conv_plan(const IntegerConvConfig& c, std::vector<int64_t>& pads) {
  const char* op = c.qlinear ? "QLinearConv" : "ConvInteger";
  if (!is_byte_int(c.x_dtype)) invalid(op, "input x has dtype {}, expected u8 or i8", to_string(c.x_dtype));
  if (!is_byte_int(c.w_dtype)) invalid(op, "input w has dtype {}, expected u8 or i8", to_string(c.w_dtype));
  if (c.x.rank() < 3 || c.x.rank() > 5)
    invalid(op, "input x must be N, C and 1 to 3 spatial dims, got shape {}", c.x.str());
  if (c.w.rank() != c.x.rank())
    invalid(op, "weight w has shape {}, expected rank {} like x {}", c.w.str(), c.x.rank(), c.x.str());
  for (const Shape* s : {&c.x, &c.w})
    for (auto d : s->dims)
      if (d <= 0) invalid(op, "shape {} has a non-positive dimension", s->str());
  const size_t n = c.x.rank() - 2;
  const int64_t C = c.x[1], M = c.w[0];
  if (c.groups <= 0 || C % c.groups || M % c.groups)
    invalid(op, "group {} must divide the input channels {} and the output channels {}", c.groups, C, M);
  if (c.w[1] * c.groups != C)
    invalid(op, "weight w {} has {} input channels per group, expected {} / group {} = {}", c.w.str(), c.w[1], C,
            c.groups, C / c.groups);
  if (c.w_zero_points != 0 && c.w_zero_points != 1 && c.w_zero_points != M)
    invalid(op, "w_zero_point has {} elements, expected 1 (per tensor) or {} (per output channel)", c.w_zero_points, M);
  if (c.qlinear) {
    if (c.w_scales != 1 && c.w_scales != M)
      invalid(op, "w_scale has {} elements, expected 1 (per tensor) or {} (per output channel)", c.w_scales, M);
    if (!is_float_scale(c.scale_dtype))
      invalid(op, "scales have dtype {}, expected f32, f16 or bf16", to_string(c.scale_dtype));
    if (!is_byte_int(c.y_dtype)) invalid(op, "output dtype {} is not u8 or i8", to_string(c.y_dtype));
  }
  auto attr = [&](const std::vector<int64_t>& v, const char* name, size_t len, int64_t dflt) {
    if (v.empty()) return std::vector<int64_t>(len, dflt);
    if (v.size() != len) invalid(op, "{} has {} entries, expected {} for x {}", name, v.size(), len, c.x.str());
    return v;
  };
  auto s = attr(c.strides, "strides", n, 1), d = attr(c.dilations, "dilations", n, 1);
  pads = attr(c.pads, "pads", 2 * n, 0);
  if (!c.kernel.empty()) {
    auto k = attr(c.kernel, "kernel_shape", n, 0);
    for (size_t i = 0; i < n; ++i)
      if (k[i] != c.w[2 + i]) invalid(op, "kernel_shape[{}] = {} differs from the weight's {}", i, k[i], c.w[2 + i]);
  }
  Shape out{c.x[0], M};
  for (size_t i = 0; i < n; ++i) {
    if (s[i] <= 0) invalid(op, "strides[{}] must be positive, got {}", i, s[i]);
    if (d[i] <= 0) invalid(op, "dilations[{}] must be positive, got {}", i, d[i]);
    if (pads[i] < 0 || pads[i + n] < 0) invalid(op, "pads must be non-negative, got {} and {}", pads[i], pads[i + n]);
    const int64_t in = c.x[2 + i], ek = (c.w[2 + i] - 1) * d[i] + 1;
    int64_t o;
    if (c.auto_pad == AutoPad::same_upper || c.auto_pad == AutoPad::same_lower) {
      o = (in + s[i] - 1) / s[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * s[i] + ek - in);
      pads[i] = c.auto_pad == AutoPad::same_upper ? total / 2 : total - total / 2;
      pads[i + n] = total - pads[i];
    } else {
      if (c.auto_pad == AutoPad::valid) pads[i] = pads[i + n] = 0;
      const int64_t num = in + pads[i] + pads[i + n] - ek;
      if (num < 0)
        invalid(op, "kernel dim {} (dilated {}) is larger than the padded input {}", i, ek, in + pads[i] + pads[i + n]);
      o = num / s[i] + 1;
    }
    out.dims.push_back(o);
  }
  return out;
}
}  // namespace

Shape IntegerConv::validate(const IntegerConvConfig& c) {
  std::vector<int64_t> p;
  return conv_plan(c, p);
}

std::unique_ptr<IntegerConv> IntegerConv::create(Context& ctx, int device, const IntegerConvConfig& cfg) {
  std::unique_ptr<IntegerConv> v(new IntegerConv());
  v->cfg_ = cfg;
  v->out_ = conv_plan(cfg, v->pads_);
  v->kernel_ = make_kernel(ctx.program("quant.cl", "-DQTILE=16", device), "conv_integer");
  log::debug("{} {} * {} -> {}", v->type(), cfg.x.str(), cfg.w.str(), v->out_.str());
  return v;
}

void IntegerConv::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                          ExecutionContext& ec) {
  const std::string_view op = type();
  const auto& c = cfg_;
  // Input slots: ConvInteger x, w, x_zp, w_zp; QLinearConv x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B.
  const size_t ix = 0, iw = c.qlinear ? 3 : 1, ixz = 2, iwz = c.qlinear ? 5 : 3;
  if (in.size() < (c.qlinear ? 8u : 2u) || in.size() > (c.qlinear ? 9u : 4u) || out.size() != 1)
    invalid(op, "got {} inputs and {} outputs", in.size(), out.size());
  check_input(op, "x", in[ix], c.x_dtype, c.x.numel());
  check_input(op, "w", in[iw], c.w_dtype, c.w.numel());
  const bool xz = present(in, ixz), wz = present(in, iwz);
  if (xz != c.has_x_zero_point || wz != (c.w_zero_points > 0))
    invalid(op, "zero points given differ from the ones the op was created with");
  if (xz) check_input(op, "x_zero_point", in[ixz], c.x_dtype, 1);
  if (wz) check_input(op, "w_zero_point", in[iwz], c.w_dtype, c.w_zero_points);
  const DType ydt = c.qlinear ? c.y_dtype : DType::i32;
  if (out[0].dtype != ydt || out[0].shape != out_)
    invalid(op, "output y is {} {}, expected {} {}", to_string(out[0].dtype), out[0].shape.str(), to_string(ydt),
            out_.str());
  const Tensor& dummy = in[ix];
  const Tensor *xs = &dummy, *ws = &dummy, *ys = &dummy, *yz = &dummy, *bias = &dummy;
  bool yzp = false, has_bias = false;
  if (c.qlinear) {
    check_input(op, "x_scale", in[1], c.scale_dtype, 1);
    check_input(op, "w_scale", in[4], c.scale_dtype, c.w_scales);
    check_input(op, "y_scale", in[6], c.scale_dtype, 1);
    xs = &in[1];
    ws = &in[4];
    ys = &in[6];
    yzp = present(in, 7);
    if (yzp) {
      check_input(op, "y_zero_point", in[7], c.y_dtype, 1);
      yz = &in[7];
    }
    has_bias = present(in, 8);
    if (has_bias != c.has_bias) invalid(op, "bias B given differs from the op's config");
    if (has_bias) {
      check_input(op, "B", in[8], DType::i32, c.w[0]);
      bias = &in[8];
    }
  }
  if (out_.numel() == 0) return;
  const Tensor& xzt = xz ? in[ixz] : dummy;
  const Tensor& wzt = wz ? in[iwz] : dummy;
  // Spatial dims right-aligned into (D, H, W); missing leading ones are 1 with no padding.
  const size_t n = c.x.rank() - 2;
  int sp[3] = {1, 1, 1}, osp[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
  for (size_t i = 0; i < n; ++i) {
    const size_t a = 3 - n + i;
    sp[a] = int(c.x[2 + i]);
    osp[a] = int(out_[2 + i]);
    k[a] = int(c.w[2 + i]);
    st[a] = c.strides.empty() ? 1 : int(c.strides[i]);
    dl[a] = c.dilations.empty() ? 1 : int(c.dilations[i]);
    pb[a] = int(pads_[i]);
  }
  const cl_int8 sz = {{int(c.x[1]), sp[0], sp[1], sp[2], int(c.w[0]), osp[0], osp[1], osp[2]}};
  const cl_int8 win = {{k[0], k[1], k[2], st[0], st[1], st[2], dl[0], dl[1]}};
  const cl_int8 win2 = {{dl[2], pb[0], pb[1], pb[2], int(c.groups), 0, 0, 0}};
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(c.x_dtype), cl_int(c.w_dtype), sz, win, win2, in[ix].buffer, off(in[ix]), in[iw].buffer,
           off(in[iw]), cl_int(xz), xzt.buffer, off(xzt),
           cl_int(c.w_zero_points == 0   ? 0
                  : c.w_zero_points == 1 ? 1
                                         : 2),
           wzt.buffer, off(wzt), cl_int(has_bias), bias->buffer, off(*bias), cl_int(c.qlinear), cl_int(c.scale_dtype),
           cl_int(ydt), xs->buffer, off(*xs), cl_int(c.w_scales == 1 ? 1 : 2), ws->buffer, off(*ws), ys->buffer,
           off(*ys), cl_int(yzp), yz->buffer, off(*yz), out[0].buffer, off(out[0]));
  const size_t z = size_t(osp[0]) * size_t(c.x[0]) * size_t(c.w[0]);
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(osp[2]), size_t(osp[1]), z), cl::NullRange, "conv_integer");
}

}  // namespace cldl
