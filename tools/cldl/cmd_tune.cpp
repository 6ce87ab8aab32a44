// `cldl tune`: searches the tunable parameters of GEMM (own kernel), CLBlast's Xgemm, the conv
// algorithm choice, the fused attention tiles and the RNN step kernels for one device, over the bench
// shapes, given shapes or the problems a model runs, and writes the results to a tuning database
// (runtime/tuning.hpp). Attention covers the choice between its two fused kernels (blocked / tile) and
// their knobs; RNN the weight layout (tiles / rows / k-major) and each layout's blocking and work-groups.
// Every candidate's output is compared with a host reference before its time counts.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>
#include <unistd.h>

#include <fmt/format.h>

#include "layers/tuning_ops.hpp"
#include "runtime/context.hpp"
#include "runtime/log.hpp"
#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {
namespace {
using namespace cldl::tuning;
using clock_t_ = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};
extern "C" void tune_on_sigint(int) { g_stop.store(true); }

double since(clock_t_::time_point t0) { return std::chrono::duration<double>(clock_t_::now() - t0).count(); }

std::string hms(double s) {
  if (!(s >= 0) || s > 1e6) return "--:--";
  const int t = int(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02}", t / 60, t % 60);
}

std::vector<float> filled(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& f : v) {
    x = x * 1664525u + 1013904223u;
    f = float(int(x >> 9) % 2001 - 1000) / 1000.0f;
  }
  return v;
}

// Minimum of timed runs after one warm-up: at least 3 runs and 0.15 s, at most 10.
double time_min_ms(const std::function<void()>& fn) {
  fn();
  double best = 1e30, total = 0;
  for (int i = 0; i < 10 && (i < 3 || total < 0.15); ++i) {
    auto t0 = clock_t_::now();
    fn();
    const double s = since(t0);
    total += s;
    best = std::min(best, s * 1e3);
  }
  return best;
}

// One candidate: runs `op` once (after zeroing `out` when asked), reads the first `n` output values for the
// engine's reference check, then times it with time_min_ms.
Evaluation evaluate_op(Op& op, std::vector<Tensor> in, const Tensor& out, const Tensor* ws, ExecutionContext& ec,
                       size_t n, bool zero_first) {
  Evaluation ev;
  auto run = [&] {
    Tensor o[1] = {out};
    op.enqueue(in, o, ws, ec);
    ec.queue.finish();
  };
  if (zero_first) {
    std::vector<float> zero(n, 0.0f);
    ec.queue.enqueueWriteBuffer(out.buffer, CL_TRUE, out.offset_bytes, n * 4, zero.data());
  }
  run();
  ev.out.resize(n);
  ec.queue.enqueueReadBuffer(out.buffer, CL_TRUE, out.offset_bytes, n * 4, ev.out.data());
  ev.ms = time_min_ms(run);
  ev.ok = true;
  return ev;
}

// ---- host references (double accumulation) ----

std::vector<float> host_gemm(const GemmConfig& c, const std::vector<float>& A, const std::vector<float>& B) {
  std::vector<float> C(size_t(c.eff_stride_c() * (c.batch - 1) + (c.M - 1) * c.eff_ldc() + c.N), 0.0f);
  std::vector<double> row(size_t(c.N));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < c.M; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = A[size_t(b * c.eff_stride_a() + (c.trans_a ? k * c.eff_lda() + i : i * c.eff_lda() + k))];
        if (c.trans_b) {
          for (int64_t j = 0; j < c.N; ++j) row[size_t(j)] += a * B[size_t(b * c.eff_stride_b() + j * c.eff_ldb() + k)];
        } else {
          const float* br = &B[size_t(b * c.eff_stride_b() + k * c.eff_ldb())];
          for (int64_t j = 0; j < c.N; ++j) row[size_t(j)] += a * br[j];
        }
      }
      for (int64_t j = 0; j < c.N; ++j) C[size_t(b * c.eff_stride_c() + i * c.eff_ldc() + j)] = float(row[size_t(j)]);
    }
  return C;
}

std::vector<float> host_conv(const ConvGeometry& g, const std::vector<float>& x, const float* w, const float* bias) {
  std::vector<float> y(size_t(g.N * g.K * g.OH * g.OW));
  const int64_t CG = g.C / g.groups, KG = g.K / g.groups;
  std::vector<double> acc(size_t(g.OH * g.OW));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t k = 0; k < g.K; ++k) {
      std::fill(acc.begin(), acc.end(), bias ? double(bias[k]) : 0.0);
      const int64_t grp = k / KG;
      for (int64_t c = 0; c < CG; ++c)
        for (int64_t r = 0; r < g.KH; ++r)
          for (int64_t s = 0; s < g.KW; ++s) {
            const double wv = w[((k * CG + c) * g.KH + r) * g.KW + s];
            const float* xp = &x[size_t(((n * g.C) + grp * CG + c) * g.H * g.W)];
            for (int64_t oh = 0; oh < g.OH; ++oh) {
              const int64_t ih = oh * g.SH - g.PT + r * g.DH;
              if (ih < 0 || ih >= g.H) continue;
              for (int64_t ow = 0; ow < g.OW; ++ow) {
                const int64_t iw = ow * g.SW - g.PL + s * g.DW;
                if (iw >= 0 && iw < g.W) acc[size_t(oh * g.OW + ow)] += wv * xp[ih * g.W + iw];
              }
            }
          }
      for (int64_t p = 0; p < g.OH * g.OW; ++p) y[size_t((n * g.K + k) * g.OH * g.OW + p)] = float(acc[size_t(p)]);
    }
  return y;
}

