// `cldl bench kernels`: the generic memory-bound kernels that whole models spend their time in (issue 26),
// in GB/s (bytes read + written once per run) against the device's copy bandwidth measured in the same
// run: a plain clEnqueueCopyBuffer of the same number of bytes ("copy N MB" rows, and "x of copy" in each
// note). Cases come from model profiles: attention softmax (BERT / MiniLM shapes), classifier and short
// rows, the head and layout transposes, depthwise and transposed convolutions (PP-OCR / MobileNet
// shapes, GFLOP in the note), Resize, Pad, pooling, LayerNorm and last-axis reductions. Where an op has
// several kernels, each is a row of its own (the name ends with the kernel), so the device's choice can
// be read against the others in the same run.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "layers/conv.hpp"
#include "layers/data.hpp"
#include "layers/pool.hpp"
#include "layers/reduce.hpp"
#include "layers/softmax.hpp"
#include "layers/transformer.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {

namespace {

HostTensor host_filled(Shape s, int seed) {
  HostTensor t(DType::f32, std::move(s));
  float* p = t.as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float((i * 7919 + seed * 13) % 2001) / 1000.0f - 1.0f;
  return t;
}

class Bench {
 public:
  Bench(Context& ctx, const Options& opts, Reporter& rep) : ctx_(ctx), opts_(opts), rep_(rep) {}

  // Times `op` and reports GB/s for `bytes` moved per run, with the copy bandwidth at that size in the
  // note (and `extra` before it).
  void op(const std::string& name, Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out, double bytes,
          const std::string& extra = {}) {
    if (!opts_.selected(name)) return;
    const double copy = copy_gbps(bytes);
    auto q = ctx_.queue();
    Tensor ws;
    if (op.workspace_bytes()) ws = ctx_.alloc(Shape{int64_t((op.workspace_bytes() + 3) / 4)}, DType::f32);
    Result r;
    r.family = "kernels";
    r.name = name;
    r.impl = "cldl";
    r.unit = "GB/s";
    r.work = bytes;
    r.wall = time_runs(
        [&] {
          ExecutionContext ec(q);
          op.enqueue(in, out, ws.valid() ? &ws : nullptr, ec);
          q.finish();
        },
        opts_.runs, opts_.warmup);
    r.note = fmt::format("{}{}{:.2f}x of copy; {}", extra, extra.empty() ? "" : "; ", r.rate() / copy, op.algorithm());
    rep_.add(r);
  }

  // A plain buffer copy of `bytes` (half read, half written, as the ops' byte counts are), timed and
  // reported once per size.
  double copy_gbps(double bytes) {
    const size_t half = std::max<size_t>(size_t(bytes / 2) / 64 * 64, 64);
    auto it = copies_.find(half);
    if (it != copies_.end()) return it->second;
    Tensor a = filled(ctx_, Shape{int64_t(half / 4)}), b = ctx_.alloc(Shape{int64_t(half / 4)}, DType::f32);
    auto q = ctx_.queue();
    Result r;
    r.family = "kernels";
    r.name = fmt::format("copy {:.2f} MB", double(half) / 1e6);
    r.impl = "clEnqueueCopyBuffer";
    r.unit = "GB/s";
    r.work = 2.0 * double(half);
    r.wall = time_runs(
        [&] {
          q.enqueueCopyBuffer(a.buffer, b.buffer, 0, 0, half);
          q.finish();
        },
        opts_.runs, opts_.warmup);
    r.note = "device copy bandwidth at this size";
    rep_.add(r);
    return copies_[half] = r.rate();
  }

 private:
  Context& ctx_;
  const Options& opts_;
  Reporter& rep_;
  std::map<size_t, double> copies_;
};

// One StridedCopy kernel, forced, as an op (so each copy kernel can be timed on any device).
struct CopyOp : Op {
  CopyOp(Context& ctx, const Iteration& it, CopyPlan::Kind k) : copy(ctx, 0, DType::f32) {
    try {
      plan = copy.plan(it, k);
    } catch (const Error&) {
      applies = false;
    }
  }
  std::string_view type() const override { return "StridedCopy"; }
  std::string algorithm() const override { return plan.describe(); }
  std::string kind_name() const {
    return plan.kind == CopyPlan::Kind::rows ? "rows" : plan.kind == CopyPlan::Kind::tiles ? "tiles" : "element";
  }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) override {
    copy.enqueue(plan, in[0], 0, out[0], 0, ec);
  }
  StridedCopy copy;
  CopyPlan plan;
  bool applies = true;
};

