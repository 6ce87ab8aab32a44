// TensorScatter, SwiGluPair, CausalConvWithState and LinearAttention: shape rules, dtype checks and the kernel
// arguments of kernels/llm.cl.
#include "layers/llm.hpp"

#include <algorithm>
#include <cmath>

namespace cldl {

namespace {
// LinearAttention keeps a state column in a private array up to this d_k (the array is sized to the next
// power of two, so few programs serve every head size); larger heads keep it in the workspace.
constexpr int64_t LA_MAX_PRIVATE_DK = 128;

const char* half_flag(DType t) { return t == DType::f16 ? "1" : "0"; }

std::string act_options(DType t, bool silu) { return fmt::format("-DT_HALF={} -DSILU={}", half_flag(t), silu ? 1 : 0); }

const ProgramVariants kLlmVariants("llm.cl", {"-DELEM_BYTES=4", "-DT_HALF=0 -DSILU=0", "-DT_HALF=0 -DSILU=1",
                                              "-DT_HALF=0 -DS_HALF=0 -DDK=64", "-DT_HALF=0 -DS_HALF=0 -DDK=128"});

void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s, DType dt) {
  if (t.shape != s) invalid(op, "{} has shape {}, expected {}", arg, t.shape.str(), s.str());
  if (t.dtype != dt) invalid(op, "{} has dtype {}, expected {}", arg, to_string(t.dtype), to_string(dt));
}

void check_float(std::string_view op, std::string_view arg, DType t) {
  if (t != DType::f32 && t != DType::f16)
    invalid(op, "{} has dtype {}; cldl runs it on f32 and f16", arg, to_string(t));
}

// A left-out optional output arrives as a tensor without a buffer (or not at all).
bool present(std::span<const Tensor> t, size_t i) { return i < t.size() && t[i].buffer() != nullptr; }
}  // namespace

// ---------------------------------------------------------------- TensorScatter
int64_t TensorScatter::validate(const TensorScatterConfig& c) {
  const int64_t r = int64_t(c.cache.rank());
  if (r < 2)
    invalid("TensorScatter", "past_cache must have rank >= 2 (batch and sequence), got shape {}", c.cache.str());
  if (c.axis < -r || c.axis >= r)
    invalid("TensorScatter", "attribute axis = {} is out of range for rank {}", c.axis, r);
  const int64_t axis = c.axis < 0 ? c.axis + r : c.axis;
  if (axis == 0) invalid("TensorScatter", "attribute axis = {} names the batch dim (must be 1 to {})", c.axis, r - 1);
  if (c.update.rank() != c.cache.rank())
    invalid("TensorScatter", "update has shape {}, expected rank {} like past_cache {}", c.update.str(), r,
            c.cache.str());
  for (int64_t i = 0; i < r; ++i) {
    const auto u = c.update[size_t(i)], p = c.cache[size_t(i)];
    if (p < 0 || u < 0)
      invalid("TensorScatter", "negative dimension in past_cache {} or update {}", c.cache.str(), c.update.str());
    if (i == axis ? u > p : u != p)
      invalid("TensorScatter", "update has shape {}; expected past_cache's {} with at most {} along axis {}",
              c.update.str(), c.cache.str(), p, axis);
  }
  if (dtype_size(c.dtype) != 1 && dtype_size(c.dtype) != 2 && dtype_size(c.dtype) != 4 && dtype_size(c.dtype) != 8)
    invalid("TensorScatter", "dtype {} has {} bytes per element (1, 2, 4 or 8 expected)", to_string(c.dtype),
            dtype_size(c.dtype));
  return axis;
}

std::unique_ptr<TensorScatter> TensorScatter::create(Context& ctx, int device, const TensorScatterConfig& cfg) {
  std::unique_ptr<TensorScatter> t(new TensorScatter());
  t->cfg_ = cfg;
  t->axis_ = validate(cfg);
  t->ctx_ = &ctx;
  t->kernel_ = make_kernel(ctx.program("llm.cl", fmt::format("-DELEM_BYTES={}", dtype_size(cfg.dtype)), device),
                           "tensor_scatter");
  t->whole_kernel_ = make_kernel(
      ctx.program("llm.cl", fmt::format("-DELEM_BYTES={}", dtype_size(cfg.dtype)), device), "tensor_scatter_whole");
  return t;
}

