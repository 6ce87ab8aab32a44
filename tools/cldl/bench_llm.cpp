// `cldl bench llm`: the language-model ops of layers/llm.hpp. TensorScatter writing one decode token into a
// [1, 8, 4096, 128] cache and SwiGLU on an MLP's [256, 8192] in GB/s (bytes read + written per run; the
// scatter copies the whole cache, as a functional op must); CausalConvWithState (k 4) in GB/s;
// LinearAttention gated_delta in GFLOP/s (about 6 d_k d_v per step and KV head, plus 2 d_k d_v per query
// head): a 256-token prefill and a batch-8 decode step, d_k = d_v = 128.
#include <fmt/format.h>

#include "layers/llm.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {

namespace {
void run(Context& ctx, const Options& opts, Reporter& rep) {
  {
    const Shape cs{1, 8, 4096, 128}, us{1, 8, 1, 128};
    auto op = TensorScatter::create(ctx, 0, {cs, us, DType::f32, -2, false, true});
    HostTensor idx(DType::i64, Shape{1});
    idx.as<int64_t>()[0] = 2047;
    Tensor c = filled(ctx, cs), u = filled(ctx, us), i = ctx.upload(idx), y = ctx.alloc(cs, DType::f32);
    time_op(ctx, opts, rep, "llm", "tensor_scatter [1,8,4096,128] one token", *op, {c, u, i}, {y},
            double(cs.numel() * 2 + us.numel()) * 4);
  }
  {
    const Shape s{256, 8192};
    auto op = SwiGluPair::create(ctx, 0, s, DType::f32, 1.0f);
    Tensor a = filled(ctx, s), b = filled(ctx, s), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "llm", "swiglu [256,8192]", *op, {a, b}, {y}, double(s.numel()) * 12);
  }
  {
    const Shape xs{1, 4096, 512}, ss{1, 4096, 3};
    auto op = CausalConvWithState::create(ctx, 0, {xs, 4, DType::f32, true, true, true});
    Tensor x = filled(ctx, xs), w = filled(ctx, Shape{4096, 1, 4}), b = filled(ctx, Shape{4096}), p = filled(ctx, ss),
           y = ctx.alloc(xs, DType::f32), s = ctx.alloc(ss, DType::f32);
    time_op(ctx, opts, rep, "llm", "causal_conv_with_state [1,4096,512] k4 silu", *op, {x, w, b, p}, {y, s},
            double(xs.numel() * 2 + ss.numel() * 2) * 4);
  }
  for (auto [B, T] : {std::pair<int64_t, int64_t>{1, 256}, {8, 1}}) {
    const int64_t H = 8, dk = 128, dv = 128;
    LinearAttentionConfig cfg;
    cfg.batch = B, cfg.seq = T, cfg.q_heads = H, cfg.kv_heads = H, cfg.head_dim_k = dk, cfg.head_dim_v = dv;
    cfg.has_past = true, cfg.beta_heads = H;
    auto op = LinearAttention::create(ctx, 0, cfg);
    const Shape xs{B, T, H * dk}, ss{B, H, dk, dv};
    Tensor q = filled(ctx, xs), k = filled(ctx, xs), v = filled(ctx, xs), p = filled(ctx, ss), d = filled(ctx, xs),
           bt = filled(ctx, Shape{B, T, H}), o = ctx.alloc(xs, DType::f32), s = ctx.alloc(ss, DType::f32);
    time_op(ctx, opts, rep, "llm", fmt::format("linear_attention gated_delta B{} T{} 8 heads 128x128", B, T), *op,
            {q, k, v, p, d, bt}, {o, s}, double(B * T * H * dk * dv) * 8, "GFLOP/s");
  }
}

const Registration kLlmBench("llm",
                             "language-model ops: tensor_scatter, swiglu, causal_conv_with_state in GB/s; "
                             "linear_attention (prefill, decode) in GFLOP/s",
                             run);
}  // namespace

}  // namespace cldl::bench
