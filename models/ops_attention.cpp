// ONNX Attention (opsets 23/24) mapped onto layers/attention.hpp via onnx_attention_config. With
// past_key/past_value the present_key/value outputs ([B, Hkv, P+S, D]) are built on the device by the
// KV-cache append kernel (kernels/attention.cl kv_cache_append: past first, then the new K/V in Q's
// layout) and serve as the attended K/V; without a past, present = K/V re-laid out to [B, Hkv, S, D].
// Bool masks are boolean, float masks additive; nonpad_kv_seqlen (int64) becomes per-batch kv lengths.
// fp16 (Q, K, V and the past all f16, and / or an f16 attn_mask): f16 storage with f32 compute, by explicit conversion
// steps the node owns (see AttentionKernel::half): its f16 inputs are widened into f32 copies on the device, the f32
// kernels run, and the outputs are narrowed back to f16 (round to nearest even). The kernels accumulate
// in f32 anyway; f16 arithmetic would need cl_khr_fp16, which many devices lack.
#include <algorithm>
#include <mutex>

#include "layers/attention.hpp"
#include "models/op_registry.hpp"

namespace cldl::graph {
namespace {

constexpr size_t kQ = 0, kK = 1, kV = 2, kMask = 3, kPastK = 4, kPastV = 5, kNonpad = 6;

bool has(const std::vector<std::string>& v, size_t i) { return i < v.size() && !v[i].empty(); }

// The node's OnnxAttentionNode from its input shapes/types and attributes.
template <typename Get>
OnnxAttentionNode attention_node(const Node& n, Get&& shape_dtype) {
  OnnxAttentionNode a;
  a.q = shape_dtype(kQ).first, a.k = shape_dtype(kK).first, a.v = shape_dtype(kV).first;
  if (has(n.inputs, kMask)) {
    auto [s, t] = shape_dtype(kMask);
    a.attn_mask = s;
    a.attn_mask_bool = t == DType::boolean;
  }
  if (has(n.inputs, kPastK)) a.past_key = shape_dtype(kPastK).first;
  a.nonpad_kv_seqlen = has(n.inputs, kNonpad);
  a.q_num_heads = n.attr_i("q_num_heads", 0);
  a.kv_num_heads = n.attr_i("kv_num_heads", 0);
  a.is_causal = n.attr_i("is_causal", 0) != 0;
  if (n.has("scale")) a.scale = n.attr_f("scale", 0.0f);
  a.softcap = n.attr_f("softcap", 0.0f);
  if (has(n.outputs, 3)) a.qk_matmul_output_mode = int(n.attr_i("qk_matmul_output_mode", 0));
  return a;
}

void infer_attention(InferCtx& c) {
  const DType dt = c.input(kQ).dtype;
  if (dt != DType::f32 && dt != DType::f16)
    c.error("unsupported: input '{}' is {}, only f32 and f16 are implemented", c.input(kQ).name, to_string(dt));
  for (size_t i : {kK, kV, kPastK, kPastV})
    if (c.has_input(i) && c.input(i).dtype != dt)
      c.error("unsupported: input '{}' is {} and Q is {}; Q, K, V, past_key and past_value must share one dtype",
              c.input(i).name, to_string(c.input(i).dtype), to_string(dt));
  if (c.has_input(kMask) && c.input(kMask).dtype != DType::f32 && c.input(kMask).dtype != DType::f16 &&
      c.input(kMask).dtype != DType::boolean)
    c.error("unsupported: attn_mask is {}, only bool, f32 and f16 are implemented", to_string(c.input(kMask).dtype));
  if (c.has_input(kNonpad) && c.input(kNonpad).dtype != DType::i64)
    c.error("nonpad_kv_seqlen must be int64, got {}", to_string(c.input(kNonpad).dtype));
  if (c.has_input(kPastK) != c.has_input(kPastV)) c.error("past_key and past_value must be given together");
  if (c.has_input(kPastK) && c.has_input(kNonpad))
    c.error("unsupported: nonpad_kv_seqlen together with past_key (ONNX forbids the combination)");
  AttentionConfig cfg;
  OnnxAttentionNode a = attention_node(c.node, [&](size_t i) { return std::pair{c.shape(i), c.input(i).dtype}; });
  try {
    cfg = onnx_attention_config(a);
    if (a.past_key) {
      Shape pk = *a.past_key, pv = c.shape(kPastV);
      Shape wk{cfg.batch, cfg.eff_kv_heads(), pk.rank() == 4 ? pk[2] : -1, cfg.head_size};
      Shape wv{cfg.batch, cfg.eff_kv_heads(), wk[2], cfg.eff_v_head_size()};
      if (pk != wk || pv != wv)
        invalid("Attention", "past_key {} / past_value {} do not match [B, Hkv, P, D] = {} / {}", pk.str(), pv.str(),
                wk.str(), wv.str());
    }
  } catch (const Error& e) {
    c.error("{}", e.what());
  }
  c.set(0, dt, Attention::validate(cfg));
  if (has(c.node.outputs, 1)) c.set(1, dt, Shape{cfg.batch, cfg.eff_kv_heads(), cfg.kv_len, cfg.head_size});
  if (has(c.node.outputs, 2)) c.set(2, dt, Shape{cfg.batch, cfg.eff_kv_heads(), cfg.kv_len, cfg.eff_v_head_size()});
  if (has(c.node.outputs, 3)) c.set(3, dt, Shape{cfg.batch, cfg.q_heads, cfg.q_len, cfg.kv_len});
}

class AttentionKernel : public NodeKernel {
 public:
  std::unique_ptr<Attention> op;
  AttentionConfig cfg;
  bool past = false, present_k = false, present_v = false;
  int64_t past_len = 0, new_len = 0;
  Tensor workspace, scratch_k, scratch_v;  // node-owned (present buffers when the outputs are not wanted)
  cl::Kernel append;
  // fp16 storage: f32 copies of the node's f16 inputs / outputs (invalid where none), and the kernels that
  // widen the inputs into them before the f32 path and narrow the outputs back after it.
  bool half = false;
  std::vector<Tensor> in32, out32;
  cl::Kernel widen, narrow;
  std::mutex launch_mutex_;
  // Sessions share this kernel (and so its workspace / scratch): a call that uses them waits for the
  // previous call's last command, so two sessions on different queues never overwrite them in use.
  std::mutex order_mutex_;
  cl::Event last_;
  bool shared_buffers() const { return half || workspace.valid() || scratch_k.valid() || scratch_v.valid(); }

