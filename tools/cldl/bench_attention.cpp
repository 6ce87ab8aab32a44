// `cldl bench attention`: scaled-dot-product attention, fused vs plain path, and ONNX Runtime's CPU
// Attention (tools/bench/attention_onnxruntime.py --serve) as the peer when python3 + onnxruntime are
// present, with as many intra-op threads as the device has compute units (--set ort_threads=N overrides,
// ort_script=PATH picks another script), with its default settings. One peer process serves every
// selected case, started before the first one; each case is timed in rounds: plain once, fused once, then
// the peer once (the warm-up rounds too), so a drift in the machine's speed hits all three alike; each
// timed cldl run follows 60 ms of untimed ones (warm_for), the peer's one untimed run. GFLOP/s
// counts 4*B*H*S*S*D (QK and PV), half of that for causal. A summary table ends the run with the
// speed-ups from the minimum times (fused over ORT, fused over plain) and the figure to read: the median
// (min-max) over rounds of ORT ms / fused ms in the same round (also in the peer row's note and, with
// --json, its round_ratio_* fields).
// Settings (--set): block_m, block_n, vec, use_local (tile kernel), blocked=-1/0/1 (the blocked kernel:
// auto, never, always), rg, kb, cb, bkv (the blocked kernel's row groups and register blocks), kv_splits (the tile kernel over
// that many key chunks, 1 none), plain=0 (skip the plain path).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "layers/attention.hpp"
#include "runtime/log.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {
namespace {

struct AttnCase {
  int64_t B, S, H, D;
  bool causal;
  int64_t Sq = 0;  // > 0: a decode step, Sq new queries over S cached keys (no ONNX Runtime peer)
  int64_t q_len() const { return Sq > 0 ? Sq : S; }
  std::string name() const {
    if (Sq > 0) return fmt::format("decode B={} Sq={} Skv={} H={} D={}", B, Sq, S, H, D);
    return fmt::format("B={} S={} H={} D={}{}", B, S, H, D, causal ? " causal" : "");
  }
};

double process_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (double(u.ru_utime.tv_sec) + double(u.ru_stime.tv_sec)) * 1e3 +
         (double(u.ru_utime.tv_usec) + double(u.ru_stime.tv_usec)) * 1e-3;
}

std::vector<float> ramp(size_t n, float k) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float((i * 2654435761u) % 1000) * k - 0.5f;
  return v;
}

std::string peer_case(const AttnCase& c) { return fmt::format("{}x{}x{}x{}x{}", c.B, c.S, c.H, c.D, int(c.causal)); }

// The peer in serve mode for the cases it can time (not the decode steps); nothing when there are none.
std::unique_ptr<ServePeer> start_onnxruntime(const Options& o, const std::vector<AttnCase>& cases, int threads) {
  std::string script = peer_script("attention_onnxruntime.py");
  for (const auto& a : o.args)
    if (a.rfind("ort_script=", 0) == 0) script = a.substr(11);
    else if (a.rfind("ort_threads=", 0) == 0) threads = std::stoi(a.substr(12));
  std::vector<std::string> args{"--threads", std::to_string(threads), "--warmup", std::to_string(o.warmup)};
  for (const auto& c : cases)
    if (c.Sq == 0) args.push_back(peer_case(c));
  if (args.size() == 4) return nullptr;
  return std::make_unique<ServePeer>(script, args);
}

