// ONNX Gemm and MatMul mapped onto layers/gemm.hpp. Gemm's C is broadcast into the output with a K=1
// GEMM against a ones vector (no extra kernel), or fused as the per-column bias when beta = 1.
// MatMul handles 1-D operands and batch broadcasting with stride-0 batches, else one GEMM per batch.
// Versions: Gemm from opset 6 (C required before 11; before 7 it broadcasts only with broadcast = 1),
// MatMul from opset 1 (later versions only add dtypes).
#include "layers/gemm.hpp"
#include "models/executor.hpp"
#include "models/op_registry.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

void need_f32(const InferCtx& c, size_t i) {
  if (c.input(i).dtype != DType::f32)
    c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
}

void infer_gemm(InferCtx& c) {
  need_f32(c, 0);
  need_f32(c, 1);
  Shape a = c.shape(0), b = c.shape(1);
  if (a.rank() != 2 || b.rank() != 2) c.error("A and B must be 2-D, got {} and {}", a.str(), b.str());
  bool ta = c.node.attr_i("transA", 0), tb = c.node.attr_i("transB", 0);
  int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1], Kb = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
  if (K != Kb) c.error("inner dimensions differ: A {} (transA={}) and B {} (transB={})", a.str(), int(ta), b.str(), int(tb));
  // Gemm 6 to 10 require C; before 7, C broadcasts only with attribute broadcast = 1.
  if (!c.has_input(2) && c.opset < 11)
    c.error("input C is required before opset 11 (the model's opset is {})", c.opset);
  if (c.has_input(2)) {
    need_f32(c, 2);
    Shape s = c.shape(2);
    if (c.opset < 7 && c.node.attr_i("broadcast", 0) == 0 && s != Shape{M, N})
      c.error("C {} is not [{}, {}] and attribute broadcast = 0 (opset {})", s.str(), M, N, c.opset);
    int64_t cm = s.rank() == 2 ? s[0] : 1, cn = s.rank() >= 1 ? s[s.rank() - 1] : 1;
    if (s.rank() > 2 || (cm != 1 && cm != M) || (cn != 1 && cn != N))
      c.error("C {} does not broadcast to [{}, {}]", s.str(), M, N);
  }
  if (c.node.attr_i("_cldl_residual", 0) != 0) {  // the residual the matmul-residual pass fused
    if (!c.has_input(3)) c.error("_cldl_residual = 1 without input 3");
    need_f32(c, 3);
    if (c.shape(3) != Shape{M, N})
      c.error("residual (input 3) is {}, expected the output's shape [{}, {}]", c.shape(3).str(), M, N);
  } else if (c.has_input(3)) {
    c.error("input 3 is set without _cldl_residual = 1");
  }
  c.set(0, DType::f32, Shape{M, N});
}

// One GEMM call on views of the node's tensors: which input/extra tensor plays A, B and C.
struct Step {
  std::unique_ptr<Gemm> op;
  int a = 0, b = 1;  // >= 0: node input index; -1: the ones vector; -2: the kernel's b_t
  bool bias = false;
  bool residual = false;  // input 3 added in the epilogue (_cldl_residual)
  bool copy_c = false;  // instead of a GEMM: copy input 2 into the output
};

class GemmKernel : public NodeKernel {
 public:
  std::vector<Step> steps;
  Tensor ones;
  Tensor b_t;  // a constant B stored transposed (transB = 1), transposed once at load
  std::string algo;
  std::string algorithm() const override { return algo; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    Context* ctx = nullptr;
    (void)ctx;
    for (auto& s : steps) {
      const Tensor& y = out[0];
      if (s.copy_c) {
        copy(in[2], y, ec);
        continue;
      }
      const Tensor& A = s.a >= 0 ? in[s.a] : ones;
      const Tensor& B = s.b >= 0 ? in[s.b] : s.b == -2 ? b_t : ones;
      s.op->run(A, B, y, ec, s.bias ? &in[2] : nullptr, s.residual ? &in[3] : nullptr);
    }
  }
  std::function<void(const Tensor&, const Tensor&, ExecutionContext&)> copy;
};

