// Transformer companions: validation, kernel choice and enqueue for LayerNorm, Rotary, Embedding, SwiGlu and
// FeedForward.
#include "layers/transformer.hpp"

#include "runtime/log.hpp"

namespace cldl {

namespace {
const ProgramVariants kTransformerVariants("transformer.cl",
                                           {"-DWG_SIZE=1 -DRMS=0 -DRESIDUAL=0", "-DWG_SIZE=64 -DRMS=0 -DRESIDUAL=0",
                                            "-DWG_SIZE=1 -DRMS=1 -DRESIDUAL=0", "-DWG_SIZE=64 -DRMS=1 -DRESIDUAL=0"});

void expect_f32(const char* op, const char* arg, const Tensor& t) {
  if (t.dtype != DType::f32) invalid(op, "{} must be f32, got {}", arg, to_string(t.dtype));
}
void expect_count(const char* op, const char* arg, const Tensor& t, int64_t n) {
  if (t.numel() != n) invalid(op, "{} has shape {} ({} elements), expected {} elements", arg, t.shape.str(), t.numel(), n);
}
}  // namespace

// ---- LayerNorm -----------------------------------------------------------------------------------------
int64_t LayerNormConfig::rows() const {
  int64_t a = axis < 0 ? axis + int64_t(input.rank()) : axis, r = 1;
  for (int64_t i = 0; i < a; ++i) r *= input[size_t(i)];
  return r;
}
int64_t LayerNormConfig::cols() const {
  int64_t a = axis < 0 ? axis + int64_t(input.rank()) : axis, c = 1;
  for (size_t i = size_t(a); i < input.rank(); ++i) c *= input[i];
  return c;
}

Shape LayerNorm::validate(const LayerNormConfig& c) {
  const char* op = c.rms ? "RMSNormalization" : "LayerNormalization";
  const int64_t r = int64_t(c.input.rank());
  if (r < 1) invalid(op, "input must have rank >= 1, got shape {}", c.input.str());
  if (c.axis < -r || c.axis >= r) invalid(op, "axis {} is out of range for rank {}", c.axis, r);
  for (auto d : c.input.dims)
    if (d <= 0) invalid(op, "input shape {} has an empty dimension", c.input.str());
  if (!(c.epsilon >= 0.0f)) invalid(op, "epsilon must be >= 0, got {}", c.epsilon);
  if (c.residual_sum_output && !c.residual) invalid(op, "residual_sum_output needs residual");
  if (c.cols() >= (int64_t(1) << 31)) invalid(op, "normalised size {} is above 2^31", c.cols());
  return c.input;
}

std::unique_ptr<LayerNorm> LayerNorm::create(Context& ctx, int device, const LayerNormConfig& cfg) {
  validate(cfg);
  std::unique_ptr<LayerNorm> n(new LayerNorm(cfg));
  const auto& info = ctx.device(device).info;
  // CPUs loop over a group's work-items on one thread: one work-item per row avoids the barriers. GPUs
  // want a group per row for rows of any useful length.
  size_t wg = 1;
  if (info.type != DeviceType::cpu)
    while (wg < 256 && wg * 2 <= info.max_work_group_size && int64_t(wg) < cfg.cols()) wg *= 2;
  if (cfg.wg_size > 0) {
    wg = size_t(cfg.wg_size);
    if ((wg & (wg - 1)) || wg > info.max_work_group_size)
      invalid(n->type(), "wg_size {} must be a power of two up to {}", cfg.wg_size, info.max_work_group_size);
  }
  n->wg_ = wg;
  std::string opts = fmt::format("-DWG_SIZE={} -DRMS={} -DRESIDUAL={}", wg, int(cfg.rms), int(cfg.residual));
  n->kernel_ = make_kernel(ctx.program("transformer.cl", opts, device), "norm_rows");
  n->algorithm_ = fmt::format("rows:wg{}{}", wg, cfg.residual ? "+residual" : "");
  return n;
}

void LayerNorm::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor*,
                   ExecutionContext& ec) {
  const auto& c = cfg_;
  const char* op = c.rms ? "RMSNormalization" : "LayerNormalization";
  const bool has_bias = c.bias && !c.rms;
  size_t need = 2 + c.residual + has_bias;
  if (inputs.size() != need) invalid(op, "expects {} inputs, got {}", need, inputs.size());
  size_t need_out = 1 + c.residual_sum_output + 2 * c.stats_output;
  if (outputs.size() != need_out) invalid(op, "expects {} outputs, got {}", need_out, outputs.size());
  size_t i = 0;
  const Tensor& X = inputs[i++];
  const Tensor* R = c.residual ? &inputs[i++] : nullptr;
  const Tensor& S = inputs[i++];
  const Tensor* B = has_bias ? &inputs[i++] : nullptr;
  if (X.shape != c.input) invalid(op, "X has shape {}, expected {}", X.shape.str(), c.input.str());
  expect_f32(op, "X", X);
  if (R && R->shape != c.input) invalid(op, "residual has shape {}, expected {}", R->shape.str(), c.input.str());
  expect_count(op, "scale", S, c.cols());
  if (B) expect_count(op, "bias", *B, c.cols());
  if (outputs[0].shape != c.input) invalid(op, "Y has shape {}, expected {}", outputs[0].shape.str(), c.input.str());
  const cl::Buffer none;
  const Tensor* sum = c.residual_sum_output ? &outputs[1] : nullptr;
  const Tensor* mean = c.stats_output ? &outputs[1 + c.residual_sum_output] : nullptr;
  const Tensor* inv = c.stats_output ? &outputs[2 + c.residual_sum_output] : nullptr;
  if (mean) expect_count(op, "Mean", *mean, c.rows());
  if (inv) expect_count(op, "InvStdDev", *inv, c.rows());
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(c.cols()), c.epsilon, X.buffer, cl_long(X.offset_elems()), R ? R->buffer : none,
           cl_long(R ? R->offset_elems() : 0), sum ? sum->buffer : none, cl_long(sum ? sum->offset_elems() : 0),
           S.buffer, cl_long(S.offset_elems()), cl_int(B != nullptr), B ? B->buffer : S.buffer,
           cl_long(B ? B->offset_elems() : 0), outputs[0].buffer, cl_long(outputs[0].offset_elems()),
           mean ? mean->buffer : none, cl_long(mean ? mean->offset_elems() : 0), inv ? inv->buffer : none,
           cl_long(inv ? inv->offset_elems() : 0));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(c.rows()) * wg_), cl::NDRange(wg_), "norm_rows");
}

