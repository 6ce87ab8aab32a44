// Pooling op: output sizes (ceil_mode, auto_pad), validation, enqueue (kernels/pool.cl).
#include "layers/pool.hpp"

#include <functional>
#include <numeric>

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
    case PoolKind::lp:
      return "LpPool";
    default: return "GlobalAveragePool";
  }
}

bool is_global(PoolKind k) { return k == PoolKind::global_max || k == PoolKind::global_average; }

// Resolves pads and output sizes; shared by validate and create.
Shape plan(const PoolConfig& c, std::vector<int64_t>& pads) {
  const char* op = pool_name(c.kind);
  if (c.input.rank() < 3) invalid(op, "input X must be N, C, spatial...; got shape {}", c.input.str());
  for (auto d : c.input.dims)
    if (d <= 0) invalid(op, "input X has a non-positive dimension in shape {}", c.input.str());
  if (is_global(c.kind)) {
    std::vector<int64_t> o{c.input[0], c.input[1]};
    o.resize(c.input.rank(), 1);
    return Shape(o);
  }
  const size_t n = c.input.rank() - 2;
  if (n > 3) invalid(op, "at most 3 spatial dims are supported, got input shape {}", c.input.str());
  if (c.indices && c.kind != PoolKind::max) invalid(op, "the Indices output exists only for MaxPool");
  if (c.kind == PoolKind::lp && c.p < 1) invalid(op, "p must be a positive integer, got {}", c.p);
  if (c.column_major_indices && c.kind != PoolKind::max)
    invalid(op, "column-major Indices (storage_order 1) exist only for MaxPool");
  auto attr = [&](const std::vector<int64_t>& v, const char* name, size_t len, int64_t dflt) {
    if (v.empty()) return std::vector<int64_t>(len, dflt);
    if (v.size() != len) invalid(op, "{} has {} entries, expected {} for input {}", name, v.size(), len, c.input.str());
    return v;
  };
  auto k = attr(c.kernel, "kernel_shape", n, 0), s = attr(c.strides, "strides", n, 1),
       d = attr(c.dilations, "dilations", n, 1);
  pads = attr(c.pads, "pads", 2 * n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (k[i] <= 0) invalid(op, "kernel_shape[{}] must be positive, got {}", i, k[i]);
    if (s[i] <= 0) invalid(op, "strides[{}] must be positive, got {}", i, s[i]);
    if (d[i] <= 0) invalid(op, "dilations[{}] must be positive, got {}", i, d[i]);
  }
  for (size_t i = 0; i < 2 * n; ++i)
    if (pads[i] < 0) invalid(op, "pads[{}] must be non-negative, got {}", i, pads[i]);
  Shape out{c.input[0], c.input[1]};
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = c.input[2 + i], ek = (k[i] - 1) * d[i] + 1;
    int64_t o;
    if (c.auto_pad == AutoPad::same_upper || c.auto_pad == AutoPad::same_lower) {
      o = (in + s[i] - 1) / s[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * s[i] + ek - in);
      const int64_t lo = c.auto_pad == AutoPad::same_upper ? total / 2 : total - total / 2;
      pads[i] = lo;
      pads[i + n] = total - lo;
    } else {
      if (c.auto_pad == AutoPad::valid) pads[i] = pads[i + n] = 0;
      const int64_t num = in + pads[i] + pads[i + n] - ek;
      if (num < 0)
        invalid(op, "kernel_shape[{}] = {} (dilated {}) is larger than the padded input {}", i, k[i], ek,
                in + pads[i] + pads[i + n]);
      o = (c.ceil_mode ? (num + s[i] - 1) / s[i] : num / s[i]) + 1;
      // ceil_mode must not start a window in the end padding (ONNX / PyTorch rule).
      if (c.ceil_mode && (o - 1) * s[i] >= in + pads[i]) --o;
    }
    out.dims.push_back(o);
  }
  return out;
}
}  // namespace

std::string_view Pool::type() const { return pool_name(cfg_.kind); }

Shape Pool::validate(const PoolConfig& c) {
  std::vector<int64_t> p;
  return plan(c, p);
}