// bhsd layout, no mask, optional causal (offset 0).
std::vector<float> host_attention(const AttentionConfig& c, const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v) {
  const int64_t B = c.batch, H = c.q_heads, Hk = c.eff_kv_heads(), S = c.q_len, L = c.kv_len, D = c.head_size,
                Dv = c.eff_v_head_size();
  const double scale = c.eff_scale();
  std::vector<float> y(size_t(B * H * S * Dv));
  std::vector<double> p(static_cast<size_t>(L));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hk);
      for (int64_t i = 0; i < S; ++i) {
        const float* qi = &q[size_t(((b * H + h) * S + i) * D)];
        double mx = -1e300;
        const int64_t last = c.causal ? std::min(L - 1, i + c.causal_offset) : L - 1;
        for (int64_t j = 0; j <= last; ++j) {
          const float* kj = &k[size_t(((b * Hk + hk) * L + j) * D)];
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += double(qi[d]) * kj[d];
          p[size_t(j)] = s * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= last; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
        float* yi = &y[size_t(((b * H + h) * S + i) * Dv)];
        for (int64_t d = 0; d < Dv; ++d) {
          double a = 0;
          for (int64_t j = 0; j <= last; ++j) a += p[size_t(j)] * v[size_t(((b * Hk + hk) * L + j) * Dv + d)];
          yi[d] = float(a / sum);
        }
      }
    }
  return y;
}

// ONNX RNN / LSTM / GRU, layout 0 (X [T, B, I], Y [T, D, B, H]), default activations, no clip, full
// lengths, zero initial state. Weights are turned k-major so the inner loops run over contiguous gate rows.
std::vector<float> host_rnn(const RnnConfig& c, const std::vector<float>& x, const RnnWeights& w) {
  const int64_t T = c.seq_length, B = c.batch, I = c.input_size, H = c.hidden_size, D = c.dirs(), G = c.gates(),
                GH = G * H;
  std::vector<float> y(static_cast<size_t>(T * D * B * H));
  const float *W = w.W.as<float>(), *R = w.R.as<float>(), *Bv = w.B ? w.B->as<float>() : nullptr;
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  auto zeros = [](int64_t n) { return std::vector<double>(static_cast<size_t>(n), 0.0); };
  std::vector<double> Wt = zeros(I * GH), Rt = zeros(H * GH), h = zeros(B * H), cs = zeros(B * H), xa = zeros(GH),
                      ha = zeros(GH), rh = zeros(H), hh = zeros(H), xd = zeros(I), z = zeros(H), r = zeros(H);
  auto accumulate = [](std::vector<double>& acc, const double* vec, int64_t K, const double* mt, int64_t ld, int64_t n0,
                       int64_t n) {
    for (int64_t k = 0; k < K; ++k) {
      const double v = vec[k];
      const double* row = mt + k * ld + n0;
      for (int64_t j = 0; j < n; ++j) acc[size_t(n0 + j)] += v * row[j];
    }
  };
  for (int64_t d = 0; d < D; ++d) {
    const bool reverse = c.direction == RnnDirection::reverse || d == 1;
    for (int64_t row = 0; row < GH; ++row) {
      for (int64_t k = 0; k < I; ++k) Wt[size_t(k * GH + row)] = W[(d * GH + row) * I + k];
      for (int64_t k = 0; k < H; ++k) Rt[size_t(k * GH + row)] = R[(d * GH + row) * H + k];
    }
    const float* wb = Bv ? Bv + d * 2 * GH : nullptr;
    const float* rb = Bv ? wb + GH : nullptr;
    std::fill(h.begin(), h.end(), 0.0);
    std::fill(cs.begin(), cs.end(), 0.0);
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = reverse ? T - 1 - s : s;
      for (int64_t b = 0; b < B; ++b) {
        double* hb = &h[size_t(b * H)];
        for (int64_t k = 0; k < I; ++k) xd[size_t(k)] = x[size_t((t * B + b) * I + k)];
        for (int64_t q = 0; q < GH; ++q) {
          xa[size_t(q)] = wb ? double(wb[q]) : 0.0;
          ha[size_t(q)] = rb ? double(rb[q]) : 0.0;
        }
        accumulate(xa, xd.data(), I, Wt.data(), GH, 0, GH);
        const bool gru0 = c.cell == RnnCell::gru && !c.linear_before_reset;
        accumulate(ha, hb, H, Rt.data(), GH, 0, gru0 ? 2 * H : GH);  // GRU lbr 0: the h gate needs r * h first
        if (c.cell == RnnCell::rnn) {
          for (int64_t j = 0; j < H; ++j) hh[size_t(j)] = std::tanh(xa[size_t(j)] + ha[size_t(j)]);
        } else if (c.cell == RnnCell::lstm) {  // gates i, o, f, c
          for (int64_t j = 0; j < H; ++j) {
            auto g = [&](int q) { return xa[size_t(q * H + j)] + ha[size_t(q * H + j)]; };
            const double i = sigmoid(g(0)), o = sigmoid(g(1)), f = sigmoid(g(2)), cc = std::tanh(g(3));
            double& cv = cs[size_t(b * H + j)];
            cv = f * cv + i * cc;
            hh[size_t(j)] = o * std::tanh(cv);
          }
        } else {  // gates z, r, h
          for (int64_t j = 0; j < H; ++j) {
            z[size_t(j)] = sigmoid(xa[size_t(j)] + ha[size_t(j)]);
            r[size_t(j)] = sigmoid(xa[size_t(H + j)] + ha[size_t(H + j)]);
          }
          if (gru0) {
            for (int64_t j = 0; j < H; ++j) rh[size_t(j)] = r[size_t(j)] * hb[j];
            accumulate(ha, rh.data(), H, Rt.data(), GH, 2 * H, H);  // ha[2H..3H) = Rbh + (r * h) Rh^T
            for (int64_t j = 0; j < H; ++j) hh[size_t(j)] = std::tanh(xa[size_t(2 * H + j)] + ha[size_t(2 * H + j)]);
          } else {
            for (int64_t j = 0; j < H; ++j)
              hh[size_t(j)] = std::tanh(xa[size_t(2 * H + j)] + r[size_t(j)] * ha[size_t(2 * H + j)]);
          }
          for (int64_t j = 0; j < H; ++j) hh[size_t(j)] = (1 - z[size_t(j)]) * hh[size_t(j)] + z[size_t(j)] * hb[j];
        }
        for (int64_t j = 0; j < H; ++j) {
          hb[j] = hh[size_t(j)];
          y[size_t(((t * D + d) * B + b) * H + j)] = float(hh[size_t(j)]);
        }
      }
    }
  }
  return y;
}

// ---- the tuner ----