void TensorScatter::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                            ExecutionContext& ec) {
  const size_t n_in = cfg_.has_indices ? 3 : 2;
  if (in.size() != n_in || out.size() != 1)
    invalid("TensorScatter", "expects {} inputs and 1 output, got {} and {}", n_in, in.size(), out.size());
  check_tensor("TensorScatter", "input past_cache", in[0], cfg_.cache, cfg_.dtype);
  check_tensor("TensorScatter", "input update", in[1], cfg_.update, cfg_.dtype);
  if (cfg_.has_indices) check_tensor("TensorScatter", "input write_indices", in[2], Shape{cfg_.cache[0]}, DType::i64);
  check_tensor("TensorScatter", "output present_cache", out[0], cfg_.cache, cfg_.dtype);
  if (cfg_.cache.numel() == 0) return;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < int64_t(cfg_.cache.rank()); ++i)
    if (i < axis_)
      outer *= cfg_.cache[size_t(i)];
    else if (i > axis_)
      inner *= cfg_.cache[size_t(i)];
  const int64_t L = cfg_.cache[size_t(axis_)], S = cfg_.update[size_t(axis_)];
  const Tensor& idx = cfg_.has_indices ? in[2] : in[1];  // absent: update stands in (never read)
  std::lock_guard lock(launch_mutex_);
  const cl_long idx_off = cfg_.has_indices ? idx.offset_elems() : 0;
  // past_cache and present_cache the same bytes (a generator binding a state's input and output to one
  // buffer): only the update rows are written, one command of S rows.
  const bool in_place = in[0].buffer() == out[0].buffer() && in[0].offset_bytes == out[0].offset_bytes;
  if (!in_place && cfg_.update.numel() == 0) {
    ctx_->copy_async(in[0], out[0], ec);  // nothing to write: present is past
    return;
  }
  if (!in_place) {
    // One command that writes every element of present (update rows, the rest from past), where a copy and
    // the row kernel took two: a command costs ~18 us on PoCL, more than the copy of a small cache.
    set_args(whole_kernel_, cl_long(S), cl_long(outer / cfg_.cache[0]), cl_int(cfg_.circular ? 1 : 0),
             cl_int(cfg_.has_indices ? 1 : 0), in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
             cl_long(in[1].offset_elems()), idx.buffer, idx_off, out[0].buffer, cl_long(out[0].offset_elems()));
    ec.enqueue_kernel(whole_kernel_, cl::NDRange(size_t(inner), size_t(L), size_t(outer)), cl::NullRange,
                      "tensor_scatter_whole");
    return;
  }
  if (cfg_.update.numel() == 0) return;
  set_args(kernel_, cl_long(L), cl_long(outer / cfg_.cache[0]), cl_int(cfg_.circular ? 1 : 0),
           cl_int(cfg_.has_indices ? 1 : 0), in[1].buffer, cl_long(in[1].offset_elems()), idx.buffer, idx_off,
           out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner), size_t(S), size_t(outer)), cl::NullRange, "tensor_scatter");
}

// ---------------------------------------------------------------- SwiGLU (two inputs)
void SwiGluPair::validate(const Shape& shape, DType dtype) {
  for (auto d : shape.dims)
    if (d < 0) invalid("SwiGLU", "negative dimension in shape {}", shape.str());
  check_float("SwiGLU", "input A", dtype);
}

std::unique_ptr<SwiGluPair> SwiGluPair::create(Context& ctx, int device, const Shape& shape, DType dtype, float alpha) {
  validate(shape, dtype);
  std::unique_ptr<SwiGluPair> s(new SwiGluPair());
  s->shape_ = shape;
  s->dtype_ = dtype;
  s->alpha_ = alpha;
  s->kernel_ = make_kernel(ctx.program("llm.cl", act_options(dtype, false), device), "swiglu_pair");
  return s;
}