// On CPUs the GEMM packs B into panels on every call when its rows are a multiple of 1024 floats apart
// (4 KiB strides alias in the caches; layers/gemm.hpp). A constant B is stored once with 16 more floats
// per row instead, so the kernel reads it in place: BERT-base's 768 x 3072 MatMul weights, a Gemm's
// transposed [576, 1024]. The padding in floats, 0 where none is needed.
int64_t constant_b_padding(LowerCtx& c, int64_t K, int64_t N) {
  return c.ctx.device(c.device).info.type == DeviceType::cpu && K >= 64 && N % 1024 == 0 ? 16 : 0;
}

// `b` ([K, N] row-major, or [N, K] when `transposed`) as [K, N + pad] on the device, once per model and
// device (the ConstantCache), or uploaded for this plan alone.
Tensor constant_b(LowerCtx& c, const HostTensor& b, bool transposed, int64_t pad, const char* kind) {
  const int64_t K = transposed ? b.shape()[1] : b.shape()[0], N = transposed ? b.shape()[0] : b.shape()[1];
  auto make = [&] {
    HostTensor t(DType::f32, Shape{K, N + pad});
    const float* src = b.as<float>();
    float* dst = t.as<float>();
    std::fill(dst, dst + t.numel(), 0.0f);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) dst[k * (N + pad) + n] = transposed ? src[n * K + k] : src[k * N + n];
    return t;
  };
  return c.options && c.options->constants ? c.options->constants->derived(c.ctx, b, kind, c.device, make)
                                           : c.ctx.upload(make(), c.device);
}

std::unique_ptr<NodeKernel> lower_gemm(LowerCtx& c) {
  auto k = std::make_unique<GemmKernel>();
  bool ta = c.node.attr_i("transA", 0), tb = c.node.attr_i("transB", 0);
  float alpha = c.node.attr_f("alpha", 1.0f), beta = c.node.attr_f("beta", 1.0f);
  Shape a = c.in[0].shape.to_shape(), y = c.out[0].shape.to_shape();
  int64_t M = y[0], N = y[1], K = ta ? a[0] : a[1];
  GemmConfig main;
  main.M = M; main.N = N; main.K = K; main.trans_a = ta; main.trans_b = tb; main.alpha = alpha;
  main.act = fused_activation(c.node);
  bool has_c = c.in.size() > 2 && !c.in[2].name.empty() && beta != 0.0f;
  std::vector<std::string> parts;
  if (has_c) {
    Shape s = c.in[2].shape.to_shape();
    int64_t cm = s.rank() == 2 ? s[0] : 1, cn = s.rank() >= 1 ? s[s.rank() - 1] : 1;
    if (cm == 1 && cn == N && beta == 1.0f) {
      main.bias = GemmBias::per_col;  // the dense-layer case: fused epilogue
      parts.push_back("bias fused");
    } else {
      main.beta = beta;
      Step pre;
      if (cm == M && cn == N) {
        pre.copy_c = true;
      } else {
        GemmConfig bc;  // Y = broadcast(C) as an outer product with ones
        bc.K = 1;
        if (cm == 1 && cn == 1) {  // scalar: M*N batches of a 1x1x1 product, stride 0 on both inputs
          bc.M = bc.N = 1; bc.batch = M * N; bc.stride_a = 0; bc.stride_b = 0; bc.stride_c = 1;
          pre.a = 2; pre.b = -1;
        } else if (cm == 1) {
          bc.M = M; bc.N = N; pre.a = -1; pre.b = 2;
        } else {
          bc.M = M; bc.N = N; pre.a = 2; pre.b = -1;
        }
        pre.op = Gemm::create(c.ctx, c.device, bc);
        int64_t n = std::max(M, N);
        std::vector<float> v(size_t(n), 1.0f);
        k->ones = c.ctx.upload(HostTensor::from<float>(Shape{n}, v), c.device);
      }
      parts.push_back(pre.copy_c ? "C copied" : "C broadcast by K=1 GEMM");
      k->steps.push_back(std::move(pre));
    }
  }
  Step s;
  s.a = 0; s.b = 1; s.bias = main.bias != GemmBias::none;
  if (c.node.attr_i("_cldl_residual", 0) != 0) {
    if (!k->steps.empty()) c.error("a fused residual needs C absent or a per-column bias with beta 1");
    s.residual = main.residual = true;
    parts.push_back("residual Add fused");
  }
  // A constant B with transB = 1 (how PyTorch exports nn.Linear) is transposed once here: the GEMM then
  // reads [K, N] in place, where a transposed B would be packed into panels again on every call.
  const HostTensor* wb = c.value.size() > 1 ? c.value[1] : nullptr;
  if (tb && wb && wb->dtype() == DType::f32 && wb->shape().rank() == 2) {
    const int64_t pad = constant_b_padding(c, wb->shape()[1], wb->shape()[0]);
    k->b_t = constant_b(c, *wb, true, pad, pad ? "Gemm B^T padded" : "Gemm B^T");
    main.trans_b = false;
    main.ldb = pad ? wb->shape()[0] + pad : 0;
    s.b = -2;
    parts.push_back(pad ? "constant B transposed at load, rows padded" : "constant B transposed at load");
  }
  s.op = Gemm::create(c.ctx, c.device, main);
  k->algo = s.op->algorithm();
  for (auto& p : parts) k->algo += ", " + p;
  if (main.act.kind != Act::none) k->algo += fmt::format(", {} fused", to_string(main.act.kind));
  k->steps.push_back(std::move(s));
  Context* ctx = &c.ctx;
  k->copy = [ctx](const Tensor& src, const Tensor& dst, ExecutionContext& ec) { ctx->copy_async(src, dst, ec); };
  return k;
}