void bench_attention(Context& ctx, const Options& o, Reporter& rep) {
  std::vector<AttnCase> cases = {{1, 512, 8, 64, false},
                                 {4, 256, 12, 64, false},
                                 {1, 1024, 16, 64, true},
                                 {1, 1024, 16, 64, true, 1}};
  std::vector<AttnCase> chosen;
  for (const auto& c : cases)
    if (o.selected(c.name())) chosen.push_back(c);
  // The peer starts now and builds its sessions while the first case's kernels are built.
  const int ort_threads = int(std::max<uint32_t>(ctx.device().info.compute_units, 1));
  std::unique_ptr<ServePeer> peer = o.compare ? start_onnxruntime(o, chosen, ort_threads) : nullptr;
  bool peer_rows = false;
  const bool skip_plain = std::find(o.args.begin(), o.args.end(), "plain=0") != o.args.end();
  for (const auto& c : chosen) {
    AttentionConfig cfg;
    for (const auto& a : o.args) {
      auto eq = a.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = a.substr(0, eq);
      if (key == "block_m") cfg.block_m = std::stoi(a.substr(eq + 1));
      if (key == "block_n") cfg.block_n = std::stoi(a.substr(eq + 1));
      if (key == "vec") cfg.vec = std::stoi(a.substr(eq + 1));
      if (key == "use_local") cfg.use_local = std::stoi(a.substr(eq + 1));
      if (key == "blocked") cfg.blocked = std::stoi(a.substr(eq + 1));
      if (key == "kb") cfg.kb = std::stoi(a.substr(eq + 1));
      if (key == "cb") cfg.cb = std::stoi(a.substr(eq + 1));
      if (key == "bkv") cfg.bkv = std::stoi(a.substr(eq + 1));
      if (key == "rg") cfg.rg = std::stoi(a.substr(eq + 1));
      if (key == "kv_splits") cfg.kv_splits = std::stoi(a.substr(eq + 1));
    }
    cfg.batch = c.B, cfg.q_heads = c.H, cfg.q_len = c.q_len(), cfg.kv_len = c.S, cfg.head_size = c.D;
    cfg.causal = c.causal, cfg.causal_offset = c.S - c.q_len();
    const size_t n = size_t(c.B * c.H * c.S * c.D), nq = size_t(c.B * c.H * c.q_len() * c.D);
    Tensor q = ctx.upload(HostTensor::from<float>({c.B, c.H, c.q_len(), c.D}, ramp(nq, 1e-3f)));
    Tensor k = ctx.upload(HostTensor::from<float>({c.B, c.H, c.S, c.D}, ramp(n, 7e-4f)));
    Tensor v = ctx.upload(HostTensor::from<float>({c.B, c.H, c.S, c.D}, ramp(n, 9e-4f)));
    Tensor y = ctx.alloc({c.B, c.H, c.q_len(), c.D}, DType::f32);
    // The variants of this case (fused first), each with its op, workspace and per-round times.
    struct Variant {
      AttentionAlgo algo;
      std::unique_ptr<Attention> op;
      std::optional<Tensor> ws;
      std::vector<double> ms, cpu;
    };
    std::vector<Variant> variants;
    for (AttentionAlgo algo : {AttentionAlgo::fused, AttentionAlgo::plain}) {
      if (algo == AttentionAlgo::plain && skip_plain) continue;
      cfg.algo = algo;
      Variant var{algo, Attention::create(ctx, 0, cfg), std::nullopt, {}, {}};
      if (var.op->workspace_bytes()) var.ws = ctx.alloc({int64_t(var.op->workspace_bytes() / 4)}, DType::f32);
      variants.push_back(std::move(var));
    }
    auto ec = ctx.exec();
    Tensor in[3] = {q, k, v};
    Tensor out[1] = {y};
    auto run_once = [&](Variant& var) {
      var.op->enqueue(in, out, var.ws ? &*var.ws : nullptr, ec);
      ec.queue.finish();
    };
    // Rounds: every variant once, then the peer once (waits here for the peer's ready line).
    const std::string peer_id = peer_case(c);
    const bool with_peer = c.Sq == 0 && peer && peer->has(peer_id);
    for (int w = 0; w < o.warmup; ++w) {
      for (auto& var : variants) run_once(var);
      if (with_peer) peer->run(peer_id);
    }
    PeerRounds peer_rounds;
    for (int round = 0; round < std::max(o.runs, 1); ++round) {
      // Plain first: the fused turn and the peer's stand next to each other (with the plain turn between
      // them the fused runs were slower, 3.0 vs 2.45 ms min, on this VM).
      for (auto it = variants.rbegin(); it != variants.rend(); ++it) {
        Variant& var = *it;
        // Untimed runs right before the timed one (the peer's turn does one): with the peer, for 60 ms,
        // past its spinning threads (warm_for).
        if (with_peer) warm_for([&] { run_once(var); });
        else run_once(var);
        // Process CPU time per run as well (all PoCL threads): less disturbed by other load than wall time.
        const double cpu0 = process_cpu_ms();
        const auto t0 = std::chrono::steady_clock::now();
        run_once(var);
        var.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        var.cpu.push_back(process_cpu_ms() - cpu0);
      }
      if (with_peer) peer_rounds.add(peer->run(peer_id));
    }
    std::optional<Result> fused_result;
    for (auto& var : variants) {
      Result r;
      r.family = "attention", r.name = c.name();
      r.impl = var.algo == AttentionAlgo::fused ? "cldl:fused" : "cldl:plain";
      r.work = cfg.flops();
      r.note = var.op->algorithm();
      r.wall = summarize(var.ms);
      double cpu_sum = 0;
      for (double x : var.cpu) cpu_sum += x;
      r.note += fmt::format(" cpu {:.1f} ms/run", cpu_sum / double(std::max<size_t>(var.cpu.size(), 1)));
      if (fused_result) r.note += fmt::format("; fused is {:.2f}x faster", Reporter::speedup(*fused_result, r));
      else fused_result = r;
      rep.add(r);
    }
    // variants.front() is the fused path (plain=0 skips only the plain one).
    std::optional<Result> r = peer_rounds.row("attention", c.name(), cfg.flops(), with_peer ? peer->note(peer_id) : "",
                                              variants.front().ms, "ORT/fused");
    if (!r) continue;
    r->note += fmt::format("; fused is {:.2f}x faster than this; {}", Reporter::speedup(*fused_result, *r),
                           r->round_ratio->describe());
    rep.add(*r);
    peer_rows = true;
  }
  if (o.compare && !peer_rows && std::any_of(chosen.begin(), chosen.end(), [](const AttnCase& c) { return c.Sq == 0; }))
    log::info("bench attention: ONNX Runtime peer not available (pip install onnxruntime onnx)");
  if (o.json || chosen.empty()) return;
  // Ratios from the minimum times of this run (the least disturbed by other load on the machine), and
  // the per-round ratio of ORT over fused: the figure to read.
  auto find = [&](const std::string& name, const char* impl) -> const Result* {
    for (const auto& r : rep.results())
      if (r.name == name && r.impl == impl) return &r;
    return nullptr;
  };
  auto min_ms = [&](const std::string& name, const char* impl) {
    const Result* r = find(name, impl);
    return r ? r->wall.min_ms : 0.0;
  };
  auto ratio = [](double num, double den) { return num > 0 && den > 0 ? fmt::format("{:.2f}x", num / den) : "-"; };
  fmt::print("\n{:<32} {:>10} {:>10} {:>10} {:>12} {:>12}   {}\n", "attention (min ms)", "fused", "plain", "onnxrt",
             "ORT/fused", "plain/fused", "ORT/fused per round: median (min-max, rounds)");
  for (const auto& c : chosen) {
    const double f = min_ms(c.name(), "cldl:fused"), p = min_ms(c.name(), "cldl:plain"),
                 x = min_ms(c.name(), "onnxruntime");
    auto ms = [](double v) { return v > 0 ? fmt::format("{:.3f}", v) : "-"; };
    const Result* peer_row = find(c.name(), "onnxruntime");
    std::string per_round = "-";
    if (peer_row && peer_row->round_ratio && peer_row->round_ratio->rounds > 0) {
      const RoundRatio& rr = *peer_row->round_ratio;
      per_round = fmt::format("{:.2f}x ({:.2f}x-{:.2f}x, {})", rr.median, rr.min, rr.max, rr.rounds);
    }
    fmt::print("{:<32} {:>10} {:>10} {:>10} {:>12} {:>12}   {}\n", c.name(), ms(f), ms(p), ms(x), ratio(x, f),
               ratio(p, f), per_round);
  }
  std::fflush(stdout);
}

const Registration kAttention("attention", "Scaled-dot-product attention: fused vs plain (vs ONNX Runtime)",
                              bench_attention);

}  // namespace
}  // namespace cldl::bench