void SwiGluPair::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  if (in.size() != 2 || out.size() != 1)
    invalid("SwiGLU", "expects 2 inputs and 1 output, got {} and {}", in.size(), out.size());
  check_tensor("SwiGLU", "input A", in[0], shape_, dtype_);
  check_tensor("SwiGLU", "input B", in[1], shape_, dtype_);
  check_tensor("SwiGLU", "output Y", out[0], shape_, dtype_);
  if (shape_.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_float(alpha_), in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
           cl_long(in[1].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(shape_.numel())), cl::NullRange, "swiglu_pair");
}

// ---------------------------------------------------------------- CausalConvWithState
void CausalConvWithState::validate(const CausalConvConfig& c) {
  if (c.input.rank() != 3)
    invalid("CausalConvWithState", "input must be 3-D [batch, channels, length], got shape {}", c.input.str());
  for (auto d : c.input.dims)
    if (d < 0) invalid("CausalConvWithState", "negative dimension in input shape {}", c.input.str());
  if (c.kernel_size < 1)
    invalid("CausalConvWithState", "kernel size (weight dim 2) must be >= 1, got {}", c.kernel_size);
  if (c.input[2] + c.kernel_size > (int64_t(1) << 31) - 1 || c.input[1] > (int64_t(1) << 31) - 1)
    invalid("CausalConvWithState", "input shape {} with kernel size {} exceeds the int32 extents the kernel indexes",
            c.input.str(), c.kernel_size);
  check_float("CausalConvWithState", "input", c.dtype);
}

std::unique_ptr<CausalConvWithState> CausalConvWithState::create(Context& ctx, int device,
                                                                 const CausalConvConfig& cfg) {
  validate(cfg);
  std::unique_ptr<CausalConvWithState> c(new CausalConvWithState());
  c->cfg_ = cfg;
  c->kernel_ = make_kernel(ctx.program("llm.cl", act_options(cfg.dtype, cfg.silu), device), "causal_conv_with_state");
  return c;
}

void CausalConvWithState::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                                  ExecutionContext& ec) {
  const CausalConvConfig& c = cfg_;
  const size_t n_in = 2 + size_t(c.has_bias) + size_t(c.has_past);
  if (in.size() != n_in || out.empty() || out.size() > 2)
    invalid("CausalConvWithState", "expects {} inputs and 1 or 2 outputs, got {} and {}", n_in, in.size(), out.size());
  const int64_t B = c.input[0], C = c.input[1], L = c.input[2], K = c.kernel_size;
  check_tensor("CausalConvWithState", "input", in[0], c.input, c.dtype);
  check_tensor("CausalConvWithState", "input weight", in[1], Shape{C, 1, K}, c.dtype);
  size_t next = 2;
  const Tensor* bias = c.has_bias ? &in[next++] : nullptr;
  const Tensor* past = c.has_past ? &in[next++] : nullptr;
  if (bias) check_tensor("CausalConvWithState", "input bias", *bias, Shape{C}, c.dtype);
  if (past) check_tensor("CausalConvWithState", "input past_state", *past, Shape{B, C, K - 1}, c.dtype);
  check_tensor("CausalConvWithState", "output", out[0], c.input, c.dtype);
  const bool has_present = present(out, 1) && K > 1;
  if (has_present) check_tensor("CausalConvWithState", "output present_state", out[1], Shape{B, C, K - 1}, c.dtype);
  if (B * C == 0 || L + (has_present ? K - 1 : 0) == 0) return;
  const Tensor& b = bias ? *bias : in[0];
  const Tensor& p = past ? *past : in[0];
  const Tensor& s = has_present ? out[1] : out[0];
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(L), cl_int(K), cl_int(bias ? 1 : 0), cl_int(past ? 1 : 0), cl_int(has_present ? 1 : 0),
           in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer, cl_long(in[1].offset_elems()), b.buffer,
           cl_long(b.offset_elems()), p.buffer, cl_long(p.offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()), s.buffer, cl_long(s.offset_elems()));
  // An odd extent along dim 0 would leave the driver only tiny work-groups (PoCL: 5 of 515): round it up.
  ec.enqueue_kernel(kernel_, cl::NDRange(round_up(size_t(L + (has_present ? K - 1 : 0)), 16), size_t(C), size_t(B)),
                    cl::NullRange, "causal_conv_with_state");
}