// ---- Rotary ---------------------------------------------------------------------------------------
Shape Rotary::validate(const RotaryConfig& c) {
  if (c.batch <= 0 || c.heads <= 0 || c.seq <= 0 || c.head_size <= 0)
    invalid("RotaryEmbedding", "batch, heads, seq and head_size must be positive, got {}, {}, {}, {}", c.batch,
            c.heads, c.seq, c.head_size);
  const int64_t rot = c.rotary_dim ? c.rotary_dim : c.head_size;
  if (rot < 0 || rot > c.head_size || rot % 2)
    invalid("RotaryEmbedding", "rotary_dim {} must be even and at most head_size {}", c.rotary_dim, c.head_size);
  if (c.position_ids && c.max_pos <= 0) invalid("RotaryEmbedding", "max_pos must be positive with position_ids, got {}", c.max_pos);
  return c.seq_first ? Shape{c.batch, c.seq, c.heads * c.head_size} : Shape{c.batch, c.heads, c.seq, c.head_size};
}

std::unique_ptr<Rotary> Rotary::create(Context& ctx, int device, const RotaryConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Rotary> r(new Rotary(cfg));
  r->kernel_ = make_kernel(ctx.program("transformer.cl", "", device), "rotary_embedding");
  return r;
}

void Rotary::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor*,
                     ExecutionContext& ec) {
  const auto& c = cfg_;
  const size_t need = 3 + c.position_ids;
  if (inputs.size() != need || outputs.size() != 1)
    invalid("RotaryEmbedding", "expects {} inputs and 1 output, got {} and {}", need, inputs.size(), outputs.size());
  const Shape xs = validate(c);
  const Tensor &X = inputs[0], &C = inputs[1], &S = inputs[2], &Y = outputs[0];
  if (X.shape != xs) invalid("RotaryEmbedding", "X has shape {}, expected {}", X.shape.str(), xs.str());
  if (Y.shape != xs) invalid("RotaryEmbedding", "Y has shape {}, expected {}", Y.shape.str(), xs.str());
  if (X.buffer() == Y.buffer() && X.offset_bytes == Y.offset_bytes)
    invalid("RotaryEmbedding", "Y must not alias X (pairs are read across work-items)");
  const int64_t rot = c.rotary_dim ? c.rotary_dim : c.head_size;
  const int64_t cs = (c.position_ids ? c.max_pos : c.batch * c.seq) * (rot / 2);
  expect_count("RotaryEmbedding", "cos_cache", C, cs);
  expect_count("RotaryEmbedding", "sin_cache", S, cs);
  const Tensor* P = c.position_ids ? &inputs[3] : nullptr;
  if (P && (P->dtype != DType::i64 || P->numel() != c.batch * c.seq))
    invalid("RotaryEmbedding", "position_ids must be i64 [{}, {}], got {} {}", c.batch, c.seq, to_string(P->dtype),
            P->shape.str());
  const int64_t H = c.heads, S_ = c.seq, D = c.head_size;
  const int64_t sb = H * S_ * D, sh = c.seq_first ? D : S_ * D, ss = c.seq_first ? H * D : D;
  const cl::Buffer none;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(H), cl_int(S_), cl_int(D), cl_int(rot), cl_int(c.interleaved), X.buffer,
           cl_long(X.offset_elems()), cl_long(sb), cl_long(sh), cl_long(ss), C.buffer, cl_long(C.offset_elems()),
           S.buffer, cl_long(S.offset_elems()), P ? P->buffer : none, cl_long(P ? P->offset_elems() : 0), Y.buffer,
           cl_long(Y.offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(D), size_t(S_), size_t(c.batch * H)), cl::NullRange,
                    "rotary_embedding");
}

