// `cldl bench attention`: scaled-dot-product attention, fused vs plain path, and ONNX Runtime's CPU
// Attention (tools/bench/attention_onnxruntime.py) as the peer when python3 + onnxruntime are present,
// in the same run with as many intra-op threads as the device has compute units (--set ort_threads=N
// overrides). GFLOP/s counts 4*B*H*S*S*D (QK and PV), half of that for causal. A summary table ends
// the run with the speed-ups from the minimum times: fused over ORT and fused over plain.
// Settings (--set): block_m, block_n, vec, use_local (tile kernel), blocked=-1/0/1 (the blocked kernel:
// auto, never, always), kb, cb, bkv (the blocked kernel's register blocks), plain=0 (skip the plain path).
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <map>
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

// The peer: runs the python script once for all cases, returns its JSON lines keyed by case name.
std::map<std::string, nlohmann::json> run_onnxruntime(const Options& o, const std::vector<AttnCase>& cases,
                                                      int threads) {
  std::map<std::string, nlohmann::json> out;
  std::string script = peer_script("attention_onnxruntime.py");
  namespace fs = std::filesystem;
  for (const auto& a : o.args)
    if (a.rfind("ort_script=", 0) == 0) script = a.substr(11);
    else if (a.rfind("ort_threads=", 0) == 0) threads = std::stoi(a.substr(12));
  if (script.empty() || !fs::exists(script)) return out;
  std::string cmd = fmt::format("python3 {} --runs {} --warmup {} --threads {}", script, o.runs, o.warmup, threads);
  for (const auto& c : cases) cmd += fmt::format(" {}x{}x{}x{}x{}", c.B, c.S, c.H, c.D, int(c.causal));
  for (auto& j : peer_json_lines(cmd, "case")) out[j["case"].get<std::string>()] = j;
  return out;
}