// CLBlast candidates compile for tens of seconds on PoCL: its search gets this many tasks' share.
constexpr size_t kClblastWeight = 4;
// RNN candidates are timed over at most this many steps, their output checked over the first
// kRnnCheckSteps (see Tuner::rnn).
constexpr int64_t kRnnTuneSteps = 32, kRnnCheckSteps = 8;
// A winner other than the default must be this much faster in the confirmation timings.
constexpr double kConfirmMargin = 1.03;

struct TuneOptions {
  std::string device, out, model;
  std::vector<std::string> ops{"gemm", "conv", "attention", "rnn", "clblast"};
  std::vector<std::string> shapes, dims;
  double budget = 600;
  bool show = false;
  uint64_t seed = 1;
};

class Tuner {
 public:
  Tuner(Context& ctx, const TuneOptions& o) : ctx_(ctx), opts_(o), t0_(clock_t_::now()) {
    db_ = Database::load_file(opts_.out);
    base_ = Registry::global().databases();
    entry_key_ = device_key(ctx.device().info);
    db_.entry_for(entry_key_);
    prior_seconds_ = db_.entry_for(entry_key_).tuning_seconds;
    publish();
  }

  double left() const { return opts_.budget - since(t0_); }
  bool stopped() const { return g_stop.load() || left() <= 0; }
  void set_tasks(size_t n) { tasks_left_ = n; }
  size_t tuned() const { return tuned_; }

  // ---- gemm (own kernel) ----
  void gemm(GemmConfig cfg, const std::string& label = {}) {
    cfg.own = GemmOwnParams{};
    cfg.provider = GemmProvider::own;
    cfg.bias = GemmBias::none;
    cfg.act = Activation();
    cfg.residual = false;  // the epilogue a model fused in (a conv's or Gemm's residual Add) is not timed
    cfg.alpha = 1.0f, cfg.beta = 0.0f;
    const std::string problem = gemm_problem(cfg);
    if (done_now_.count("gemm " + problem)) return finish_task();  // a conv or the model had it already
    const DeviceInfo& info = ctx_.device().info;
    const size_t na = size_t(cfg.eff_stride_a() * (cfg.batch - 1) + ((cfg.trans_a ? cfg.K : cfg.M) - 1) * cfg.eff_lda() +
                             (cfg.trans_a ? cfg.M : cfg.K));
    const size_t nb = size_t(cfg.eff_stride_b() * (cfg.batch - 1) + ((cfg.trans_b ? cfg.N : cfg.K) - 1) * cfg.eff_ldb() +
                             (cfg.trans_b ? cfg.K : cfg.N));
    const auto ha = filled(na, 1), hb = filled(nb, 2);
    const auto ref = host_gemm(cfg, ha, hb);
    Tensor a = ctx_.upload(HostTensor::from<float>(Shape{int64_t(na)}, ha));
    Tensor b = ctx_.upload(HostTensor::from<float>(Shape{int64_t(nb)}, hb));
    Tensor c = ctx_.alloc(Shape{int64_t(ref.size())}, DType::f32);
    auto ec = ctx_.exec();
    Params start;
    {
      ScopedEnabled off(false);
      start = gemm_params(Gemm::create(ctx_, 0, cfg)->config().own);
    }
    auto evaluate = [&](const Params& p) {
      GemmConfig k = cfg;
      gemm_apply(p, k.own);
      ScopedEnabled off(false);
      auto g = Gemm::create(ctx_, 0, k);
      Tensor ws;
      if (g->workspace_bytes()) ws = ctx_.alloc(Shape{int64_t(g->workspace_bytes() / 4)}, DType::f32);
      return evaluate_op(*g, {a, b}, c, ws.valid() ? &ws : nullptr, ec, ref.size(), true);
    };
    SearchOptions so = search_options(fmt::format("gemm {}{}", problem, label));
    so.atol = 2e-5f * float(cfg.K) + 1e-5f;
    run_search("gemm", problem, gemm_space(info, cfg),
               [&](const Params& p) { return gemm_invalid(info, cfg, p); }, evaluate, ref, so, start);
  }

  // ---- CLBlast Xgemm (one parameter set per device, tuned on an M x N x K problem) ----
  void clblast(int64_t M, int64_t N, int64_t K) {
    const Device& dev = ctx_.device();
    GemmConfig cfg;
    cfg.M = M, cfg.N = N, cfg.K = K, cfg.provider = GemmProvider::clblast;
    const auto ha = filled(size_t(M * K), 3), hb = filled(size_t(K * N), 4);
    const auto ref = host_gemm(cfg, ha, hb);
    Tensor a = ctx_.upload(HostTensor::from<float>(Shape{M, K}, ha));
    Tensor b = ctx_.upload(HostTensor::from<float>(Shape{K, N}, hb));
    Tensor c = ctx_.alloc(Shape{M, N}, DType::f32);
    auto ec = ctx_.exec();
    std::unique_ptr<Gemm> g;
    {
      ScopedEnabled off(false);
      g = Gemm::create(ctx_, 0, cfg);
    }
    const Params defaults = clblast_defaults(dev);
    auto evaluate = [&](const Params& p) {
      clblast_apply(dev, p);
      return evaluate_op(*g, {a, b}, c, nullptr, ec, ref.size(), true);
    };
    Space space = clblast_space(dev.info);
    Params start;  // CLBlast's defaults restricted to the searched parameters
    for (const auto& d : space.dims)
      if (defaults.count(d.name)) start[d.name] = defaults.at(d.name);
    SearchOptions so = search_options(fmt::format("clblast Xgemm {}x{}x{}", M, N, K), kClblastWeight);
    so.atol = 2e-5f * float(K) + 1e-5f;
    so.random_samples = 16;
    run_search("clblast_xgemm", kClblastProblem, space, [&](const Params& p) { return clblast_invalid(dev.info, p); },
               evaluate, ref, so, start);
    clblast_apply(dev, {});
  }

