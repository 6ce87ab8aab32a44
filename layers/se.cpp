// Squeeze-excitation op (layers/se.hpp): validation, the choice between one command and the split form,
// enqueue (kernels/se.cl).
#include "layers/se.hpp"

#include "layers/launch.hpp"
#include "runtime/log.hpp"
#include "runtime/program_cache.hpp"

namespace cldl {

namespace {
const ProgramVariants kSeVariants("se.cl", {""});
}

void SqueezeExcite::validate(const SqueezeExciteConfig& cfg) {
  if (cfg.input.rank() < 3) invalid("SqueezeExcite", "input X must be N, C, spatial...; got shape {}", cfg.input.str());
  for (auto d : cfg.input.dims)
    if (d <= 0) invalid("SqueezeExcite", "input X has a non-positive dimension in shape {}", cfg.input.str());
  if (cfg.hidden <= 0) invalid("SqueezeExcite", "hidden channels {} must be positive", cfg.hidden);
  if (cfg.input[1] + cfg.hidden > kMaxLocalFloats)
    invalid("SqueezeExcite", "channels {} + hidden {} exceed {} (local memory)", cfg.input[1], cfg.hidden,
            kMaxLocalFloats);
}

std::unique_ptr<SqueezeExcite> SqueezeExcite::create(Context& ctx, int device, const SqueezeExciteConfig& cfg) {
  validate(cfg);
  std::unique_ptr<SqueezeExcite> s(new SqueezeExcite());
  s->cfg_ = cfg;
  s->n_ = cfg.input[0];
  s->c_ = cfg.input[1];
  s->hw_ = cfg.input.numel() / (s->n_ * s->c_);
  const int64_t limit = cfg.whole_block_elements > 0 ? cfg.whole_block_elements : kWholeBlockElements;
  s->whole_ = s->c_ * s->hw_ <= limit;
  cl::Program prog = ctx.program("se.cl", "", device);
  s->block_ = make_kernel(prog, "se_block");
  const Device& dev = ctx.device(device);
  // Work-items per image: enough for the channels on a GPU. On a CPU the group runs on one core whatever
  // its size, and one item runs the kernel's float8 strips as written: PoCL vectorised 64 items across
  // channels into gathers (EfficientNet-B0's 1152-channel blocks took 240 us a command that way).
  const size_t want = cfg.work_items ? cfg.work_items : dev.info.type == DeviceType::cpu ? 1 : 256;
  size_t lim = std::min(want, s->block_.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(dev.device));
  if (dev.info.max_work_group_size) lim = std::min(lim, dev.info.max_work_group_size);
  s->items_ = 1;
  while (s->items_ * 2 <= lim) s->items_ *= 2;
  if (s->whole_) {
    s->algorithm_ = fmt::format("one command (a work-group of {} per image)", s->items_);
  } else {
    PoolConfig pc;
    pc.kind = PoolKind::global_average;
    pc.input = cfg.input;
    s->pool_ = Pool::create(ctx, device, pc);
    s->scale_ = make_kernel(prog, "se_scale");
    s->algorithm_ = fmt::format("pool ({}), gate (a work-group of {} per image), scale: the map is over {} elements",
                                s->pool_->algorithm(), s->items_, limit);
  }
  log::debug("SqueezeExcite {} hidden {}: {}", cfg.input.str(), cfg.hidden, s->algorithm_);
  return s;
}

size_t SqueezeExcite::workspace_bytes() const { return whole_ ? 0 : size_t(2 * n_ * c_) * sizeof(float); }

void SqueezeExcite::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws,
                            ExecutionContext& ec) {
  if (in.size() != 5 || out.size() != 1) invalid("SqueezeExcite", "expects 5 inputs and 1 output");
  std::lock_guard lock(launch_mutex_);
  const Tensor &x = in[0], &w1 = in[1], &b1 = in[2], &w2 = in[3], &b2 = in[4], &y = out[0];
  const auto& a1 = cfg_.act1;
  const auto& a2 = cfg_.act2;
  auto set_block = [&](const Tensor& src, int64_t hw, int write_y, const Tensor& dst) {
    set_args(block_, cl_int(c_), cl_int(cfg_.hidden), cl_long(hw), cl_int(a1.kind), a1.alpha, a1.beta, cl_int(a2.kind),
             a2.alpha, a2.beta, cl_int(write_y), src.buffer, cl_long(src.offset_elems()), w1.buffer,
             cl_long(w1.offset_elems()), b1.buffer, cl_long(b1.offset_elems()), w2.buffer, cl_long(w2.offset_elems()),
             b2.buffer, cl_long(b2.offset_elems()), dst.buffer, cl_long(dst.offset_elems()),
             cl::Local(size_t(c_) * sizeof(float)), cl::Local(size_t(cfg_.hidden) * sizeof(float)));
  };
  if (whole_) {
    set_block(x, hw_, 1, y);
    ec.enqueue_kernel(block_, cl::NDRange(size_t(n_) * items_), cl::NDRange(items_), "se_block");
    return;
  }
  if (!ws) invalid("SqueezeExcite", "the split form needs a workspace of {} bytes", workspace_bytes());
  const Tensor pooled = ws->slice_elems(0, n_ * c_, Shape{n_, c_}),
               gate = ws->slice_elems(n_ * c_, n_ * c_, Shape{n_, c_});
  Tensor pooled4 = pooled;
  {
    std::vector<int64_t> d{n_, c_};
    for (size_t i = 2; i < cfg_.input.rank(); ++i) d.push_back(1);
    pooled4.shape = Shape(d);
  }
  pool_->enqueue({&x, 1}, {&pooled4, 1}, nullptr, ec);
  set_block(pooled, 1, 0, gate);
  ec.enqueue_kernel(block_, cl::NDRange(size_t(n_) * items_), cl::NDRange(items_), "se_block");
  set_args(scale_, cl_long(hw_), x.buffer, cl_long(x.offset_elems()), gate.buffer, cl_long(gate.offset_elems()),
           y.buffer, cl_long(y.offset_elems()));
  constexpr int64_t kStrip = 64;  // SE_STRIP of kernels/se.cl
  ec.enqueue_kernel(scale_, cl::NDRange(size_t((hw_ + kStrip - 1) / kStrip), size_t(n_ * c_)), cl::NullRange,
                    "se_scale");
}

}  // namespace cldl