// ---------------------------------------------------------------- LinearAttention
void LinearAttention::validate(const LinearAttentionConfig& c) {
  if (c.batch < 0 || c.seq < 0)
    invalid("LinearAttention", "batch {} and sequence length {} must be >= 0", c.batch, c.seq);
  if (c.q_heads <= 0 || c.kv_heads <= 0 || c.q_heads % c.kv_heads)
    invalid("LinearAttention", "q_num_heads ({}) must be a positive multiple of kv_num_heads ({})", c.q_heads,
            c.kv_heads);
  if (c.head_dim_k <= 0 || c.head_dim_v <= 0)
    invalid("LinearAttention", "head dims d_k = {} and d_v = {} must be positive", c.head_dim_k, c.head_dim_v);
  if (c.beta_heads != 1 && c.beta_heads != c.kv_heads)
    invalid("LinearAttention", "beta has {} values per step, expected kv_num_heads ({}) or 1", c.beta_heads,
            c.kv_heads);
  if (!std::isfinite(c.scale)) invalid("LinearAttention", "attribute scale = {} is not finite", c.scale);
  if (c.seq > INT32_MAX || c.q_heads * std::max(c.head_dim_k, c.head_dim_v) > INT32_MAX)
    invalid("LinearAttention", "sequence length {} or heads x head dim exceed the int32 extents the kernel indexes",
            c.seq);
  check_float("LinearAttention", "query", c.dtype);
  check_float("LinearAttention", "past_state", c.state_dtype);
}

std::unique_ptr<LinearAttention> LinearAttention::create(Context& ctx, int device, const LinearAttentionConfig& cfg,
                                                         bool force_global_state) {
  validate(cfg);
  std::unique_ptr<LinearAttention> a(new LinearAttention());
  a->cfg_ = cfg;
  a->private_state_ = !force_global_state && cfg.head_dim_k <= LA_MAX_PRIVATE_DK;
  int64_t dk = 0;
  if (a->private_state_)
    for (dk = 8; dk < cfg.head_dim_k;) dk *= 2;
  a->kernel_ = make_kernel(
      ctx.program("llm.cl",
                  fmt::format("-DT_HALF={} -DS_HALF={} -DDK={}", half_flag(cfg.dtype), half_flag(cfg.state_dtype), dk),
                  device),
      "linear_attention");
  // The private-state kernel shares k_t / exp(g_t) across a work-group within one head (dim 0): up to 64
  // columns per group, fewer where the device or the kernel allows less.
  if (a->private_state_) {
    const auto& dev = ctx.device(device);
    size_t most = std::min<size_t>(64, std::max<size_t>(1, dev.info.max_work_group_size));
    most = std::min(most, a->kernel_.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(dev.device));
    a->local_ = std::min(most, round_up(size_t(cfg.head_dim_v), 8));
  }
  return a;
}

std::string LinearAttention::algorithm() const {
  return private_state_ ? "one launch over all steps, a state column per work-item in private memory"
                        : "one launch over all steps, a state column per work-item in the workspace (d_k past " +
                              std::to_string(LA_MAX_PRIVATE_DK) + ")";
}

size_t LinearAttention::workspace_bytes() const {
  if (private_state_) return 0;
  return size_t(cfg_.batch * cfg_.kv_heads * cfg_.head_dim_k * cfg_.head_dim_v) * sizeof(float);
}