  // ---- conv: the GEMMs of every GEMM-based algorithm first, then the algorithm ----
  void conv(const ConvConfig& cfg0) {
    ConvConfig cfg = cfg0;
    // The database keys the geometry alone: the convolution is timed without the epilogue a model fused into
    // it (an activation, a residual Add, a MaxPool), which the host reference below does not compute either.
    cfg.act = Activation();
    cfg.residual = false;
    cfg.max_pool_2x2 = false;
    const ConvGeometry g = ConvOp::geometry(cfg);
    const std::string problem = conv_problem(g);
    const Space space = conv_space(cfg);
    // Sub-tasks: tune the GEMMs the algorithms would run (each at most once per run).
    std::vector<GemmConfig> gemms;
    for (int64_t a : space.dims[0].values) {
      ConvConfig k = cfg;
      k.algo = ConvAlgo(a);
      if (k.algo != ConvAlgo::im2col_gemm && k.algo != ConvAlgo::gemm_1x1 && k.algo != ConvAlgo::winograd) continue;
      ScopedEnabled off(false);
      for (auto& gc : ConvOp::create(ctx_, 0, k)->gemm_configs())
        if (!done_now_.count("gemm " + gemm_problem(gc))) gemms.push_back(gc);
    }
    tasks_left_ += gemms.size();
    for (auto& gc : gemms) {
      if (stopped()) return;
      gemm(gc, fmt::format(" (conv {})", problem));
    }
    if (stopped()) return;
    const float* w = cfg.weight.as<float>();
    const std::vector<float> hx = filled(size_t(cfg.input.numel()), 5);
    std::vector<float> bias_v;
    if (cfg.bias) bias_v.assign(cfg.bias->as<float>(), cfg.bias->as<float>() + g.K);
    const auto ref = host_conv(g, hx, w, cfg.bias ? bias_v.data() : nullptr);
    Tensor x = ctx_.upload(HostTensor::from<float>(cfg.input, hx));
    Tensor y = ctx_.alloc(ConvOp::validate(cfg), DType::f32);
    auto ec = ctx_.exec();
    auto evaluate = [&](const Params& p) {
      ConvConfig k = cfg;
      k.algo = ConvAlgo(p.at("algo"));
      auto op = ConvOp::create(ctx_, 0, k);  // tuning on: its GEMMs use what was just found
      Tensor ws;
      if (op->workspace_bytes()) ws = ctx_.alloc(Shape{int64_t(op->workspace_bytes())}, DType::u8);
      return evaluate_op(*op, {x}, y, ws.valid() ? &ws : nullptr, ec, ref.size(), false);
    };
    const Params start{{"algo", int64_t(ConvOp::choose(cfg))}};  // the heuristic's choice
    SearchOptions so = search_options("conv " + problem);
    so.atol = 2e-5f * float(g.C / g.groups * g.KH * g.KW) + 1e-4f;
    so.rtol = 2e-3f;
    run_search("conv", problem, space, [](const Params&) { return std::string(); }, evaluate, ref, so, start);
  }

  // ---- attention: fused kernel (blocked / tile) and its knobs (bhsd, no mask) ----
  void attention(AttentionConfig cfg) {
    cfg.block_m = cfg.block_n = cfg.vec = cfg.rg = cfg.kb = cfg.cb = cfg.bkv = cfg.kv_splits = 0;
    cfg.use_local = cfg.blocked = -1;
    cfg.algo = AttentionAlgo::fused;
    const DeviceInfo& info = ctx_.device().info;
    const std::string problem = attention_problem(cfg);
    if (cfg.layout != AttentionLayout::bhsd || cfg.mask != AttentionMask::none || cfg.kv_lens != AttentionKvLens::none ||
        cfg.softcap != 0 || cfg.kv_capacity || cfg.kv_layout || cfg.head_size > 256) {
      log::warn("tune attention {}: only bhsd attention without mask, kv lengths or softcap is tuned; skipped", problem);
      return finish_task();
    }
    const int64_t Hk = cfg.eff_kv_heads(), D = cfg.head_size, Dv = cfg.eff_v_head_size();
    const auto hq = filled(size_t(cfg.batch * cfg.q_heads * cfg.q_len * D), 6);
    const auto hk = filled(size_t(cfg.batch * Hk * cfg.kv_len * D), 7);
    const auto hv = filled(size_t(cfg.batch * Hk * cfg.kv_len * Dv), 8);
    const auto ref = host_attention(cfg, hq, hk, hv);
    Tensor q = ctx_.upload(HostTensor::from<float>({cfg.batch, cfg.q_heads, cfg.q_len, D}, hq));
    Tensor k = ctx_.upload(HostTensor::from<float>({cfg.batch, Hk, cfg.kv_len, D}, hk));
    Tensor v = ctx_.upload(HostTensor::from<float>({cfg.batch, Hk, cfg.kv_len, Dv}, hv));
    Tensor y = ctx_.alloc({cfg.batch, cfg.q_heads, cfg.q_len, Dv}, DType::f32);
    auto ec = ctx_.exec();
    // Candidates that differ only in knobs their kernel does not read are the same kernel: timed once.
    std::map<Params, Evaluation> timed;
    auto evaluate = [&](const Params& p) {
      const Params key = attention_relevant(p);
      if (auto it = timed.find(key); it != timed.end() && !confirming_) return it->second;
      AttentionConfig c = cfg;
      attention_apply(p, c);
      ScopedEnabled off(false);
      auto op = Attention::create(ctx_, 0, c);
      Tensor ws;
      if (op->workspace_bytes()) ws = ctx_.alloc({int64_t(op->workspace_bytes() / 4)}, DType::f32);
      Evaluation ev = evaluate_op(*op, {q, k, v}, y, ws.valid() ? &ws : nullptr, ec, ref.size(), false);
      timed[key] = ev;
      return ev;
    };
    // The device heuristic (attention.cpp): the blocked kernel's choice and blocks
    // (Attention::blocked_defaults); the tile kernel with BLOCK_M 1, VEC 16 and global reads on CPUs,
    // BLOCK_M 64, VEC 4 and local tiles on GPUs.
    const bool cpu = info.type == DeviceType::cpu;
    const Attention::BlockedDefaults bd = Attention::blocked_defaults(info, cfg);
    const size_t block_m = cpu ? 1 : 64, block_n = 32;
    // The key chunks the heuristic picks for the tile kernel at those tiles (GPUs: by compute units).
    const int splits = Attention::key_chunks(info, cfg, block_m, block_n).first;
    Params start{{"blocked", bd.use ? 1 : 0}, {"block_m", int64_t(block_m)}, {"block_n", int64_t(block_n)},
                 {"vec", cpu ? 16 : 4}, {"use_local", cpu ? 0 : 1}, {"rg", bd.rg}, {"kb", bd.kb},
                 {"cb", bd.cb}, {"bkv", bd.bkv}, {"kv_splits", splits}};
    SearchOptions so = search_options("attention " + problem);
    so.random_samples = 16;
    run_search("attention", problem, attention_space(info, cfg),
               [&](const Params& p) { return attention_invalid(info, cfg, p); }, evaluate, ref, so, start);
  }