  std::string algorithm() const override {
    return op->algorithm() + (past ? ", past + new -> present by kv_cache_append" : "") +
           (half ? ", f16 inputs widened to f32 and outputs narrowed back" : "");
  }
  void convert(cl::Kernel& k, const Tensor& src, const Tensor& dst, ExecutionContext& ec) {
    if (src.numel() == 0) return;
    set_args(k, src.buffer, cl_long(src.offset_elems()), dst.buffer, cl_long(dst.offset_elems()));
    ec.enqueue_kernel(k, cl::NDRange(size_t(src.numel())), cl::NullRange, "attention f16 conversion");
  }
  // f16 node: the f32 path runs on the f32 copies of the f16 inputs and outputs.
  void run_half(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) {
    std::vector<Tensor> a(in.begin(), in.end()), b(out.begin(), out.end());
    {
      std::lock_guard lock(launch_mutex_);
      for (size_t i = 0; i < a.size(); ++i)
        if (in32[i].valid() && a[i].valid()) convert(widen, a[i], in32[i], ec), a[i] = in32[i];
    }
    for (size_t i = 0; i < b.size(); ++i)
      if (out32[i].valid() && b[i].valid()) b[i] = out32[i];
    run(a, b, ec);
    std::lock_guard lock(launch_mutex_);
    for (size_t i = 0; i < b.size(); ++i)
      if (out32[i].valid() && out[i].valid()) convert(narrow, out32[i], out[i], ec);
  }
  // Copies src (layout `l`, seq extent s) into dst [B, Hkv, cap, d] at position pos.
  void copy_in(const Tensor& src, AttentionLayout l, int64_t s, int64_t d, const Tensor& dst, int64_t cap, int64_t pos,
               ExecutionContext& ec) {
    if (s == 0) return;
    const int64_t H = cfg.eff_kv_heads();
    const bool bhsd = l == AttentionLayout::bhsd;
    const int64_t sb = H * s * d, sh = bhsd ? s * d : d, ss = bhsd ? d : H * d;
    const cl::Buffer none;
    set_args(append, cl_int(H), cl_int(d), cl_int(cap), cl_int(pos), src.buffer, cl_long(src.offset_elems()), cl_long(sb),
             cl_long(sh), cl_long(ss), dst.buffer, cl_long(dst.offset_elems()), none, cl_long(0));
    ec.enqueue_kernel(append, cl::NDRange(size_t(d), size_t(s), size_t(cfg.batch * H)), cl::NullRange,
                      "attention present");
  }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    if (!shared_buffers()) return run(in, out, ec);
    std::lock_guard order(order_mutex_);
    if (last_() != nullptr) ec.wait_for.push_back(last_);
    cl::Event done, *outer = ec.signal;
    ec.signal = &done;
    if (half)
      run_half(in, out, ec);
    else
      run(in, out, ec);
    ec.signal = outer;
    if (outer) *outer = done;
    last_ = done;
  }
  void run(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) {
    auto at = [](std::span<const Tensor> s, size_t i) { return i < s.size() ? s[i] : Tensor{}; };
    const int64_t D = cfg.head_size, Dv = cfg.eff_v_head_size();
    const AttentionLayout nl = cfg.layout;  // layout of the new K/V
    std::vector<Tensor> ins{in[kQ], in[kK], in[kV]};
    {
      std::lock_guard lock(launch_mutex_);
      if (past) {
        Tensor pk = present_k ? out[1] : scratch_k, pv = present_v ? out[2] : scratch_v;
        const int64_t cap = past_len + new_len;
        copy_in(in[kPastK], AttentionLayout::bhsd, past_len, D, pk, cap, 0, ec);
        copy_in(in[kPastV], AttentionLayout::bhsd, past_len, Dv, pv, cap, 0, ec);
        copy_in(in[kK], nl, new_len, D, pk, cap, past_len, ec);
        copy_in(in[kV], nl, new_len, Dv, pv, cap, past_len, ec);
        ins[1] = pk, ins[2] = pv;
      } else {
        if (present_k) copy_in(in[kK], nl, new_len, D, out[1], new_len, 0, ec);
        if (present_v) copy_in(in[kV], nl, new_len, Dv, out[2], new_len, 0, ec);
      }
    }
    if (at(in, kMask).valid()) ins.push_back(in[kMask]);
    if (at(in, kNonpad).valid()) ins.push_back(in[kNonpad]);
    std::vector<Tensor> outs{out[0]};
    if (cfg.qk_output_mode >= 0) outs.push_back(out[3]);
    op->enqueue(ins, outs, workspace.valid() ? &workspace : nullptr, ec);
  }
};

std::unique_ptr<NodeKernel> lower_attention(LowerCtx& c) {
  auto k = std::make_unique<AttentionKernel>();
  OnnxAttentionNode a = attention_node(c.node, [&](size_t i) { return std::pair{c.in[i].shape.to_shape(), c.in[i].dtype}; });
  k->cfg = onnx_attention_config(a);
  k->op = Attention::create(c.ctx, c.device, k->cfg);
  k->past = a.past_key.has_value();
  k->past_len = a.past_key ? (*a.past_key)[2] : 0;
  k->new_len = k->cfg.kv_len - k->past_len;
  k->present_k = has(c.node.outputs, 1);
  k->present_v = has(c.node.outputs, 2);
  const int64_t B = k->cfg.batch, H = k->cfg.eff_kv_heads(), L = k->cfg.kv_len;
  if (k->past && !k->present_k) k->scratch_k = c.ctx.alloc(Shape{B, H, L, k->cfg.head_size}, DType::f32, c.device);
  if (k->past && !k->present_v) k->scratch_v = c.ctx.alloc(Shape{B, H, L, k->cfg.eff_v_head_size()}, DType::f32, c.device);
  if (size_t ws = k->op->workspace_bytes()) k->workspace = c.ctx.alloc(Shape{int64_t((ws + 3) / 4)}, DType::f32, c.device);
  if (k->past || k->present_k || k->present_v)
    k->append = make_kernel(c.ctx.program("attention.cl", "", c.device), "kv_cache_append");
  k->half = std::any_of(c.in.begin(), c.in.end(),
                        [](const ValueInfo& v) { return !v.name.empty() && v.dtype == DType::f16; });
  if (k->half) {
    auto copies = [&](const std::vector<ValueInfo>& v, std::vector<Tensor>& t) {
      for (const auto& vi : v)
        t.push_back(!vi.name.empty() && vi.dtype == DType::f16 ? c.ctx.alloc(vi.shape.to_shape(), DType::f32, c.device)
                                                               : Tensor{});
    };
    copies(c.in, k->in32);
    copies(c.out, k->out32);
    cl::Program prog = c.ctx.program("attention.cl", "", c.device);
    k->widen = make_kernel(prog, "attention_half_to_float");
    k->narrow = make_kernel(prog, "attention_float_to_half");
  }
  return k;
}

const OpRegistration kAttentionOps{
    {.type = "Attention", .since = 23, .family = "attention", .infer = infer_attention, .lower = lower_attention},
};

}  // namespace
}  // namespace cldl::graph