void LinearAttention::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* workspace,
                              ExecutionContext& ec) {
  const LinearAttentionConfig& c = cfg_;
  const bool gated = c.rule == LinearAttentionRule::gated || c.rule == LinearAttentionRule::gated_delta;
  const bool delta = c.rule == LinearAttentionRule::delta || c.rule == LinearAttentionRule::gated_delta;
  const size_t n_in = 3 + size_t(c.has_past) + size_t(gated) + size_t(delta);
  if (in.size() != n_in || out.empty() || out.size() > 2)
    invalid("LinearAttention", "expects {} inputs and 1 or 2 outputs, got {} and {}", n_in, in.size(), out.size());
  const int64_t B = c.batch, T = c.seq, dk = c.head_dim_k, dv = c.head_dim_v;
  check_tensor("LinearAttention", "input query", in[0], Shape{B, T, c.q_heads * dk}, c.dtype);
  check_tensor("LinearAttention", "input key", in[1], Shape{B, T, c.kv_heads * dk}, c.dtype);
  check_tensor("LinearAttention", "input value", in[2], Shape{B, T, c.kv_heads * dv}, c.dtype);
  const Shape state{B, c.kv_heads, dk, dv};
  size_t next = 3;
  const Tensor* past = c.has_past ? &in[next++] : nullptr;
  const Tensor* decay = gated ? &in[next++] : nullptr;
  const Tensor* beta = delta ? &in[next++] : nullptr;
  if (past) check_tensor("LinearAttention", "input past_state", *past, state, c.state_dtype);
  if (decay)
    check_tensor("LinearAttention", "input decay", *decay, Shape{B, T, c.kv_heads * (c.decay_per_key ? dk : 1)},
                 c.dtype);
  if (beta) check_tensor("LinearAttention", "input beta", *beta, Shape{B, T, c.beta_heads}, c.dtype);
  check_tensor("LinearAttention", "output", out[0], Shape{B, T, c.q_heads * dv}, c.dtype);
  const bool has_present = present(out, 1);
  if (has_present) check_tensor("LinearAttention", "output present_state", out[1], state, c.state_dtype);
  if (!private_state_ && (!workspace || workspace->bytes() < workspace_bytes()))
    invalid("LinearAttention", "needs a workspace of {} bytes for its state (d_k = {})", workspace_bytes(), dk);
  if (B == 0) return;
  const float scale = c.scale == 0.0f ? float(1.0 / std::sqrt(double(dk))) : c.scale;
  // Absent inputs: query stands in (never read); likewise the state buffers.
  const Tensor& d = decay ? *decay : in[0];
  const Tensor& bt = beta ? *beta : in[0];
  const Tensor& p = past ? *past : (has_present ? out[1] : out[0]);
  const Tensor& s = has_present ? out[1] : p;
  const Tensor& ws = private_state_ ? in[0] : *workspace;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(T), cl_int(c.q_heads), cl_int(c.kv_heads), cl_int(dk), cl_int(dv), cl_int(gated ? 1 : 0),
           cl_int(c.decay_per_key ? dk : 1), cl_int(delta ? 1 : 0), cl_int(c.beta_heads), cl_int(past ? 1 : 0),
           cl_int(has_present ? 1 : 0), cl_float(scale), in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
           cl_long(in[1].offset_elems()), in[2].buffer, cl_long(in[2].offset_elems()), d.buffer,
           cl_long(d.offset_elems()), bt.buffer, cl_long(bt.offset_elems()), p.buffer, cl_long(p.offset_elems()),
           out[0].buffer, cl_long(out[0].offset_elems()), s.buffer, cl_long(s.offset_elems()), ws.buffer,
           cl_long(private_state_ ? 0 : ws.offset_elems()));
  // The private-state kernel's work-groups stay within one head (its local memory holds that head's k_t).
  if (private_state_)
    ec.enqueue_kernel(kernel_, cl::NDRange(round_up(size_t(dv), local_), size_t(c.kv_heads), size_t(B)),
                      cl::NDRange(local_, 1, 1), "linear_attention");
  else
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(dv), size_t(c.kv_heads), size_t(B)), cl::NullRange,
                      "linear_attention");
}

}  // namespace cldl