  // ---- rnn_step: the step kernels of one layer (and the LSTM tile projection), time-step parallel ----
  void rnn(RnnConfig cfg) {
    cfg.kernel = RnnKernelParams{};
    cfg.layout = 0;
    cfg.activations.clear();
    cfg.clip = 0;
    cfg.input_forget = false;
    // Every step runs the same kernels whatever T, and the key has no T: a candidate is timed over at
    // most kRnnTuneSteps steps, and its output checked over the first kRnnCheckSteps of them (Y is
    // [T, D, B, H]: those come first; a step's kernels compute every unit and batch row, and the
    // steps after the first read the state the kernels wrote), which keeps the host reference and
    // each timing short.
    cfg.seq_length = std::min(cfg.seq_length, kRnnTuneSteps);
    const DeviceInfo& info = ctx_.device().info;
    const std::string problem = rnn_problem(cfg);
    const int64_t T = cfg.seq_length, B = cfg.batch, I = cfg.input_size, H = cfg.hidden_size, D = cfg.dirs(),
                  GH = cfg.gates() * H;
    // Weights of about 1/sqrt(I + H) keep the gate pre-activations away from saturation, so every step
    // still depends on the recurrent product the candidates compute.
    auto tensor = [](Shape s, uint32_t seed, float scale) {
      HostTensor t(DType::f32, s);
      const auto v = filled(size_t(t.numel()), seed);
      for (size_t i = 0; i < v.size(); ++i) t.as<float>()[i] = v[i] * scale;
      return t;
    };
    const float scale = 1.0f / std::sqrt(float(I + H));
    RnnWeights w{tensor({D, GH, I}, 11, scale), tensor({D, GH, H}, 12, scale), tensor({D, 2 * GH}, 13, 0.1f), std::nullopt};
    const auto hx = filled(size_t(T * B * I), 14);
    RnnConfig check = cfg;
    check.seq_length = std::min(cfg.seq_length, kRnnCheckSteps);
    const auto ref = host_rnn(check, hx, w);  // x rows of the later steps are not read
    Tensor x = ctx_.upload(HostTensor::from<float>({T, B, I}, hx));
    Tensor y = ctx_.alloc({T, D, B, H}, DType::f32);
    auto ec = ctx_.exec();
    Params start;
    {
      ScopedEnabled off(false);
      start = rnn_params(RnnLayer::create(ctx_, 0, cfg, w)->kernel_params(), B);
    }
    // Candidates that differ only in knobs their layout does not read (or in work-group sizes clamped to
    // the same launch) are the same kernels: timed once. Tuning stays on, so the projection GEMM of the
    // row and k-major layouts uses the database's "gemm" entries; every rnn_step knob is explicit.
    std::map<Params, Evaluation> timed;
    auto evaluate = [&](const Params& p) {
      const Params key = rnn_relevant(cfg, p);
      if (auto it = timed.find(key); it != timed.end() && !confirming_) return it->second;
      RnnConfig k = cfg;
      rnn_apply(p, k.kernel);
      auto op = RnnLayer::create(ctx_, 0, k, w);
      op->set_strategy(RnnStrategy::time_parallel);
      Tensor ws = ctx_.alloc({int64_t(op->workspace_bytes() / 4)}, DType::f32);
      Evaluation ev = evaluate_op(*op, {x}, y, &ws, ec, ref.size(), true);
      timed[key] = ev;
      return ev;
    };
    SearchOptions so = search_options(fmt::format("rnn {} (T {})", problem, cfg.seq_length));
    so.random_samples = 16;
    so.rtol = 1e-3f;
    so.atol = 1e-4f;
    run_search("rnn_step", problem, rnn_space(info, cfg), [&](const Params& p) { return rnn_invalid(info, cfg, p); },
               evaluate, ref, so, start);
  }

  void save() {
    Entry& e = entry();
    e.tuning_seconds = prior_seconds_ + since(t0_);
    char buf[32];
    std::time_t now = std::time(nullptr);
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    e.tuned_at = buf;
    db_.save_file(opts_.out);
    publish();
  }

 private:
  Entry& entry() { return db_.entry_for(entry_key_); }

  // The runtime sees what was found so far (conv candidates use the freshly tuned GEMMs).
  void publish() {
    std::vector<Database> dbs{db_};
    dbs.insert(dbs.end(), base_.begin(), base_.end());
    Registry::global().set(std::move(dbs));
  }

  void finish_task() {
    tasks_left_ -= std::min(tasks_left_, weight_);
    weight_ = 1;
  }

  // A task's budget: its weight's share of what is left (tasks that end early leave time to the rest).
  SearchOptions search_options(std::string label, size_t weight = 1) {
    SearchOptions so;
    so.seed = opts_.seed + tuned_;
    weight_ = std::min(weight, std::max<size_t>(tasks_left_, 1));
    so.budget_s = std::max(1.0, left() * double(weight_) / double(std::max<size_t>(tasks_left_, 1)));
    so.stop = &g_stop;
    label_ = std::move(label);
    task_t0_ = clock_t_::now();
    const double task_budget = so.budget_s;
    so.progress = [this, task_budget](size_t done, size_t planned, double best_ms) {
      const double el = since(task_t0_);
      const double eta = std::min(task_budget - el, done ? el / double(done) * double(planned - std::min(done, planned)) : 1e9);
      const int width = 20, fill = planned ? int(width * std::min<size_t>(done, planned) / planned) : 0;
      std::string line = fmt::format("{:<44.44} [{}{}] {:>3}/{:<3} best {} ETA {} (total left {})", label_,
                                     std::string(size_t(fill), '#'), std::string(size_t(width - fill), '.'), done,
                                     planned, best_ms > 0 ? fmt::format("{:.3f} ms", best_ms) : "-", hms(eta),
                                     hms(std::max(0.0, left())));
      if (isatty(2)) fmt::print(stderr, "\r{}\x1b[K", line);
    };
    return so;
  }

