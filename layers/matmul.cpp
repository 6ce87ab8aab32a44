// MatMul and Dense on top of Gemm: shape rules, batch-broadcast planning, enqueue.
#include "layers/matmul.hpp"

#include "runtime/log.hpp"

namespace cldl {

namespace {
struct MatDims {
  int64_t M, K, N;
  Shape ba, bb;  // batch dims
};

MatDims mat_dims(const MatMulConfig& c) {
  if (c.a.rank() == 0) invalid("MatMul", "input A must have rank >= 1, got a scalar");
  if (c.b.rank() == 0) invalid("MatMul", "input B must have rank >= 1, got a scalar");
  std::vector<int64_t> a = c.a.dims, b = c.b.dims;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  MatDims d{a[a.size() - 2], a.back(), b.back(), Shape(std::vector<int64_t>(a.begin(), a.end() - 2)),
            Shape(std::vector<int64_t>(b.begin(), b.end() - 2))};
  if (b[b.size() - 2] != d.K)
    invalid("MatMul", "input B {} has {} rows, expected K = {} (the last dim of input A {})", c.b.str(),
            b[b.size() - 2], d.K, c.a.str());
  for (auto v : {d.M, d.K, d.N})
    if (v <= 0) invalid("MatMul", "empty matrices are not supported: A {}, B {}", c.a.str(), c.b.str());
  return d;
}
}  // namespace

Shape MatMul::validate(const MatMulConfig& c) {
  MatDims d = mat_dims(c);
  Shape out = broadcast_shapes("MatMul", {d.ba, d.bb});
  if (c.a.rank() > 1) out.dims.push_back(d.M);
  if (c.b.rank() > 1) out.dims.push_back(d.N);
  return out;
}

std::unique_ptr<MatMul> MatMul::create(Context& ctx, int device, const MatMulConfig& cfg) {
  std::unique_ptr<MatMul> m(new MatMul());
  m->cfg_ = cfg;
  m->out_ = validate(cfg);
  MatDims d = mat_dims(cfg);
  Shape bo = broadcast_shapes("MatMul", {d.ba, d.bb});
  // Strides per batch coordinate in elements: a broadcast operand gets 0, so Gemm reuses its matrix.
  auto scaled = [&](const Shape& in, int64_t mat) {
    auto s = broadcast_strides(in, bo);
    for (auto& v : s) v *= mat;
    return s;
  };
  auto so = contiguous_strides(bo);
  for (auto& v : so) v *= d.M * d.N;
  m->batch_ = collapse("MatMul", bo.dims, {scaled(d.ba, d.M * d.K), scaled(d.bb, d.K * d.N), so});
  const Iteration& it = m->batch_;
  const int r = it.rank - 1;
  GemmConfig g;
  g.M = d.M;
  g.N = d.N;
  g.K = d.K;
  g.batch = it.inner();
  g.stride_a = it.strides[0][r];
  g.stride_b = it.strides[1][r];
  g.stride_c = it.strides[2][r];
  g.provider = cfg.provider;
  m->gemm_ = Gemm::create(ctx, device, g);
  log::debug("MatMul {} x {} -> {}: {}", cfg.a.str(), cfg.b.str(), m->out_.str(), m->algorithm());
  return m;
}

std::string MatMul::algorithm() const {
  return fmt::format("gemm {} x{} batch, {} call(s)", gemm_->algorithm(), batch_.inner(), batch_.outer());
}

void MatMul::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  if (in.size() != 2 || out.size() != 1)
    invalid("MatMul", "expects 2 inputs and 1 output, got {} and {}", in.size(), out.size());
  const Shape* want[3] = {&cfg_.a, &cfg_.b, &out_};
  const char* names[3] = {"input A", "input B", "output Y"};
  const Tensor* ts[3] = {&in[0], &in[1], &out[0]};
  for (int i = 0; i < 3; ++i)
    if (ts[i]->shape != *want[i] || ts[i]->dtype != DType::f32)
      invalid("MatMul", "{} is {} {}, expected f32 {}", names[i], to_string(ts[i]->dtype), ts[i]->shape.str(),
              want[i]->str());
  const Iteration& it = batch_;
  const int64_t outer = it.outer();
  for (int64_t o = 0; o < outer; ++o) {
    // Offsets of this outer batch coordinate; one strided-batched Gemm covers the innermost dim.
    Tensor v[3] = {in[0], in[1], out[0]};
    int64_t rem = o;
    for (int dim = it.rank - 2; dim >= 0; --dim) {
      const int64_t c = rem % it.dims[dim];
      rem /= it.dims[dim];
      for (int k = 0; k < 3; ++k) v[k].offset_bytes += size_t(c * it.strides[k][dim]) * sizeof(float);
    }
    gemm_->run(v[0], v[1], v[2], ec);
  }
}

Shape Dense::validate(const DenseConfig& c) {
  if (c.input.rank() == 0) invalid("Dense", "input must have rank >= 1, got a scalar");
  if (c.units <= 0) invalid("Dense", "units must be positive, got {}", c.units);
  for (auto d : c.input.dims)
    if (d <= 0) invalid("Dense", "input has a non-positive dimension in shape {}", c.input.str());
  Shape out = c.input;
  out.dims.back() = c.units;
  return out;
}

std::unique_ptr<Dense> Dense::create(Context& ctx, int device, const DenseConfig& cfg) {
  std::unique_ptr<Dense> d(new Dense());
  d->cfg_ = cfg;
  d->out_ = validate(cfg);
  GemmConfig g;
  g.K = cfg.input.dims.back();
  g.M = cfg.input.numel() / g.K;
  g.N = cfg.units;
  g.trans_b = true;
  g.bias = cfg.bias ? GemmBias::per_col : GemmBias::none;
  g.act = cfg.act;
  g.provider = cfg.provider;
  d->gemm_ = Gemm::create(ctx, device, g);
  return d;
}

void Dense::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const size_t n_in = cfg_.bias ? 3 : 2;
  if (in.size() != n_in || out.size() != 1)
    invalid("Dense", "expects {} inputs and 1 output, got {} and {}", n_in, in.size(), out.size());
  const int64_t K = cfg_.input.dims.back(), N = cfg_.units;
  if (in[0].shape != cfg_.input) invalid("Dense", "input x has shape {}, expected {}", in[0].shape.str(), cfg_.input.str());
  if (in[1].shape != Shape{N, K}) invalid("Dense", "weight W has shape {}, expected [{}, {}]", in[1].shape.str(), N, K);
  if (cfg_.bias && in[2].numel() != N) invalid("Dense", "bias has shape {}, expected [{}]", in[2].shape.str(), N);
  if (out[0].shape != out_) invalid("Dense", "output has shape {}, expected {}", out[0].shape.str(), out_.str());
  gemm_->enqueue(in, out, nullptr, ec);
}

}  // namespace cldl