std::unique_ptr<Pool> Pool::create(Context& ctx, int device, const PoolConfig& cfg) {
  std::unique_ptr<Pool> p(new Pool());
  p->cfg_ = cfg;
  p->out_ = plan(cfg, p->pads_);
  cl::Program prog = ctx.program("pool.cl", "", device);
  if (is_global(cfg.kind)) {
    // CPUs with enough planes to fill the cores: a plane per work-item (mobilenet_v3_small's squeeze-
    // excite pools, [1, 576, 7, 7]: 0.2-0.5 ms each as work-group reductions on PoCL); else a work-group
    // per plane.
    const int64_t nc = cfg.input[0] * cfg.input[1];
    p->rows_ = ctx.device(device).info.type == DeviceType::cpu && nc >= 16;
    if (p->rows_) {
      p->kernel_ = make_kernel(prog, "global_pool_planes");
      p->algorithm_ = "a plane per work-item";
    } else {
      p->kernel_ = make_kernel(prog, "global_pool");
      p->group_ = reduction_group_size(p->kernel_, ctx.device(device));
      p->algorithm_ = fmt::format("work-group reduction ({} items per plane)", p->group_);
    }
  } else {
    // The 2-D kernel is the fast path; pool3d covers 3-D, Indices, dilated averages and LpPool.
    const size_t n = cfg.input.rank() - 2;
    bool dilated = false;
    for (auto d : cfg.dilations) dilated |= d != 1;
    p->use_2d_ = n <= 2 && !cfg.indices && !(cfg.kind == PoolKind::average && dilated) && cfg.kind != PoolKind::lp;
    if (cfg.block != 0 && cfg.block != 1 && cfg.block != 3 && cfg.block != 8 && cfg.block != 32 && cfg.block != 64)
      invalid(pool_name(cfg.kind), "block {} is not 0, 1, 3, 8, 32 or 64", cfg.block);
    // The separable 3x3 kernel (pool2d_3x3), undilated: MaxPool stride 1 with pads <= 1 (googlenet's pools
    // in the inception blocks: 19 % of its device time by pool2d_planes / pool2d_rows); AveragePool stride 1
    // with no pads (inception_v3's nine, after its Pad node: 35x35, 17x17, 8x8); MaxPool 3x3/2 with pads <= 1
    // (the stem pools of resnet, shufflenet, densenet, googlenet, inception) where rows have at least 16
    // outputs (narrower: pool2d_planes).
    auto all_of = [](const std::vector<int64_t>& v, int64_t lo, int64_t hi) {
      for (auto e : v)
        if (e < lo || e > hi) return false;
      return true;
    };
    const bool s1 = all_of(cfg.strides, 1, 1),
               s2 = cfg.strides.size() == 2 && cfg.strides[0] == 2 && cfg.strides[1] == 2;
    const int64_t in_w = cfg.input[cfg.input.rank() - 1], out_w = p->out_[p->out_.rank() - 1];
    // An undilated 2-D 3x3 window without Indices, and a MaxPool of it with pads <= 1: what both 3x3 kernels
    // (pool2d_3x3, pool2d_3x3_narrow below) need.
    const bool window3 = n == 2 && !cfg.indices && cfg.kernel.size() == 2 && cfg.kernel[0] == 3 &&
                         cfg.kernel[1] == 3 && all_of(cfg.dilations, 1, 1);
    const bool max3 = window3 && cfg.kind == PoolKind::max && all_of(p->pads_, 0, 1);
    const bool sep3 = (max3 && (s1 || (s2 && out_w >= 16))) ||
                      (window3 && cfg.kind == PoolKind::average && s1 && all_of(p->pads_, 0, 0));
    if (cfg.block == 3 && !sep3)
      invalid(pool_name(cfg.kind),
              "block 3 is the 3x3 kernel of stride 1 (MaxPool with pads <= 1, AveragePool with none) or 2 "
              "(MaxPool, rows of 16 outputs or more); no dilation, no Indices; this pool on "
              "input {} is not one",
              cfg.input.str());
    // MaxPool 3x3 (strides 1 or 2, pads <= 1) on rows of at most 32 columns: pool2d_3x3_narrow, 16 outputs of
    // a row per float16 vector, each tap column an unaligned load, a plane per work-item. googlenet's stride-1
    // pools on 28x28 / 14x14 / 7x7 took 0.10-0.19 ms each by pool2d_3x3's strips (3-5x ONNX Runtime's), its
    // 3x3/2 on 28x28 0.35 ms by pool2d_planes; the ten of them 1.09-1.16 -> 0.85-0.88 ms of device time
    // (`cldl profile googlenet.onnx --random`, alternating).
    const bool narrow = max3 && all_of(cfg.strides, 1, 2) && in_w <= 32 && out_w <= 32;
    if (cfg.block == 32 && !narrow)
      invalid(pool_name(cfg.kind),
              "block 32 is the 3x3 MaxPool of strides 1 or 2, pads <= 1, no dilation, no Indices, on rows of at "
              "most 32 columns; this pool on input {} is not one",
              cfg.input.str());
    // CPUs: an output row per work-item in vector strips of 8 (PoCL, max 2x2/2 on 8x8x224x224: see `cldl
    // bench kernels --filter pool`); GPUs: one output per work-item, neighbours coalesce.
    // Rows narrower than 16 outputs have no vector strip (the zoo digits CNN's 450x16x8x8 max pool: 5.3 ms
    // by rows): there, windows of at most 25 taps, a plane per work-item with the window built in
    // (pool2d_planes: 0.24 ms, 0.65-0.75 ms plane-batched by pool2d; `cldl bench kernels --filter 450,`).
    const bool cpu = ctx.device(device).info.type == DeviceType::cpu;
    const int64_t taps = std::accumulate(cfg.kernel.begin(), cfg.kernel.end(), int64_t(1), std::multiplies<>());
    const int block = cfg.block         ? cfg.block
                      : cpu && narrow   ? 32
                      : cpu && sep3     ? 3
                      : cpu && out_w >= 16 ? 8
                      : cpu && taps <= 25  ? 64
                                           : 1;
    p->sep3_ = block == 3;
    p->narrow_ = block == 32;
    p->rows_ = p->use_2d_ && (block == 8 || block == 3);
    p->planes_ = p->use_2d_ && block == 64;
    if (p->planes_) {
      const size_t k = cfg.kernel.size();
      const int64_t kh = k == 2 ? cfg.kernel[0] : 1, sh = k == 2 && !cfg.strides.empty() ? cfg.strides[0] : 1;
      const int64_t sw = cfg.strides.empty() ? 1 : cfg.strides.back();
      prog = ctx.program(
          "pool.cl", fmt::format("-DPP_KH={} -DPP_KW={} -DPP_SH={} -DPP_SW={}", kh, cfg.kernel.back(), sh, sw), device);
    }
    p->kernel_ = make_kernel(prog, p->narrow_   ? "pool2d_3x3_narrow"
                                   : p->planes_ ? "pool2d_planes"
                                   : p->sep3_   ? "pool2d_3x3"
                                   : p->rows_   ? "pool2d_rows"
                                   : p->use_2d_ ? "pool2d"
                                                : "pool3d");
    p->algorithm_ = p->narrow_   ? "3x3 max, rows in float16 vectors, a plane per work-item"
                    : p->planes_ ? "direct 2-D, a plane per work-item"
                    : p->sep3_   ? "separable 3x3, an output row per work-item"
                    : p->rows_   ? "direct 2-D, an output row per work-item"
                    : p->use_2d_ ? "direct 2-D"
                                 : "direct 3-D";
    if (p->use_2d_) {
      const size_t ow = size_t(p->out_[p->out_.rank() - 1]), oh = n == 2 ? size_t(p->out_[p->out_.rank() - 2]) : 1;
      const size_t nc = size_t(cfg.input[0]) * size_t(cfg.input[1]);
      if (p->narrow_) {  // 8 planes per work-group: googlenet's 192-plane pools on both threads
        const PaddedLaunch l = padded_launch(int64_t(nc), 1, 1, 8);
        p->global_ = l.global;
        p->local_ = l.local;
      } else if (p->planes_) {
        const PaddedLaunch l = padded_launch(int64_t(nc), 1, 1, 64);
        p->global_ = l.global;
        p->local_ = l.local;
      } else if (p->rows_) {
        const PaddedLaunch l = padded_launch(int64_t(oh), int64_t(nc), 1, 64);
        p->global_ = l.global;
        p->local_ = l.local;
      } else {
        p->local_ = plane_batch_local_size(p->kernel_, ctx.device(device), ow, oh, nc);
      }
    }
  }
  log::debug("{} {} -> {}: {}", pool_name(cfg.kind), cfg.input.str(), p->out_.str(), p->algorithm_);
  return p;
}