// ---- Embedding ------------------------------------------------------------------------------------
Shape Embedding::validate(const EmbeddingConfig& c) {
  if (c.vocab <= 0) invalid("Embedding", "vocab must be positive, got {}", c.vocab);
  if (c.dim <= 0) invalid("Embedding", "dim must be positive, got {}", c.dim);
  if (c.id_type != DType::i32 && c.id_type != DType::i64)
    invalid("Embedding", "ids must be i32 or i64, got {}", to_string(c.id_type));
  Shape out = c.ids;
  out.dims.push_back(c.dim);
  return out;
}

std::unique_ptr<Embedding> Embedding::create(Context& ctx, int device, const EmbeddingConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Embedding> e(new Embedding(cfg));
  e->kernel_ = make_kernel(
      ctx.program("transformer.cl", cfg.id_type == DType::i64 ? "-DIDS_LONG=1" : "-DIDS_LONG=0", device),
      "embedding_gather");
  return e;
}

void Embedding::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor*,
                        ExecutionContext& ec) {
  const auto& c = cfg_;
  if (inputs.size() != 2 || outputs.size() != 1)
    invalid("Embedding", "expects 2 inputs and 1 output, got {} and {}", inputs.size(), outputs.size());
  const Tensor &T = inputs[0], &I = inputs[1], &Y = outputs[0];
  if (T.shape != Shape{c.vocab, c.dim})
    invalid("Embedding", "table has shape {}, expected [{}, {}]", T.shape.str(), c.vocab, c.dim);
  expect_f32("Embedding", "table", T);
  if (I.dtype != c.id_type) invalid("Embedding", "ids have dtype {}, expected {}", to_string(I.dtype), to_string(c.id_type));
  if (I.shape != c.ids) invalid("Embedding", "ids have shape {}, expected {}", I.shape.str(), c.ids.str());
  if (Y.shape != validate(c)) invalid("Embedding", "output has shape {}, expected {}", Y.shape.str(), validate(c).str());
  if (I.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(c.vocab), cl_int(c.dim), T.buffer, cl_long(T.offset_elems()), I.buffer,
           cl_long(I.offset_elems()), Y.buffer, cl_long(Y.offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(c.dim), size_t(I.numel())), cl::NullRange, "embedding_gather");
}