  void run_search(const std::string& family, const std::string& problem, const Space& space,
                  const std::function<std::string(const Params&)>& invalid,
                  const std::function<Evaluation(const Params&)>& evaluate, const std::vector<float>& ref,
                  const SearchOptions& so, const Params& start) {
    double default_ms = 0;
    auto eval = [&](const Params& p) {
      Evaluation ev = evaluate(p);
      if (p == start && ev.ok) default_ms = ev.ms;  // the default's time, same run
      return ev;
    };
    SearchResult r = search(space, invalid, eval, ref, so, start);
    // Confirmation: on a loaded machine one measurement can flatter a candidate (the search keeps the
    // luckiest of many), so the winner and the default are timed again, alternately, and only these
    // fresh times decide: the default stays unless the winner is still kConfirmMargin faster.
    std::string confirm;
    if (r.best && *r.best != start && default_ms > 0 && !g_stop.load()) {
      double b = 1e30, d = 1e30;
      confirming_ = true;  // the families' caches of timed kernels are bypassed
      for (int i = 0; i < 3; ++i) {
        Evaluation ed = evaluate(start), eb = evaluate(*r.best);
        if (ed.ok && compare_results(ed.out, ref, so.rtol, so.atol).empty()) d = std::min(d, ed.ms);
        if (eb.ok) b = std::min(b, eb.ms);
      }
      confirming_ = false;
      if (d >= 1e30) d = default_ms;
      default_ms = d;
      if (d <= b * kConfirmMargin) {
        confirm = fmt::format("\n    confirmation: the default ({:.3f} ms) is within {:.0f}% of {} ({:.3f} ms); default kept",
                              d, (kConfirmMargin - 1) * 100, to_string(*r.best), b);
        r.best = start;
        r.best_ms = d;
      } else {
        r.best_ms = b;
      }
    }
    finish_task();
    done_now_.insert(family + " " + problem);
    if (isatty(2)) fmt::print(stderr, "\r\x1b[K");
    std::string summary = fmt::format("{:<44} {:>4} tried, {} invalid skipped, {} wrong rejected, {} failed{}",
                                      label_, r.evaluated, r.skipped_invalid, r.rejected_wrong, r.failed,
                                      r.interrupted ? " (budget / interrupted)" : "");
    if (r.best) {
      Tuned t{*r.best, r.best_ms, default_ms};
      entry().kernels[family][problem] = t;
      ++tuned_;
      summary += fmt::format("\n    best {} : {:.3f} ms, default {:.3f} ms ({:.2f}x)", to_string(*r.best), r.best_ms,
                             default_ms, default_ms > 0 ? default_ms / r.best_ms : 0.0);
      save();
    } else {
      summary += "\n    no correct candidate finished; nothing stored";
    }
    summary += confirm;
    for (const auto& l : r.log) summary += "\n    " + l;
    fmt::print(stderr, "{}\n", summary);
  }

  Context& ctx_;
  const TuneOptions& opts_;
  clock_t_::time_point t0_, task_t0_;
  Database db_;
  std::vector<Database> base_;
  DeviceKey entry_key_;
  double prior_seconds_ = 0;
  size_t tasks_left_ = 1, tuned_ = 0, weight_ = 1;
  bool confirming_ = false;  // run_search is re-timing the winner and the default
  std::set<std::string> done_now_;
  std::string label_;
};

// ---- shapes ----

ConvConfig conv_case(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t k, int64_t stride, int64_t pad,
                     int64_t groups) {
  ConvConfig cfg;
  cfg.input = Shape{N, C, H, W};
  HostTensor w(DType::f32, Shape{K, C / groups, k, k});
  auto wv = filled(size_t(w.numel()), 9);
  std::copy(wv.begin(), wv.end(), w.as<float>());
  cfg.weight = w;
  HostTensor b(DType::f32, Shape{K});
  auto bv = filled(size_t(K), 10);
  std::copy(bv.begin(), bv.end(), b.as<float>());
  cfg.bias = b;
  cfg.strides = {stride, stride};
  cfg.pads = {pad, pad, pad, pad};
  cfg.groups = groups;
  return cfg;
}

std::vector<int64_t> ints(const std::string& s, const std::string& what) {
  std::vector<int64_t> v;
  size_t p = 0;
  while (p <= s.size()) {
    size_t q = s.find_first_of(",x", p);
    if (q == std::string::npos) q = s.size();
    try {
      v.push_back(std::stoll(s.substr(p, q - p)));
    } catch (const std::exception&) {
      fail("--shapes {}: '{}' is not a list of integers", what, s);
    }
    p = q + 1;
  }
  return v;
}

struct Problems {
  std::vector<GemmConfig> gemm;
  std::vector<ConvConfig> conv;
  std::vector<AttentionConfig> attention;
  std::vector<RnnConfig> rnn;
  int64_t clblast_m = 1024, clblast_n = 1024, clblast_k = 1024;
};

RnnConfig rnn_case(int64_t T, int64_t B, int64_t I, int64_t H, int64_t D, RnnCell cell, bool lbr) {
  RnnConfig c;
  c.cell = cell;
  c.seq_length = T, c.batch = B, c.input_size = I, c.hidden_size = H;
  c.direction = D == 2 ? RnnDirection::bidirectional : RnnDirection::forward;
  c.linear_before_reset = lbr;
  return c;
}