// MatMul: numpy matmul semantics.
struct MatMulDims {
  int64_t M, N, K;
  Shape batch, a_batch, b_batch;  // broadcast batch shape and each operand's (rank-aligned)
};

MatMulDims matmul_dims(const InferCtx* ic, const LowerCtx* lc, Shape a, Shape b) {
  auto err = [&](const std::string& m) {
    if (ic) ic->error("{}", m);
    lc->error("{}", m);
  };
  if (a.rank() == 0 || b.rank() == 0) err("scalar operands are not allowed");
  if (a.rank() == 1) a.dims.insert(a.dims.begin(), 1);
  if (b.rank() == 1) b.dims.push_back(1);
  MatMulDims d;
  d.M = a[a.rank() - 2]; d.K = a[a.rank() - 1]; d.N = b[b.rank() - 1];
  if (b[b.rank() - 2] != d.K) err(fmt::format("inner dimensions differ: {} x {}", a.str(), b.str()));
  size_t r = std::max(a.rank(), b.rank()) - 2;
  d.batch.dims.assign(r, 1); d.a_batch.dims.assign(r, 1); d.b_batch.dims.assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i + a.rank() - 2 >= r ? a[i + a.rank() - 2 - r] : 1, db = i + b.rank() - 2 >= r ? b[i + b.rank() - 2 - r] : 1;
    if (da != db && da != 1 && db != 1) err(fmt::format("batch dimensions of {} and {} do not broadcast", a.str(), b.str()));
    d.a_batch[i] = da; d.b_batch[i] = db; d.batch[i] = std::max(da, db);
  }
  return d;
}

void infer_matmul(InferCtx& c) {
  need_f32(c, 0);
  need_f32(c, 1);
  Shape a = c.shape(0), b = c.shape(1);
  auto d = matmul_dims(&c, nullptr, a, b);
  Shape out = d.batch;
  if (a.rank() > 1) out.dims.push_back(d.M);
  if (b.rank() > 1) out.dims.push_back(d.N);
  if (c.has_input(2)) {  // the per-column bias the matmul-bias pass (fusion.cpp) fused
    need_f32(c, 2);
    if (c.node.attr_i("_cldl_bias", 0) == 0 || b.rank() != 2 || a.rank() < 2 || c.shape(2) != Shape{d.N})
      c.error("input 2 (fused bias) must be [{}] with a 2-D B and _cldl_bias = 1; got {}", d.N, c.shape(2).str());
  }
  if (c.node.attr_i("_cldl_residual", 0) != 0) {  // the residual the matmul-residual pass fused
    if (!c.has_input(3) || b.rank() != 2 || a.rank() < 2) c.error("a fused residual (input 3) needs a 2-D B");
    need_f32(c, 3);
    if (c.shape(3) != out) c.error("residual (input 3) is {}, expected the output's shape {}", c.shape(3).str(), out.str());
  } else if (c.has_input(3)) {
    c.error("input 3 is set without _cldl_residual = 1");
  }
  c.set(0, DType::f32, out);
}