void bench_attention(Context& ctx, const Options& o, Reporter& rep) {
  std::vector<AttnCase> cases = {{1, 512, 8, 64, false},
                                 {4, 256, 12, 64, false},
                                 {1, 1024, 16, 64, true},
                                 {1, 1024, 16, 64, true, 1}};
  std::vector<AttnCase> chosen;
  for (const auto& c : cases)
    if (o.selected(c.name())) chosen.push_back(c);
  // The peer runs right after each case's own timings, so both see about the same load on the machine.
  std::map<std::string, nlohmann::json> peer;
  const int ort_threads = int(std::max<uint32_t>(ctx.device().info.compute_units, 1));
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
    }
    cfg.batch = c.B, cfg.q_heads = c.H, cfg.q_len = c.q_len(), cfg.kv_len = c.S, cfg.head_size = c.D;
    cfg.causal = c.causal, cfg.causal_offset = c.S - c.q_len();
    const size_t n = size_t(c.B * c.H * c.S * c.D), nq = size_t(c.B * c.H * c.q_len() * c.D);
    Tensor q = ctx.upload(HostTensor::from<float>({c.B, c.H, c.q_len(), c.D}, ramp(nq, 1e-3f)));
    Tensor k = ctx.upload(HostTensor::from<float>({c.B, c.H, c.S, c.D}, ramp(n, 7e-4f)));
    Tensor v = ctx.upload(HostTensor::from<float>({c.B, c.H, c.S, c.D}, ramp(n, 9e-4f)));
    Tensor y = ctx.alloc({c.B, c.H, c.q_len(), c.D}, DType::f32);
    std::optional<Result> fused_result;
    const bool skip_plain = std::find(o.args.begin(), o.args.end(), "plain=0") != o.args.end();
    for (AttentionAlgo algo : {AttentionAlgo::fused, AttentionAlgo::plain}) {
      if (algo == AttentionAlgo::plain && skip_plain) continue;
      cfg.algo = algo;
      auto op = Attention::create(ctx, 0, cfg);
      std::optional<Tensor> ws;
      if (op->workspace_bytes()) ws = ctx.alloc({int64_t(op->workspace_bytes() / 4)}, DType::f32);
      auto ec = ctx.exec();
      Tensor in[3] = {q, k, v};
      Tensor out[1] = {y};
      Result r;
      r.family = "attention", r.name = c.name();
      r.impl = algo == AttentionAlgo::fused ? "cldl:fused" : "cldl:plain";
      r.work = cfg.flops();
      r.note = op->algorithm();
      // Process CPU time per run as well (all PoCL threads): less disturbed by other load than wall time.
      int calls = 0;
      double cpu0 = 0;
      r.wall = time_runs(
          [&] {
            if (calls++ == o.warmup) cpu0 = process_cpu_ms();
            op->enqueue(in, out, ws ? &*ws : nullptr, ec);
            ec.queue.finish();
          },
          o.runs, o.warmup);
      r.note += fmt::format(" cpu {:.1f} ms/run", (process_cpu_ms() - cpu0) / std::max(o.runs, 1));
      if (fused_result) r.note += fmt::format("; fused is {:.2f}x faster", Reporter::speedup(*fused_result, r));
      else fused_result = r;
      rep.add(r);
    }
    if (o.compare && c.Sq == 0) peer.merge(run_onnxruntime(o, {c}, ort_threads));
  }
  if (o.compare && peer.empty() && std::any_of(chosen.begin(), chosen.end(), [](const AttnCase& c) { return c.Sq == 0; }))
    log::info("bench attention: ONNX Runtime peer not available (pip install onnxruntime onnx)");
  for (const auto& c : chosen) {
    auto it = peer.find(c.name());
    if (it == peer.end()) continue;
    const auto& j = it->second;
    Result r;
    r.family = "attention", r.name = c.name(), r.impl = "onnxruntime";
    r.wall.min_ms = j.value("min_ms", 0.0), r.wall.median_ms = j.value("median_ms", 0.0);
    r.wall.max_ms = j.value("max_ms", 0.0), r.wall.runs = j.value("runs", 0);
    r.work = double(c.B * c.H) * double(c.S) * double(c.S) * double(c.D) * (c.causal ? 2.0 : 4.0);
    r.note = j.value("note", "");
    for (const auto& prev : rep.results())
      if (prev.name == r.name && prev.impl == "cldl:fused")
        r.note += fmt::format("; fused is {:.2f}x faster than this", Reporter::speedup(prev, r));
    rep.add(r);
  }
  if (o.json || chosen.empty()) return;
  // Ratios from the minimum times of this run (the least disturbed by other load on the machine).
  auto min_ms = [&](const std::string& name, const char* impl) {
    for (const auto& r : rep.results())
      if (r.name == name && r.impl == impl) return r.wall.min_ms;
    return 0.0;
  };
  auto ratio = [](double num, double den) { return num > 0 && den > 0 ? fmt::format("{:.2f}x", num / den) : "-"; };
  fmt::print("\n{:<32} {:>10} {:>10} {:>10} {:>12} {:>12}\n", "attention (min ms)", "fused", "plain", "onnxrt",
             "ORT/fused", "plain/fused");
  for (const auto& c : chosen) {
    const double f = min_ms(c.name(), "cldl:fused"), p = min_ms(c.name(), "cldl:plain"),
                 x = min_ms(c.name(), "onnxruntime");
    auto ms = [](double v) { return v > 0 ? fmt::format("{:.3f}", v) : "-"; };
    fmt::print("{:<32} {:>10} {:>10} {:>10} {:>12} {:>12}\n", c.name(), ms(f), ms(p), ms(x), ratio(x, f), ratio(p, f));
  }
  std::fflush(stdout);
}

const Registration kAttention("attention", "Scaled-dot-product attention: fused vs plain (vs ONNX Runtime)",
                              bench_attention);

}  // namespace
}  // namespace cldl::bench