// The `cldl bench` shapes (bench_gemm.cpp, bench_conv.cpp, bench_attention.cpp, bench_rnn.cpp).
Problems default_problems() {
  Problems p;
  for (auto [M, N, K, tb] : std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
           {1024, 1024, 1024, false}, {512, 512, 512, false}, {256, 3136, 576, false}, {4096, 64, 64, false},
           {1000, 3, 257, false}, {1024, 1024, 1024, true}}) {
    GemmConfig g;
    g.M = M, g.N = N, g.K = K, g.trans_b = tb;
    p.gemm.push_back(g);
  }
  p.conv = {conv_case(8, 64, 56, 56, 64, 3, 1, 1, 1), conv_case(8, 256, 56, 56, 64, 1, 1, 0, 1),
            conv_case(1, 3, 224, 224, 64, 7, 2, 3, 1), conv_case(1, 32, 112, 112, 32, 3, 1, 1, 32)};
  for (auto [B, S, H, D, causal] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>>{
           {1, 512, 8, 64, false}, {4, 256, 12, 64, false}, {1, 1024, 16, 64, true}}) {
    AttentionConfig a;
    a.batch = B, a.q_heads = H, a.q_len = S, a.kv_len = S, a.head_size = D, a.causal = causal;
    p.attention.push_back(a);
  }
  // The decode step: one new query over 1024 cached keys.
  AttentionConfig dec;
  dec.batch = 1, dec.q_heads = 16, dec.q_len = 1, dec.kv_len = 1024, dec.head_size = 64, dec.causal = true;
  dec.causal_offset = 1023;
  p.attention.push_back(dec);
  // The LSTM layers of `cldl bench rnn` (every layer of its stacks has input size = hidden size).
  p.rnn = {rnn_case(100, 32, 512, 512, 1, RnnCell::lstm, false), rnn_case(100, 1, 256, 256, 1, RnnCell::lstm, false),
           rnn_case(200, 64, 256, 256, 1, RnnCell::lstm, false)};
  return p;
}

// --shapes gemm:MxNxK[t] conv:N,C,H,W,K,k,stride,pad,groups attention:B,S,H,D[,causal] clblast:MxNxK
//          rnn:T,B,I,H[,directions[,lstm|gru|gru_lbr|rnn]]
Problems parse_shapes(const std::vector<std::string>& specs) {
  Problems p;
  for (const auto& s : specs) {
    const auto colon = s.find(':');
    if (colon == std::string::npos) fail("--shapes '{}': expected op:dims (gemm:1024x1024x1024, conv:..., attention:...)", s);
    const std::string op = s.substr(0, colon);
    std::string dims = s.substr(colon + 1);
    if (op == "gemm") {
      const bool tb = !dims.empty() && dims.back() == 't';
      if (tb) dims.pop_back();
      auto v = ints(dims, s);
      if (v.size() != 3) fail("--shapes '{}': gemm needs MxNxK (append t for B^T)", s);
      GemmConfig g;
      g.M = v[0], g.N = v[1], g.K = v[2], g.trans_b = tb;
      Gemm::validate(g);
      p.gemm.push_back(g);
    } else if (op == "conv") {
      auto v = ints(dims, s);
      if (v.size() != 9) fail("--shapes '{}': conv needs N,C,H,W,K,kernel,stride,pad,groups", s);
      p.conv.push_back(conv_case(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]));
      ConvOp::validate(p.conv.back());
    } else if (op == "attention") {
      auto v = ints(dims, s);
      if (v.size() != 4 && v.size() != 5) fail("--shapes '{}': attention needs B,S,H,D[,causal]", s);
      AttentionConfig a;
      a.batch = v[0], a.q_len = a.kv_len = v[1], a.q_heads = v[2], a.head_size = v[3], a.causal = v.size() == 5 && v[4];
      Attention::validate(a);
      p.attention.push_back(a);
    } else if (op == "rnn") {
      // T,B,I,H[,D[,cell]]: the cell name (if any) last, the rest integers.
      RnnCell cell = RnnCell::lstm;
      bool lbr = false;
      if (auto c = dims.rfind(','); c != std::string::npos && !dims.empty() && std::isalpha(uint8_t(dims.back()))) {
        const std::string name = dims.substr(c + 1);
        if (name == "lstm") cell = RnnCell::lstm;
        else if (name == "gru") cell = RnnCell::gru;
        else if (name == "gru_lbr") cell = RnnCell::gru, lbr = true;
        else if (name == "rnn") cell = RnnCell::rnn;
        else fail("--shapes '{}': unknown cell '{}' (lstm, gru, gru_lbr, rnn)", s, name);
        dims = dims.substr(0, c);
      }
      auto v = ints(dims, s);
      if (v.size() != 4 && v.size() != 5) fail("--shapes '{}': rnn needs T,B,I,H[,directions[,cell]]", s);
      if (v.size() == 5 && v[4] != 1 && v[4] != 2) fail("--shapes '{}': directions must be 1 or 2, got {}", s, v[4]);
      p.rnn.push_back(rnn_case(v[0], v[1], v[2], v[3], v.size() == 5 ? v[4] : 1, cell, lbr));
      RnnLayer::validate(p.rnn.back());
    } else if (op == "clblast") {
      auto v = ints(dims, s);
      if (v.size() != 3 || v[0] <= 0 || v[1] <= 0 || v[2] <= 0) fail("--shapes '{}': clblast needs MxNxK", s);
      p.clblast_m = v[0], p.clblast_n = v[1], p.clblast_k = v[2];
    } else {
      fail("--shapes '{}': unknown op '{}' (gemm, conv, attention, rnn, clblast)", s, op);
    }
  }
  return p;
}

