// AttentionTrainForward and AttentionBackward: checks and the launches of kernels/attention_backward.cl (see
// layers/attention_backward.hpp).
#include "layers/attention_backward.hpp"

#include <fmt/format.h>

#include "runtime/program_cache.hpp"

namespace cldl {
namespace {

// Host twin of attn_bwd_params in kernels/attention_backward.cl (same member order; cl_long members 8-aligned).
struct BwdParams {
  cl_int Sq, Skv, q_heads, group, causal, causal_offset, mask_cols, pad0;
  cl_long mask_sb, mask_sh, mask_ss;
  cl_float scale, pad1;
};
static_assert(sizeof(BwdParams) == 64, "BwdParams must match attn_bwd_params in attention_backward.cl");

struct Strides {
  cl_long b, h, s;
};
Strides strides_of(AttentionLayout layout, int64_t heads, int64_t seq, int64_t dim) {
  if (layout == AttentionLayout::bhsd) return {heads * seq * dim, seq * dim, dim};
  return {seq * heads * dim, dim, heads * dim};
}

BwdParams params_of(const AttentionConfig& c) {
  BwdParams p{};
  p.Sq = cl_int(c.q_len), p.Skv = cl_int(c.kv_len), p.q_heads = cl_int(c.q_heads);
  p.group = cl_int(c.q_heads / c.eff_kv_heads());
  p.causal = c.causal, p.causal_offset = cl_int(c.causal_offset);
  p.scale = c.eff_scale();
  if (c.mask != AttentionMask::none) {
    const AttentionMaskLayout m = attention_mask_layout(c);
    p.mask_cols = cl_int(m.cols), p.mask_sb = m.sb, p.mask_sh = m.sh, p.mask_ss = m.ss;
  }
  return p;
}

cl::Program program_of(Context& ctx, int device, const AttentionConfig& c) {
  return ctx.program("attention_backward.cl",
                     fmt::format("-DHEAD_DIM={} -DHEAD_DIM_V={} -DMASK={}", c.head_size, c.eff_v_head_size(), int(c.mask)),
                     device);
}

void expect(const char* op, const char* arg, const Tensor& t, const Shape& want) {
  if (t.dtype != DType::f32) invalid(op, "{} must be f32, got {}", arg, to_string(t.dtype));
  if (t.shape != want) invalid(op, "{} has shape {}, expected {}", arg, t.shape.str(), want.str());
}

void check_mask(const char* op, const AttentionConfig& c, const Tensor& m) {
  if (c.mask == AttentionMask::none) return;
  const bool ok = c.mask == AttentionMask::additive ? m.dtype == DType::f32
                                                    : (m.dtype == DType::boolean || m.dtype == DType::u8);
  if (!ok)
    invalid(op, "mask has dtype {}, expected {}", to_string(m.dtype), c.mask == AttentionMask::additive ? "f32" : "bool");
  if (m.shape != c.mask_shape) invalid(op, "mask has shape {}, expected {}", m.shape.str(), c.mask_shape.str());
}

Shape q_shape(const AttentionConfig& c, int64_t dim) {
  return c.layout == AttentionLayout::bhsd ? Shape{c.batch, c.q_heads, c.q_len, dim} : Shape{c.batch, c.q_len, c.q_heads * dim};
}
Shape kv_shape(const AttentionConfig& c, int64_t dim) {
  return c.eff_kv_layout() == AttentionLayout::bhsd ? Shape{c.batch, c.eff_kv_heads(), c.kv_len, dim}
                                                    : Shape{c.batch, c.kv_len, c.eff_kv_heads() * dim};
}

}  // namespace

void AttentionTrainForward::validate(const AttentionConfig& c) {
  Attention::validate(c);
  if (c.softcap > 0.0f) invalid("AttentionTrain", "softcap {} is not differentiated (training needs softcap 0)", c.softcap);
  if (c.kv_lens != AttentionKvLens::none)
    invalid("AttentionTrain", "per-batch kv lengths (nonpad_kv_seqlen) are not differentiated: pass a mask instead");
  if (c.causal_offset_from_lens) invalid("AttentionTrain", "a causal offset from kv lengths is not differentiated");
  if (c.eff_capacity() != c.kv_len)
    invalid("AttentionTrain", "a KV cache (capacity {} > kv_len {}) is not differentiated", c.eff_capacity(), c.kv_len);
  if (c.qk_output_mode >= 0) invalid("AttentionTrain", "qk_matmul_output is not differentiated");
  if (c.head_size > 256 || c.eff_v_head_size() > 256)
    invalid("AttentionTrain", "head sizes up to 256 are differentiated, got {} / {}", c.head_size, c.eff_v_head_size());
}

std::unique_ptr<AttentionTrainForward> AttentionTrainForward::create(Context& ctx, int device, const AttentionConfig& cfg) {
  validate(cfg);
  auto a = std::unique_ptr<AttentionTrainForward>(new AttentionTrainForward(cfg));
  a->kernel_ = make_kernel(program_of(ctx, device, cfg), "attn_train_fwd");
  return a;
}

void AttentionTrainForward::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                                    ExecutionContext& ec) {
  const AttentionConfig& c = cfg_;
  const size_t need = 3 + (c.mask != AttentionMask::none);
  if (in.size() < need) invalid("AttentionTrain", "{} inputs, expected {}", in.size(), need);
  if (out.size() < 2) invalid("AttentionTrain", "{} outputs, expected 2 (Y, LSE)", out.size());
  const int64_t D = c.head_size, Dv = c.eff_v_head_size(), Hk = c.eff_kv_heads();
  expect("AttentionTrain", "Q", in[0], q_shape(c, D));
  expect("AttentionTrain", "K", in[1], kv_shape(c, D));
  expect("AttentionTrain", "V", in[2], kv_shape(c, Dv));
  expect("AttentionTrain", "Y", out[0], q_shape(c, Dv));
  expect("AttentionTrain", "LSE", out[1], lse_shape(c));
  const Tensor none;
  const Tensor& m = c.mask != AttentionMask::none ? in[3] : none;
  check_mask("AttentionTrain", c, m);
  const BwdParams p = params_of(c);
  const Strides qs = strides_of(c.layout, c.q_heads, c.q_len, D), ks = strides_of(c.eff_kv_layout(), Hk, c.kv_len, D),
                vs = strides_of(c.eff_kv_layout(), Hk, c.kv_len, Dv), ys = strides_of(c.layout, c.q_heads, c.q_len, Dv);
  const Tensor &Q = in[0], &K = in[1], &V = in[2], &Y = out[0], &L = out[1];
  if (Q.numel() == 0 || Y.numel() == 0) return;
  const cl_long moff = m.valid() ? cl_long(m.offset_bytes / dtype_size(m.dtype)) : 0;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, p, Q.buffer, cl_long(Q.offset_elems()), qs.b, qs.h, qs.s, K.buffer, cl_long(K.offset_elems()), ks.b,
           ks.h, ks.s, V.buffer, cl_long(V.offset_elems()), vs.b, vs.h, vs.s, Y.buffer, cl_long(Y.offset_elems()), ys.b,
           ys.h, ys.s, L.buffer, cl_long(L.offset_elems()), m.buffer, moff);
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(c.q_len), size_t(c.q_heads), size_t(c.batch)), cl::NullRange,
                    "attn_train_fwd");
}