class MatMulKernel : public NodeKernel {
 public:
  std::unique_ptr<Gemm> op;
  std::vector<std::array<int64_t, 3>> calls;  // element offsets of A, B, Y per call (looped broadcast)
  int64_t a_elems = 0, b_elems = 0, y_elems = 0;
  std::string algo;
  std::string algorithm() const override { return algo; }
  bool bias = false;      // input 2: per-column bias in the epilogue
  bool residual = false;  // input 3: a residual in the output's layout, added in the epilogue
  Tensor b_padded;        // a constant B stored with padded rows (constant_b_padding), read instead of input 1
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    if (calls.empty())
      return op->run(in[0], b_padded.valid() ? b_padded : in[1], out[0], ec, bias ? &in[2] : nullptr,
                     residual ? &in[3] : nullptr);
    for (auto& [oa, ob, oy] : calls)
      op->run(in[0].slice_elems(oa, a_elems, Shape{a_elems}), in[1].slice_elems(ob, b_elems, Shape{b_elems}),
              out[0].slice_elems(oy, y_elems, Shape{y_elems}), ec);
  }
};

std::unique_ptr<NodeKernel> lower_matmul(LowerCtx& c) {
  auto d = matmul_dims(nullptr, &c, c.in[0].shape.to_shape(), c.in[1].shape.to_shape());
  auto k = std::make_unique<MatMulKernel>();
  GemmConfig g;
  g.M = d.M; g.N = d.N; g.K = d.K;
  g.act = fused_activation(c.node);
  k->bias = c.in.size() > 2 && !c.in[2].name.empty();
  if (k->bias) g.bias = GemmBias::per_col;
  k->residual = c.node.attr_i("_cldl_residual", 0) != 0;
  g.residual = k->residual;
  int64_t nb = d.batch.numel(), na = d.a_batch.numel(), nbb = d.b_batch.numel();
  if ((na == nb || na == 1) && (nbb == nb || nbb == 1)) {
    if (na == nb && nbb == 1 && nb > 1) {  // B shared: one tall GEMM over all of A's rows
      g.M = d.M * nb;
      k->algo = "one GEMM (batch folded into M)";
    } else {
      g.batch = nb;
      g.stride_a = na == 1 ? 0 : -1;
      g.stride_b = nbb == 1 ? 0 : -1;
      k->algo = fmt::format("strided batch {}{}", nb, na == 1 || nbb == 1 ? " (stride-0 broadcast)" : "");
    }
  } else {  // mixed broadcast: one GEMM per output batch item
    k->a_elems = d.M * d.K; k->b_elems = d.K * d.N; k->y_elems = d.M * d.N;
    for (int64_t i = 0; i < nb; ++i) {
      int64_t ia = 0, ib = 0, rem = i, ma = 1, mb = 1;
      for (int64_t ax = int64_t(d.batch.rank()) - 1; ax >= 0; --ax) {
        int64_t coord = rem % d.batch[ax];
        rem /= d.batch[ax];
        if (d.a_batch[ax] != 1) ia += coord * ma;
        if (d.b_batch[ax] != 1) ib += coord * mb;
        ma *= d.a_batch[ax]; mb *= d.b_batch[ax];
      }
      k->calls.push_back({ia * k->a_elems, ib * k->b_elems, i * k->y_elems});
    }
    k->algo = fmt::format("{} GEMM calls (mixed batch broadcast)", nb);
  }
  const HostTensor* wb = c.value.size() > 1 ? c.value[1] : nullptr;
  if (k->calls.empty() && wb && wb->dtype() == DType::f32 && wb->shape().rank() == 2)
    if (const int64_t pad = constant_b_padding(c, d.K, d.N)) {
      k->b_padded = constant_b(c, *wb, false, pad, "MatMul B padded");
      g.ldb = d.N + pad;
      k->algo += ", constant B rows padded";
    }
  k->op = Gemm::create(c.ctx, c.device, g);
  k->algo = k->op->algorithm() + ", " + k->algo;
  if (k->bias) k->algo += ", bias fused";
  if (k->residual) k->algo += ", residual Add fused";
  if (g.act.kind != Act::none) k->algo += fmt::format(", {} fused", to_string(g.act.kind));
  if ((k->bias || k->residual) && !k->calls.empty()) c.error("a fused bias or residual needs one GEMM call (2-D B)");
  return k;
}

const OpRegistration kGemmOps{
    {.type = "Gemm", .since = 6, .family = "gemm", .infer = infer_gemm, .lower = lower_gemm},
    {.type = "MatMul", .since = 1, .family = "gemm", .infer = infer_matmul, .lower = lower_matmul},
};

}  // namespace
}  // namespace cldl::graph