void show(Context& ctx) {
  const DeviceInfo& info = ctx.device().info;
  const DeviceKey k = device_key(info);
  fmt::print("device: type={} vendor='{}' name='{}' driver='{}' library={}\n", k.type, k.vendor, k.name, k.driver,
             k.library);
  fmt::print("databases (user first): ");
  for (const auto& db : Registry::global().databases()) fmt::print("{} [{} entries]; ", db.origin(), db.entries().size());
  fmt::print("\n");
  auto all = Registry::global().resolve_all(info);
  if (all.empty()) {
    fmt::print("no tuning entries apply to this device: every kernel uses its heuristic default\n");
    return;
  }
  fmt::print("{:<58} {:<40} {:>9} {:>9}  {}\n", "kernel problem", "params", "ms", "default", "source");
  for (const auto& [what, m] : all)
    fmt::print("{:<58} {:<40} {:>9} {:>9}  {}\n", what, to_string(m.tuned.params),
               m.tuned.ms > 0 ? fmt::format("{:.3f}", m.tuned.ms) : "-",
               m.tuned.default_ms > 0 ? fmt::format("{:.3f}", m.tuned.default_ms) : "-", m.source);
  fmt::print("problems without an entry use the op's heuristic default\n");
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tune", "Tune kernels (GEMM, CLBlast, conv, attention, RNN steps) for a device into a database");
  static TuneOptions o;
  static std::string ops;
  cmd->add_option("-d,--device", o.device, "Device spec")->envname("CLDL_DEVICE");
  cmd->add_option("--op", ops, "Comma-separated families: gemm,conv,attention,rnn,clblast (default: all)");
  cmd->add_option("--shapes", o.shapes,
                  "Problems: gemm:MxNxK[t] conv:N,C,H,W,K,kernel,stride,pad,groups attention:B,S,H,D[,causal] "
                  "rnn:T,B,I,H[,directions[,lstm|gru|gru_lbr|rnn]] clblast:MxNxK (default: the `cldl bench` shapes)");
  cmd->add_option("--model", o.model, "Tune the GEMM, conv, attention and RNN problems this ONNX model runs");
  cmd->add_option("--dim", o.dims, "NAME=VALUE for a symbolic input dimension of --model");
  cmd->add_option("--budget", o.budget, "Seconds to spend in all (Ctrl-C stops early and keeps what was found)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--out", o.out, "Database file to update (default: the user database in the cache folder)");
  cmd->add_option("--seed", o.seed, "Random seed of the search");
  cmd->add_flag("--show", o.show, "Print what the databases hold for the device and exit");
  cmd->callback([] {
    if (!ops.empty()) {
      o.ops.clear();
      size_t p = 0;
      while (p <= ops.size()) {
        size_t q = ops.find(',', p);
        if (q == std::string::npos) q = ops.size();
        std::string op = ops.substr(p, q - p);
        if (op != "gemm" && op != "conv" && op != "attention" && op != "rnn" && op != "clblast")
          fail("--op: unknown family '{}' (gemm, conv, attention, rnn, clblast)", op);
        o.ops.push_back(op);
        p = q + 1;
      }
    }
    if (o.out.empty()) o.out = Registry::user_path();
    std::shared_ptr<Context> ctx;
    Problems probs;
    if (!o.model.empty()) {
      ModelOptions mo;
      mo.model = o.model, mo.device = o.device, mo.dims = o.dims, mo.random = true;
      ProblemRecorder rec;
      set_recorder(&rec);
      LoadedModel lm;
      try {
        lm = load_for_cli(mo, false);
      } catch (...) {
        set_recorder(nullptr);
        throw;
      }
      set_recorder(nullptr);
      ctx = lm.ctx;
      probs.gemm = rec.gemm, probs.conv = rec.conv, probs.attention = rec.attention, probs.rnn = rec.rnn;
      fmt::print(stderr, "model {}: {} GEMM, {} conv, {} attention, {} RNN problems\n", o.model, rec.gemm.size(),
                 rec.conv.size(), rec.attention.size(), rec.rnn.size());
    } else {
      ctx = Context::create(o.device);
      probs = o.shapes.empty() ? default_problems() : parse_shapes(o.shapes);
    }
    if (o.show) return show(*ctx);
    auto want = [&](const char* op) { return std::find(o.ops.begin(), o.ops.end(), op) != o.ops.end(); };
    // Distinct problems only (a model repeats shapes).
    std::vector<GemmConfig> gemms;
    std::set<std::string> seen;
    for (auto& g : probs.gemm)
      if (seen.insert(gemm_problem(g)).second) gemms.push_back(g);
    std::vector<ConvConfig> convs;
    for (auto& c : probs.conv)
      if (seen.insert(conv_problem(ConvOp::geometry(c))).second) convs.push_back(c);
    std::vector<AttentionConfig> attns;
    for (auto& a : probs.attention)
      if (seen.insert(attention_problem(a)).second) attns.push_back(a);
    std::vector<RnnConfig> rnns;
    for (auto& r : probs.rnn)
      if (seen.insert(rnn_problem(r)).second) rnns.push_back(r);
    // The environment overrides would force every RNN candidate to the same kernel.
    if (want("rnn") && !rnns.empty())
      for (const char* e : {"CLDL_RNN_WEIGHT_LAYOUT", "CLDL_RNN_MR"})
        if (std::getenv(e)) fail("tune rnn: {} is set and would override every candidate; unset it to tune", e);
    size_t tasks = (want("gemm") ? gemms.size() : 0) + (want("conv") ? convs.size() : 0) +
                   (want("attention") ? attns.size() : 0) + (want("rnn") ? rnns.size() : 0) +
                   (want("clblast") ? kClblastWeight : 0);
    g_stop = false;
    auto old = std::signal(SIGINT, tune_on_sigint);
    const DeviceInfo& info = ctx->device().info;
    fmt::print(stderr, "tuning {} ({}) for {:.0f} s: {} problems -> {}\n", info.name, info.driver_version, o.budget,
               tasks, o.out);
    Tuner t(*ctx, o);
    t.set_tasks(tasks);
    const auto t0 = clock_t_::now();
    if (want("gemm"))
      for (auto& g : gemms)
        if (!t.stopped()) t.gemm(g);
    if (want("conv"))
      for (auto& c : convs)
        if (!t.stopped()) t.conv(c);
    if (want("attention"))
      for (auto& a : attns)
        if (!t.stopped()) t.attention(a);
    if (want("rnn"))
      for (auto& r : rnns)
        if (!t.stopped()) t.rnn(r);
    if (want("clblast") && !t.stopped()) t.clblast(probs.clblast_m, probs.clblast_n, probs.clblast_k);
    std::signal(SIGINT, old);
    fmt::print(stderr, "{}: {} entries written to {} in {} ({})\n", g_stop ? "interrupted" : "done", t.tuned(), o.out,
               hms(since(t0)), t.stopped() && !g_stop ? "budget spent" : "all problems visited");
    if (g_stop) set_exit_code(130);
  });
}

}  // namespace cldl::cli