std::unique_ptr<AttentionBackward> AttentionBackward::create(Context& ctx, int device, const AttentionConfig& cfg) {
  AttentionTrainForward::validate(cfg);
  auto a = std::unique_ptr<AttentionBackward>(new AttentionBackward(cfg));
  cl::Program p = program_of(ctx, device, cfg);
  a->dq_ = make_kernel(p, "attn_bwd_dq");
  a->dkv_ = make_kernel(p, "attn_bwd_dkv");
  return a;
}

void AttentionBackward::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* workspace,
                                ExecutionContext& ec) {
  const AttentionConfig& c = cfg_;
  if (in.size() < 7) invalid("AttentionGrad", "{} inputs, expected 7 (Q, K, V, mask, O, LSE, dO)", in.size());
  if (out.size() < 3) invalid("AttentionGrad", "{} outputs, expected 3 (dQ, dK, dV)", out.size());
  const int64_t D = c.head_size, Dv = c.eff_v_head_size(), Hk = c.eff_kv_heads();
  const char* op = "AttentionGrad";
  expect(op, "Q", in[0], q_shape(c, D));
  expect(op, "K", in[1], kv_shape(c, D));
  expect(op, "V", in[2], kv_shape(c, Dv));
  check_mask(op, c, in[3]);
  expect(op, "O", in[4], q_shape(c, Dv));
  expect(op, "LSE", in[5], AttentionTrainForward::lse_shape(c));
  expect(op, "dO", in[6], q_shape(c, Dv));
  expect(op, "dQ", out[0], q_shape(c, D));
  expect(op, "dK", out[1], kv_shape(c, D));
  expect(op, "dV", out[2], kv_shape(c, Dv));
  if (!workspace || workspace->bytes() < workspace_bytes())
    invalid(op, "needs a workspace of {} bytes, got {}", workspace_bytes(), workspace ? workspace->bytes() : 0);
  const BwdParams p = params_of(c);
  const Strides qs = strides_of(c.layout, c.q_heads, c.q_len, D), ks = strides_of(c.eff_kv_layout(), Hk, c.kv_len, D),
                vs = strides_of(c.eff_kv_layout(), Hk, c.kv_len, Dv), os = strides_of(c.layout, c.q_heads, c.q_len, Dv);
  const Tensor &Q = in[0], &K = in[1], &V = in[2], &m = in[3], &O = in[4], &L = in[5], &dO = in[6];
  const Tensor &dQ = out[0], &dK = out[1], &dV = out[2];
  const cl_long moff = m.valid() ? cl_long(m.offset_bytes / dtype_size(m.dtype)) : 0;
  const cl_long deo = cl_long(workspace->offset_elems());
  std::lock_guard lock(launch_mutex_);
  if (Q.numel() > 0) {
    set_args(dq_, p, Q.buffer, cl_long(Q.offset_elems()), qs.b, qs.h, qs.s, K.buffer, cl_long(K.offset_elems()), ks.b,
             ks.h, ks.s, V.buffer, cl_long(V.offset_elems()), vs.b, vs.h, vs.s, O.buffer, cl_long(O.offset_elems()), os.b,
             os.h, os.s, dO.buffer, cl_long(dO.offset_elems()), L.buffer, cl_long(L.offset_elems()), workspace->buffer,
             deo, dQ.buffer, cl_long(dQ.offset_elems()), m.buffer, moff);
    ec.enqueue_kernel(dq_, cl::NDRange(size_t(c.q_len), size_t(c.q_heads), size_t(c.batch)), cl::NullRange,
                      "attn_bwd_dq");
  }
  if (K.numel() > 0) {
    set_args(dkv_, p, Q.buffer, cl_long(Q.offset_elems()), qs.b, qs.h, qs.s, K.buffer, cl_long(K.offset_elems()), ks.b,
             ks.h, ks.s, V.buffer, cl_long(V.offset_elems()), vs.b, vs.h, vs.s, os.b, os.h, os.s, dO.buffer,
             cl_long(dO.offset_elems()), L.buffer, cl_long(L.offset_elems()), workspace->buffer, deo, dK.buffer,
             cl_long(dK.offset_elems()), dV.buffer, cl_long(dV.offset_elems()), m.buffer, moff);
    ec.enqueue_kernel(dkv_, cl::NDRange(size_t(c.kv_len), size_t(Hk), size_t(c.batch)), cl::NullRange, "attn_bwd_dkv");
  }
}

}  // namespace cldl