void run(Context& ctx, const Options& opts, Reporter& rep) {
  Bench b(ctx, opts, rep);
  // Softmax / LogSoftmax over the last axis: attention scores (BERT B4 S64 H4, MiniLM B4 S128 H12), a
  // classifier, 3-long rows, one vocabulary row.
  for (const Shape& s :
       {Shape{4, 4, 64, 64}, Shape{4, 12, 128, 128}, Shape{128, 1000}, Shape{100000, 3}, Shape{1, 50257}}) {
    for (bool lg : {false, true}) {
      if (lg && s[0] != 128) continue;
      for (SoftmaxRows rows : {SoftmaxRows::serial, SoftmaxRows::work_group}) {
        auto op = Softmax::create(ctx, 0, {s, -1, lg, rows});
        Tensor x = filled(ctx, s), y = ctx.alloc(s, DType::f32);
        b.op(fmt::format("{} {} {}", lg ? "logsoftmax" : "softmax", s.str(),
                         rows == SoftmaxRows::serial ? "serial" : "work_group"),
             *op, {x}, {y}, 2.0 * s.numel() * 4);
      }
    }
  }
  // Transposes: attention head splits and merges, NCHW <-> NHWC, a 2-D matrix; each copy kernel that
  // applies (element: one element per work-item, the GPU choice; rows / tiles: the CPU kernels).
  struct T {
    Shape s;
    std::vector<int64_t> perm;
  };
  for (const T& t : {T{Shape{4, 128, 12, 32}, {0, 2, 1, 3}}, T{Shape{4, 128, 12, 32}, {0, 2, 3, 1}},
                     T{Shape{4, 12, 128, 32}, {0, 2, 1, 3}}, T{Shape{8, 64, 56, 56}, {0, 2, 3, 1}},
                     T{Shape{8, 56, 56, 64}, {0, 3, 1, 2}}, T{Shape{1000, 1000}, {1, 0}},
                     T{Shape{2, 3, 5, 7, 11, 13}, {5, 3, 1, 0, 2, 4}}}) {
    const size_t r = t.s.rank();
    auto is = contiguous_strides(t.s);
    Shape so;
    std::vector<int64_t> src(r);
    for (size_t i = 0; i < r; ++i) {
      src[i] = is[t.perm[i]];
      so.dims.push_back(t.s[t.perm[i]]);
    }
    const Iteration it = collapse("Transpose", so.dims, {src, contiguous_strides(so)});
    std::string perm;
    for (auto p : t.perm) perm += fmt::format("{}{}", perm.empty() ? "" : ",", p);
    Tensor x = filled(ctx, t.s), y = ctx.alloc(so, DType::f32);
    for (CopyPlan::Kind k : {CopyPlan::Kind::element, CopyPlan::Kind::rows, CopyPlan::Kind::tiles}) {
      CopyOp op(ctx, it, k);
      if (!op.applies) continue;
      b.op(fmt::format("transpose {} perm {} {}", t.s.str(), perm, op.kind_name()), op, {x}, {y},
           2.0 * t.s.numel() * 4);
    }
  }
  // Depthwise 3x3 (stride 1 and 2) and transposed 2x2/2 convolutions (PP-OCR detector / MobileNet shapes).
  struct C {
    Shape in;
    int64_t k, stride;
  };
  // MobileNet v2/v3 and EfficientNet-B0's stride-1 layers from 7x7 to 56x56 (3x3 and 5x5) and a stride-2 one.
  for (const C& c : {C{Shape{1, 96, 80, 120}, 3, 1}, C{Shape{1, 96, 160, 240}, 3, 2}, C{Shape{1, 32, 112, 112}, 3, 1},
                     C{Shape{8, 64, 56, 56}, 3, 1}, C{Shape{1, 144, 56, 56}, 3, 1}, C{Shape{1, 240, 28, 28}, 5, 1},
                     C{Shape{1, 384, 14, 14}, 3, 1}, C{Shape{1, 672, 14, 14}, 5, 1}, C{Shape{1, 576, 7, 7}, 5, 1},
                     C{Shape{1, 960, 7, 7}, 3, 1}, C{Shape{1, 672, 14, 14}, 5, 2}, C{Shape{1, 96, 112, 112}, 3, 2},
                     C{Shape{1, 144, 56, 56}, 5, 2}, C{Shape{1, 240, 28, 28}, 3, 2}}) {
    ConvConfig cfg;
    const int64_t ch = c.in[1];
    cfg.input = c.in;
    cfg.weight = host_filled(Shape{ch, 1, c.k, c.k}, 1);
    cfg.bias = host_filled(Shape{ch}, 2);
    cfg.strides = {c.stride, c.stride};
    const int64_t p = c.k / 2;
    cfg.pads = {p, p, p, p};
    cfg.groups = ch;
    const Shape so = ConvOp::validate(cfg);
    Tensor x = filled(ctx, c.in), y = ctx.alloc(so, DType::f32);
    const double flops = 2.0 * double(so.numel()) * double(c.k * c.k);
    // 1: an output per work-item, 8: rows, 16: the flattened plane (stride 1), 32: split rows (stride 2), 64: a
    // plane per work-item.
    for (int block : {1, 8, 16, 32, 64}) {
      cfg.depthwise_block = block;
      std::unique_ptr<ConvOp> op;
      try {
        op = ConvOp::create(ctx, 0, cfg);
      } catch (const Error&) {
        continue;  // the form does not apply to this shape
      }
      b.op(fmt::format("depthwise {}x{}/{} {} block {}", c.k, c.k, c.stride, c.in.str(), block), *op, {x}, {y},
           double(c.in.numel() + so.numel()) * 4, fmt::format("{:.2f} GFLOP", flops / 1e9));
    }
  }
  for (const C& c : {C{Shape{1, 64, 40, 60}, 2, 2}, C{Shape{1, 24, 80, 120}, 2, 2}, C{Shape{1, 64, 20, 30}, 4, 2},
                     C{Shape{1, 4, 80, 120}, 2, 2}}) {
    ConvTransposeConfig cfg;
    const int64_t ch = c.in[1];
    cfg.input = c.in;
    cfg.weight = host_filled(Shape{ch, ch / 2, c.k, c.k}, 3);
    cfg.bias = host_filled(Shape{ch / 2}, 4);
    cfg.strides = {c.stride, c.stride};
    const int64_t p = (c.k - c.stride) / 2;
    cfg.pads = {p, p, p, p};
    const Shape so = ConvTransposeOp::validate(cfg);
    Tensor x = filled(ctx, c.in), y = ctx.alloc(so, DType::f32);
    const double flops = 2.0 * double(c.in.numel()) * double(ch / 2 * c.k * c.k);
    for (ConvTransposeAlgo a : {ConvTransposeAlgo::direct, ConvTransposeAlgo::gemm_col2im}) {
      cfg.algo = a;
      auto op = ConvTransposeOp::create(ctx, 0, cfg);
      b.op(
          fmt::format("conv_transpose {}x{}/{} {} -> {} {}", c.k, c.k, c.stride, c.in.str(), so.str(), op->algorithm()),
          *op, {x}, {y}, double(c.in.numel() + so.numel()) * 4, fmt::format("{:.2f} GFLOP", flops / 1e9));
    }
  }
  // Resize 2x up (nearest and linear, FPN-style) and pooling.
  for (ResizeMode m : {ResizeMode::nearest, ResizeMode::linear}) {
    ResizeConfig c{Shape{1, 96, 40, 60}, {1, 1, 2, 2}, {}, m};
    const Shape so = Resize::validate(c);
    Tensor x = filled(ctx, c.input), y = ctx.alloc(so, DType::f32);
    for (ResizeTable t : {ResizeTable::off, ResizeTable::on}) {
      c.table = t;
      auto op = Resize::create(ctx, 0, c);
      b.op(fmt::format("resize {} 2x {} {}", m == ResizeMode::nearest ? "nearest" : "linear", c.input.str(),
                       t == ResizeTable::on ? "tables" : "per pixel"),
           *op, {x}, {y}, double(c.input.numel() + so.numel()) * 4);
    }
  }
  // Pad by 1 on both spatial axes (Inception's avg_pool2d(padding=1) export), both kernels.
  for (PadMode m : {PadMode::constant, PadMode::reflect}) {
    PadConfig c{Shape{1, 288, 35, 35}, DType::f32, {0, 0, 1, 1, 0, 0, 1, 1}, {}, m};
    const Shape so = Pad::validate(c);
    Tensor x = filled(ctx, c.input), y = ctx.alloc(so, DType::f32);
    for (int kernel : {1, 2}) {
      c.kernel = kernel;
      auto op = Pad::create(ctx, 0, c);
      b.op(fmt::format("pad {} {} +1 {}", m == PadMode::constant ? "constant" : "reflect", c.input.str(),
                       kernel == 1 ? "element" : "rows"),
           *op, {x}, {y}, double(c.input.numel() + so.numel()) * 4);
    }
  }
  struct P {
    PoolKind kind;
    Shape in;
    int64_t k, stride, pad;
  };
  for (const P& p :
       {P{PoolKind::max, Shape{8, 8, 224, 224}, 2, 2, 0}, P{PoolKind::max, Shape{1, 64, 112, 112}, 3, 2, 1},
        P{PoolKind::average, Shape{8, 64, 56, 56}, 2, 2, 0}, P{PoolKind::max, Shape{450, 16, 8, 8}, 2, 2, 0},
        // googlenet's pools inside the inception blocks (3x3/1, pads 1) and its 3x3/2 on 28x28: block 3 is the
        // separable kernel, block 32 the narrow-row one (rows of at most 32 columns in float16 vectors).
        P{PoolKind::max, Shape{1, 256, 28, 28}, 3, 1, 1}, P{PoolKind::max, Shape{1, 512, 14, 14}, 3, 1, 1},
        P{PoolKind::max, Shape{1, 832, 7, 7}, 3, 1, 1}, P{PoolKind::max, Shape{1, 480, 28, 28}, 3, 2, 0},
        // inception_v3's average pools (3x3/1 after its Pad node, so no pads of their own).
        P{PoolKind::average, Shape{1, 288, 37, 37}, 3, 1, 0}, P{PoolKind::average, Shape{1, 768, 19, 19}, 3, 1, 0}}) {
    PoolConfig c;
    c.kind = p.kind;
    c.input = p.in;
    c.kernel = {p.k, p.k};
    c.strides = {p.stride, p.stride};
    c.pads = {p.pad, p.pad, p.pad, p.pad};
    const Shape so = Pool::validate(c);
    Tensor x = filled(ctx, c.input), y = ctx.alloc(so, DType::f32);
    // Small planes (the digits CNN's, at batch 450): the plane-per-work-item kernel too.
    for (int block : {1, 3, 8, 32, 64}) {
      if (block == 64 && so.dims.back() >= 16) continue;
      const bool max = p.kind == PoolKind::max;
      if (block == 32 && !(max && p.k == 3 && p.pad <= 1 && p.in.dims.back() <= 32)) continue;
      if (block == 3 && !(p.k == 3 && ((p.stride == 1 && p.pad <= (max ? 1 : 0)) ||
                                       (max && p.stride == 2 && p.pad <= 1 && so.dims.back() >= 16))))
        continue;
      c.block = block;
      auto op = Pool::create(ctx, 0, c);
      b.op(fmt::format("{}pool {}x{}/{} {} block {}", p.kind == PoolKind::max ? "max" : "avg", p.k, p.k, p.stride,
                       p.in.str(), block),
           *op, {x}, {y}, double(c.input.numel() + so.numel()) * 4);
    }
  }
  // LayerNorm over transformer rows and a last-axis mean.
  for (const Shape& s : {Shape{4, 128, 384}, Shape{4, 64, 64}}) {
    LayerNormConfig c;
    c.input = s;
    auto op = LayerNorm::create(ctx, 0, c);
    const Shape pc{s.dims.back()};
    Tensor x = filled(ctx, s), g = filled(ctx, pc), bb = filled(ctx, pc), y = ctx.alloc(s, DType::f32);
    b.op(fmt::format("layernorm {}", s.str()), *op, {x, g, bb}, {y}, 2.0 * s.numel() * 4);
  }
  for (const Shape& s : {Shape{4, 128, 384}, Shape{8192, 7}}) {
    ReduceConfig c{ReduceOp::mean, s, {-1}, true};
    auto op = Reduce::create(ctx, 0, c);
    const Shape so = Reduce::validate(c);
    Tensor x = filled(ctx, s), y = ctx.alloc(so, DType::f32);
    b.op(fmt::format("reduce_mean last axis {}", s.str()), *op, {x}, {y}, double(s.numel() + so.numel()) * 4);
  }
}

const Registration kKernels("kernels",
                            "generic memory-bound kernels in GB/s against the copy bandwidth measured in the same run: "
                            "softmax, transpose, depthwise / transposed conv, resize, pad, pooling, layernorm, reduce",
                            run);
}  // namespace

}  // namespace cldl::bench