void Pool::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const char* op = pool_name(cfg_.kind);
  const size_t n_out = cfg_.indices ? 2 : 1;
  if (in.size() != 1 || out.size() != n_out)
    invalid(op, "expects 1 input and {} output(s), got {} and {}", n_out, in.size(), out.size());
  if (cfg_.indices && (out[1].shape != out_ || out[1].dtype != DType::i64))
    invalid(op, "output Indices is {} {}, expected i64 {}", to_string(out[1].dtype), out[1].shape.str(), out_.str());
  if (in[0].shape != cfg_.input || in[0].dtype != DType::f32)
    invalid(op, "input X is {} {}, expected f32 {}", to_string(in[0].dtype), in[0].shape.str(), cfg_.input.str());
  if (out[0].shape != out_ || out[0].dtype != DType::f32)
    invalid(op, "output Y is {} {}, expected f32 {}", to_string(out[0].dtype), out[0].shape.str(), out_.str());
  const int64_t nc = cfg_.input[0] * cfg_.input[1];
  std::lock_guard lock(launch_mutex_);
  const int is_max = cfg_.kind == PoolKind::max || cfg_.kind == PoolKind::global_max;
  if (is_global(cfg_.kind)) {
    const int64_t plane = cfg_.input.numel() / nc;
    if (rows_) {
      set_args(kernel_, cl_int(is_max), cl_long(plane), cl_long(nc), in[0].buffer, cl_long(in[0].offset_elems()),
               out[0].buffer, cl_long(out[0].offset_elems()));
      ec.enqueue_kernel(kernel_, cl::NDRange(size_t(nc)), cl::NDRange(1), "global_pool_planes");
      return;
    }
    set_args(kernel_, cl_int(is_max), cl_long(plane), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
             cl_long(out[0].offset_elems()), cl::Local(group_ * sizeof(float)));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(nc) * group_), cl::NDRange(group_), "global_pool");
    return;
  }
  // Spatial dims right-aligned into (D, H, W); missing leading ones are 1 with no padding.
  const size_t n = cfg_.input.rank() - 2;
  int sp[3] = {1, 1, 1}, osp[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1};
  int pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  for (size_t i = 0; i < n; ++i) {
    const size_t a = 3 - n + i;
    sp[a] = int(cfg_.input[2 + i]);
    osp[a] = int(out_[2 + i]);
    k[a] = int(cfg_.kernel[i]);
    st[a] = cfg_.strides.empty() ? 1 : int(cfg_.strides[i]);
    dl[a] = cfg_.dilations.empty() ? 1 : int(cfg_.dilations[i]);
    pb[a] = int(pads_[i]);
    pe[a] = int(pads_[i + n]);
  }
  if (narrow_) {
    set_args(kernel_, sp[1], sp[2], osp[1], osp[2], st[1], st[2], pb[1], pb[2], in[0].buffer,
             cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()), cl_int(nc));
    ec.enqueue_kernel(kernel_, global_, local_, "pool2d_3x3_narrow");
    return;
  }
  if (planes_) {
    set_args(kernel_, cl_int(is_max), cl_int(cfg_.count_include_pad), sp[1], sp[2], osp[1], osp[2], dl[1], dl[2], pb[1],
             pb[2], pe[1], pe[2], in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
             cl_long(out[0].offset_elems()), cl_int(nc));
    ec.enqueue_kernel(kernel_, global_, local_, "pool2d_planes");
    return;
  }
  if (use_2d_) {
    set_args(kernel_, cl_int(is_max), cl_int(cfg_.count_include_pad), sp[1], sp[2], osp[1], osp[2], k[1], k[2], st[1],
             st[2], dl[1], dl[2], pb[1], pb[2], pe[1], pe[2], in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
             cl_long(out[0].offset_elems()));
    if (rows_) {
      kernel_.setArg(20, cl_int(nc));
      ec.enqueue_kernel(kernel_, global_, local_, sep3_ ? "pool2d_3x3" : "pool2d_rows");
    } else {
      ec.enqueue_kernel(kernel_, cl::NDRange(osp[2], osp[1], nc), local_, "pool2d");
    }
    return;
  }
  const Tensor& idx = cfg_.indices ? out[1] : out[0];
  const int with_idx = cfg_.indices ? (cfg_.column_major_indices ? 2 : 1) : 0;
  const int mode = cfg_.kind == PoolKind::lp ? 2 : is_max;  // POOL_* of kernels/pool.cl
  set_args(kernel_, cl_int(mode), cl_int(cfg_.p), cl_int(cfg_.count_include_pad), cl_int(with_idx), sp[0], sp[1], sp[2],
           osp[0], osp[1], osp[2], k[0], k[1], k[2], st[0], st[1], st[2], dl[0], dl[1], dl[2], pb[0], pb[1], pb[2],
           pe[0], pe[1], pe[2], in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()), idx.buffer, cl_long(idx.offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(osp[2], osp[1], size_t(osp[0]) * nc), cl::NullRange, "pool3d");
}

}  // namespace cldl