// ---- SwiGLU ---------------------------------------------------------------------------------------
Shape SwiGlu::validate(const Shape& in) {
  if (in.rank() < 1 || in[in.rank() - 1] <= 0 || in[in.rank() - 1] % 2)
    invalid("SwiGLU", "the last dim of input {} must be even and positive (gate and value halves)", in.str());
  Shape out = in;
  out[out.rank() - 1] /= 2;
  return out;
}

std::unique_ptr<SwiGlu> SwiGlu::create(Context& ctx, int device, const Shape& input) {
  validate(input);
  std::unique_ptr<SwiGlu> s(new SwiGlu(input));
  s->kernel_ = make_kernel(ctx.program("transformer.cl", "", device), "swiglu");
  return s;
}

void SwiGlu::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor*,
                     ExecutionContext& ec) {
  if (inputs.size() != 1 || outputs.size() != 1)
    invalid("SwiGLU", "expects 1 input and 1 output, got {} and {}", inputs.size(), outputs.size());
  const Shape out = validate(input_);
  if (inputs[0].shape != input_) invalid("SwiGLU", "X has shape {}, expected {}", inputs[0].shape.str(), input_.str());
  if (outputs[0].shape != out) invalid("SwiGLU", "Y has shape {}, expected {}", outputs[0].shape.str(), out.str());
  const int64_t F = out[out.rank() - 1], rows = out.numel() / F;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(F), inputs[0].buffer, cl_long(inputs[0].offset_elems()), outputs[0].buffer,
           cl_long(outputs[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(F), size_t(rows)), cl::NullRange, "swiglu");
}

// ---- FeedForward ----------------------------------------------------------------------------------
void FeedForward::validate(const FeedForwardConfig& c) {
  if (c.rows <= 0 || c.model_dim <= 0 || c.hidden_dim <= 0)
    invalid("FeedForward", "rows, model_dim and hidden_dim must be positive, got {}, {}, {}", c.rows, c.model_dim,
            c.hidden_dim);
}

std::unique_ptr<FeedForward> FeedForward::create(Context& ctx, int device, const FeedForwardConfig& cfg) {
  validate(cfg);
  std::unique_ptr<FeedForward> f(new FeedForward(cfg));
  GemmConfig up;
  up.M = cfg.rows, up.N = cfg.hidden_dim, up.K = cfg.model_dim, up.bias = GemmBias::per_col, up.act = cfg.act;
  GemmConfig down;
  down.M = cfg.rows, down.N = cfg.model_dim, down.K = cfg.hidden_dim, down.bias = GemmBias::per_col;
  f->up_ = Gemm::create(ctx, device, up);
  f->down_ = Gemm::create(ctx, device, down);
  return f;
}

void FeedForward::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
                          ExecutionContext& ec) {
  const auto& c = cfg_;
  if (inputs.size() != 5 || outputs.size() != 1)
    invalid("FeedForward", "expects 5 inputs (X, W1, b1, W2, b2) and 1 output, got {} and {}", inputs.size(),
            outputs.size());
  const char* names[5] = {"X", "W1", "b1", "W2", "b2"};
  const int64_t want[5] = {c.rows * c.model_dim, c.model_dim * c.hidden_dim, c.hidden_dim, c.hidden_dim * c.model_dim,
                           c.model_dim};
  for (int i = 0; i < 5; ++i) expect_count("FeedForward", names[i], inputs[size_t(i)], want[i]);
  expect_count("FeedForward", "Y", outputs[0], c.rows * c.model_dim);
  if (!workspace || workspace->bytes() < workspace_bytes())
    invalid("FeedForward", "needs a workspace of {} bytes, got {}", workspace_bytes(), workspace ? workspace->bytes() : 0);
  Tensor H = workspace->slice_elems(0, c.rows * c.hidden_dim, Shape{c.rows, c.hidden_dim});
  up_->run(inputs[0], inputs[1], H, ec, &inputs[2]);
  down_->run(H, inputs[3], outputs[0], ec, &inputs[4]);
}

}  // namespace cldl
