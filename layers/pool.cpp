// Pooling op: output sizes (ceil_mode, auto_pad), validation, enqueue (kernels/pool.cl).
#include "layers/pool.hpp"

#include "layers/strided.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
const ProgramVariants kPoolVariants("pool.cl", {""});

const char* pool_name(PoolKind k) {
  switch (k) {
    case PoolKind::max: return "MaxPool";
    case PoolKind::average: return "AveragePool";
    case PoolKind::global_max: return "GlobalMaxPool";
    default: return "GlobalAveragePool";
  }
}

bool is_global(PoolKind k) { return k == PoolKind::global_max || k == PoolKind::global_average; }

// Resolves pads and output sizes; shared by validate and create.
Shape plan(const PoolConfig& c, std::array<int, 4>& pads) {
  const char* op = pool_name(c.kind);
  if (c.input.rank() < 3) invalid(op, "input X must be N, C, spatial...; got shape {}", c.input.str());
  for (auto d : c.input.dims)
    if (d <= 0) invalid(op, "input X has a non-positive dimension in shape {}", c.input.str());
  if (is_global(c.kind)) {
    std::vector<int64_t> o{c.input[0], c.input[1]};
    o.resize(c.input.rank(), 1);
    return Shape(o);
  }
  if (c.input.rank() > 4) invalid(op, "only 1-D and 2-D pooling is supported, got input shape {}", c.input.str());
  const bool one_d = c.input.rank() == 3;
  const int64_t in[2] = {one_d ? 1 : c.input[2], c.input[c.input.rank() - 1]};
  pads = c.pads;
  for (int i = 0; i < 2; ++i) {
    if (c.kernel[i] <= 0) invalid(op, "kernel_shape[{}] must be positive, got {}", i, c.kernel[i]);
    if (c.strides[i] <= 0) invalid(op, "strides[{}] must be positive, got {}", i, c.strides[i]);
    if (c.dilations[i] <= 0) invalid(op, "dilations[{}] must be positive, got {}", i, c.dilations[i]);
    if (c.kind == PoolKind::average && c.dilations[i] != 1)
      invalid(op, "dilations[{}] = {} is not supported (expected 1)", i, c.dilations[i]);
  }
  for (int i = 0; i < 4; ++i)
    if (pads[i] < 0) invalid(op, "pads[{}] must be non-negative, got {}", i, pads[i]);
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t ek = int64_t(c.kernel[i] - 1) * c.dilations[i] + 1;
    const int s = c.strides[i];
    if (c.auto_pad == AutoPad::same_upper || c.auto_pad == AutoPad::same_lower) {
      out[i] = (in[i] + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (out[i] - 1) * s + ek - in[i]);
      int64_t lo = c.auto_pad == AutoPad::same_upper ? total / 2 : total - total / 2;
      pads[i] = int(lo);
      pads[i + 2] = int(total - lo);
      continue;
    }
    if (c.auto_pad == AutoPad::valid) pads[i] = pads[i + 2] = 0;
    const int64_t num = in[i] + pads[i] + pads[i + 2] - ek;
    if (num < 0)
      invalid(op, "kernel_shape[{}] = {} (dilated {}) is larger than the padded input {}", i, c.kernel[i], ek,
              in[i] + pads[i] + pads[i + 2]);
    out[i] = (c.ceil_mode ? (num + s - 1) / s : num / s) + 1;
    // ceil_mode must not start a window in the end padding (ONNX / PyTorch rule).
    if (c.ceil_mode && (out[i] - 1) * s >= in[i] + pads[i]) --out[i];
  }
  if (one_d) {
    if (c.kernel[0] != 1 || pads[0] || pads[2])
      invalid(op, "1-D input {} needs kernel/pads only on the last dim (kernel_shape[0] = {})", c.input.str(),
              c.kernel[0]);
    return Shape{c.input[0], c.input[1], out[1]};
  }
  return Shape{c.input[0], c.input[1], out[0], out[1]};
}
}  // namespace

std::string_view Pool::type() const { return pool_name(cfg_.kind); }

Shape Pool::validate(const PoolConfig& c) {
  std::array<int, 4> p{};
  return plan(c, p);
}

std::unique_ptr<Pool> Pool::create(Context& ctx, int device, const PoolConfig& cfg) {
  std::unique_ptr<Pool> p(new Pool());
  p->cfg_ = cfg;
  p->out_ = plan(cfg, p->pads_);
  cl::Program prog = ctx.program("pool.cl", "", device);
  if (is_global(cfg.kind)) {
    p->kernel_ = make_kernel(prog, "global_pool");
    p->group_ = reduction_group_size(p->kernel_, ctx.device(device));
    p->algorithm_ = fmt::format("work-group reduction ({} items per plane)", p->group_);
  } else {
    p->kernel_ = make_kernel(prog, "pool2d");
    p->algorithm_ = "direct";
  }
  log::debug("{} {} -> {}: {}", pool_name(cfg.kind), cfg.input.str(), p->out_.str(), p->algorithm_);
  return p;
}

void Pool::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const char* op = pool_name(cfg_.kind);
  if (in.size() != 1 || out.size() != 1) invalid(op, "expects 1 input and 1 output, got {} and {}", in.size(), out.size());
  if (in[0].shape != cfg_.input || in[0].dtype != DType::f32)
    invalid(op, "input X is {} {}, expected f32 {}", to_string(in[0].dtype), in[0].shape.str(), cfg_.input.str());
  if (out[0].shape != out_ || out[0].dtype != DType::f32)
    invalid(op, "output Y is {} {}, expected f32 {}", to_string(out[0].dtype), out[0].shape.str(), out_.str());
  const int64_t nc = cfg_.input[0] * cfg_.input[1];
  std::lock_guard lock(launch_mutex_);
  const int is_max = cfg_.kind == PoolKind::max || cfg_.kind == PoolKind::global_max;
  if (is_global(cfg_.kind)) {
    const int64_t plane = cfg_.input.numel() / nc;
    set_args(kernel_, cl_int(is_max), cl_long(plane), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
             cl_long(out[0].offset_elems()), cl::Local(group_ * sizeof(float)));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(nc) * group_), cl::NDRange(group_), "global_pool");
    return;
  }
  const bool one_d = cfg_.input.rank() == 3;
  const int H = one_d ? 1 : int(cfg_.input[2]), W = int(cfg_.input[cfg_.input.rank() - 1]);
  const int OH = one_d ? 1 : int(out_[2]), OW = int(out_[out_.rank() - 1]);
  const auto& c = cfg_;
  set_args(kernel_, cl_int(is_max), cl_int(c.count_include_pad), cl_int(H), cl_int(W), cl_int(OH), cl_int(OW),
           cl_int(c.kernel[0]), cl_int(c.kernel[1]), cl_int(c.strides[0]), cl_int(c.strides[1]), cl_int(c.dilations[0]),
           cl_int(c.dilations[1]), cl_int(pads_[0]), cl_int(pads_[1]), cl_int(pads_[2]), cl_int(pads_[3]), in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(OW, OH, nc), cl::NullRange, "pool2d");
}

}  // namespace cldl
