// `cldl bench rnn`: LSTM inference with each strategy (sequential, time-step, layer and data parallel,
// wavefront) on the configurations of the RNN issue; time, GFLOP/s, speed-up over the sequential path
// and the process CPU time per run (steadier than the wall time on a shared machine).
// Settings (--set): quick=1 (T=10, small batch: a smoke run), case=T,B,I,H,L (one custom case),
// strategies=seq,time,layer,data,wave,auto (default: all but auto; wave:K = wavefront with lag K), wave_mr=1|2|4,
// wave_wg=<row groups per work-group>, wave_lag=<steps between layers; 1 = projection fused>, wave_rg=<row groups per
// work-item>, wave_kb=<k-block> (wavefront knobs), rg=, kb=, prg= (the layers' tile kernels: row groups per work-item
// of a step, k-block, row groups per work-item of the projection; RnnKernelParams), profile=1 (after the timed runs,
// one profiled run per strategy: device time per kernel name, their sum and the wall time, so launch gaps show as wall
// - sum; to stderr), chunk=<steps per event for layer parallel>, shards=<data-parallel shards>. Two devices: --device
// cpu:all with POCL_DEVICES="pthread pthread". The peer: ONNX Runtime (CPU) on the same configurations through an ONNX
// LSTM model (tools/bench/rnn_onnxruntime.py --serve, one `python3` process for all selected cases, started before the
// first case), with ort_threads=<N> intra-op threads (default 2: the cores PoCL uses here), otherwise its defaults. It
// is timed interleaved (each timed run of ours after 60 ms of untimed ones, warm_for; the peer's after one untimed
// run): each round runs every strategy once and then the peer once (the warm-up rounds too), so a drift in the
// machine's speed hits both alike. Its row reports the min / median / max of those runs, and its note and the summary
// after the last case give the median of the per-round ratios ORT ms / best strategy's ms (best by median) with their
// min and max: the figure to read. --no-compare skips it, ort_script=PATH picks another script; without python3 /
// onnxruntime the peer rows are left out (a warning under CLDL_LOG=warn).
// --tuning compare runs every strategy with the step kernels' heuristic knobs and with the tuning
// database's "rnn_step" entries ("+db"), round robin in the same loop, so the ratio is measured alike.
// kernel_dir_b=DIR does the same for kernel sources: every strategy also runs on a second stack whose
// programs are built from DIR's .cl files (CLDL_KERNEL_DIR while it is created and first run; "@B"), with
// the per-round ratio B/A in its note: how to measure a kernel change on a machine whose speed drifts
// (e.g. DIR holding `git show REV:kernels/rnn.cl` and the other kernel files of REV). launch=1|2 sets the
// layers' RnnKernelParams::launch (one launch per step, or all steps in one: batch shards), launch_b=1|2 that
// of the second stack (alone or with kernel_dir_b): the two launch forms measured alike.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include <sys/resource.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "layers/rnn.hpp"
#include "layers/tuning_ops.hpp"
#include "runtime/log.hpp"
#include "runtime/profiler.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {
namespace {

// CLDL_KERNEL_DIR = dir for a scope (kernel_source reads it at each program build); the previous value
// (or its absence) comes back at the end.
struct KernelDirScope {
  std::optional<std::string> saved;
  explicit KernelDirScope(const std::string& dir) {
    if (const char* old = std::getenv("CLDL_KERNEL_DIR")) saved = old;
    setenv("CLDL_KERNEL_DIR", dir.c_str(), 1);
  }
  ~KernelDirScope() { saved ? setenv("CLDL_KERNEL_DIR", saved->c_str(), 1) : unsetenv("CLDL_KERNEL_DIR"); }
  KernelDirScope(const KernelDirScope&) = delete;
  KernelDirScope& operator=(const KernelDirScope&) = delete;
};

std::map<std::string, std::string> settings(const Options& o) {
  std::map<std::string, std::string> m;
  for (const auto& a : o.args) {
    auto eq = a.find('=');
    if (eq == std::string::npos) fail("bench rnn: --set expects key=value, got '{}'", a);
    m[a.substr(0, eq)] = a.substr(eq + 1);
  }
  static const std::vector<std::string> known{"quick",       "strategies",   "chunk",   "shards",   "case",
                                              "ort_threads", "ort_script",   "profile", "rg",       "kb",
                                              "prg",         "wave_mr",      "wave_wg", "wave_lag", "wave_rg",
                                              "wave_kb",     "kernel_dir_b", "launch",  "launch_b"};
  for (const auto& [k, v] : m)
    if (std::find(known.begin(), known.end(), k) == known.end())
      fail("bench rnn: unknown setting '{}' ({})", k, fmt::join(known, ", "));
  return m;
}

struct BenchCase {
  int64_t T, B, I, H;
  int layers;
};

// The peer's name for a case (rnn_onnxruntime.py --case).
std::string peer_case(const BenchCase& c) { return fmt::format("{},{},{},{},{}", c.T, c.B, c.I, c.H, c.layers); }
std::string case_name(const BenchCase& c) {
  return fmt::format("lstm T{} B{} I{} H{} L{}", c.T, c.B, c.I, c.H, c.layers);
}

// ONNX Runtime in serve mode for all `cases`, or nothing when the script is missing. python3 or
// onnxruntime missing shows later, as a peer that never becomes ready.
std::unique_ptr<ServePeer> start_onnxruntime(const Options& o, std::map<std::string, std::string>& set,
                                           const std::vector<BenchCase>& cases) {
  std::string script = set.count("ort_script") ? set["ort_script"] : peer_script("rnn_onnxruntime.py");
  namespace fs = std::filesystem;
  if (script.empty() || !fs::exists(script)) {
    log::warn("bench rnn: ONNX Runtime peer script not found (--set ort_script=PATH)");
    return nullptr;
  }
  std::vector<std::string> args{"--threads", set.count("ort_threads") ? set["ort_threads"] : "2", "--warmup",
                                std::to_string(o.warmup)};
  for (const auto& c : cases) args.insert(args.end(), {"--case", peer_case(c)});
  return std::make_unique<ServePeer>(script, args);
}

// CPU time of this process (all threads), in ms.
double process_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}

// One run of one strategy on profiling queues: device time per kernel name, their sum, and the wall.
void profile_once(Context& ctx, RnnStack& stack, const RnnStackIO& io, const RnnRunOptions& o, const std::string& name) {
  const RnnStrategy s = o.strategy;
  Profiler prof;
  ExecutionContext ec(ctx.queue(0, 0, true));
  ec.profiler = &prof;
  cl::Event done;
  ec.signal = &done;
  stack.enqueue(io, o, ec);
  done.wait();
  std::map<std::string, std::pair<double, int>> by;  // name -> (ms, count)
  uint64_t t0 = ~uint64_t(0), t1 = 0;
  double sum = 0;
  for (const auto& r : prof.records()) {
    if (r.start_ns == 0) continue;
    auto& [ms, n] = by[r.name];
    ms += r.duration_ms();
    ++n;
    sum += r.duration_ms();
    t0 = std::min(t0, r.start_ns);
    t1 = std::max(t1, r.end_ns);
  }
  std::string parts;
  for (const auto& [k, v] : by) parts += fmt::format(" {} {:.2f} ms ({}x);", k, v.first, v.second);
  fmt::print(stderr, "profile {} {}: first start to last end {:.2f} ms, kernels {:.2f} ms:{}\n", name, to_string(s),
             t1 > t0 ? (t1 - t0) * 1e-6 : 0.0, sum, parts);
}

void run_rnn(Context& ctx, const Options& opts, Reporter& rep) {
  auto set = settings(opts);
  const bool quick = set.count("quick") && set["quick"] != "0";
  std::vector<RnnStrategy> strategies{RnnStrategy::sequential, RnnStrategy::time_parallel, RnnStrategy::layer_parallel,
                                      RnnStrategy::data_parallel, RnnStrategy::wavefront};
  std::vector<int> lags(strategies.size(), 0);  // wave:K in the list: the wavefront with lag K
  if (set.count("strategies")) {
    strategies.clear();
    lags.clear();
    std::stringstream ss(set["strategies"]);
    for (std::string s; std::getline(ss, s, ',');) {
      const auto colon = s.find(':');
      strategies.push_back(parse_rnn_strategy(s.substr(0, colon)));
      lags.push_back(colon == std::string::npos ? 0 : std::stoi(s.substr(colon + 1)));
    }
  }
  RnnRunOptions base;
  if (set.count("chunk")) base.chunk = std::stoll(set["chunk"]);
  if (set.count("shards")) base.shards = std::stoi(set["shards"]);
  if (set.count("wave_mr")) base.wave.mr = std::stoi(set["wave_mr"]);
  if (set.count("wave_wg")) base.wave.wg_m = std::stoi(set["wave_wg"]);
  if (set.count("wave_lag")) base.wave.lag = std::stoi(set["wave_lag"]);
  if (set.count("wave_rg")) base.wave.rg = std::stoi(set["wave_rg"]);
  if (set.count("wave_kb")) base.wave.kb = std::stoi(set["wave_kb"]);
  // The layers' tile-kernel knobs (RnnKernelParams rg, kb, prg; 0 = the heuristic).
  RnnKernelParams kp;
  if (set.count("rg")) kp.rg = std::stoi(set["rg"]);
  if (set.count("kb")) kp.kb = std::stoi(set["kb"]);
  if (set.count("prg")) kp.prg = std::stoi(set["prg"]);
  if (set.count("launch")) kp.launch = std::stoi(set["launch"]);
  std::vector<BenchCase> cases{{100, 32, 512, 512, 1}, {100, 32, 512, 512, 2}, {100, 1, 256, 256, 4}, {200, 64, 256, 256, 2}};
  if (quick) cases = {{10, 4, 64, 64, 1}, {10, 4, 64, 64, 2}, {10, 1, 32, 32, 4}, {12, 8, 32, 32, 2}};
  if (set.count("case")) {
    // case=T,B,I,H,L: one custom configuration.
    BenchCase c{};
    if (std::sscanf(set["case"].c_str(), "%ld,%ld,%ld,%ld,%d", &c.T, &c.B, &c.I, &c.H, &c.layers) != 5)
      fail("bench rnn: case expects T,B,I,H,L, got '{}'", set["case"]);
    cases = {c};
  }
  std::vector<BenchCase> chosen;
  for (const auto& bc : cases)
    if (opts.selected(case_name(bc))) chosen.push_back(bc);
  // The peer starts now; it builds and warms its sessions while the first case's stacks are built.
  std::unique_ptr<ServePeer> peer;
  if (opts.compare && !chosen.empty()) peer = start_onnxruntime(opts, set, chosen);
  struct Summary {
    std::string name, best_impl;
    double best_ms = 0, peer_ms = 0;
    RoundRatio ratio;
  };
  std::vector<Summary> summary;
  for (const auto& bc : chosen) {
    const std::string name = case_name(bc);
    std::vector<RnnConfig> cfgs;
    std::vector<RnnWeights> ws;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    auto rnd = [&](Shape s) {
      HostTensor t(DType::f32, s);
      for (auto& v : t.span<float>()) v = u(rng);
      return t;
    };
    for (int l = 0; l < bc.layers; ++l) {
      RnnConfig c;
      c.cell = RnnCell::lstm;
      c.seq_length = bc.T;
      c.batch = bc.B;
      c.input_size = l == 0 ? bc.I : bc.H;
      c.hidden_size = bc.H;
      c.kernel = kp;
      cfgs.push_back(c);
      ws.push_back(RnnWeights{rnd({1, 4 * bc.H, c.input_size}), rnd({1, 4 * bc.H, bc.H}), rnd({1, 8 * bc.H}), std::nullopt});
    }
    // --tuning compare: one stack with the heuristic knobs and one with the database's (the tuning
    // switch is also held around each call: a row-layout projection creates its Gemm at the first call).
    const bool compare_db = opts.tuning == "compare";
    const std::string kernel_dir_b = set.count("kernel_dir_b") ? set["kernel_dir_b"] : "";
    const int launch_b = set.count("launch_b") ? std::stoi(set["launch_b"]) : -1;
    // The second stack ("@B"): other kernel sources and / or another launch knob.
    const bool stack_b = !kernel_dir_b.empty() || launch_b >= 0;
    const std::string b_what = !kernel_dir_b.empty() && launch_b >= 0
                                   ? fmt::format("kernels from {}, launch={}", kernel_dir_b, launch_b)
                               : launch_b >= 0 ? fmt::format("launch={}", launch_b)
                                               : "kernels from " + kernel_dir_b;
    if (compare_db && stack_b) fail("bench rnn: --tuning compare and kernel_dir_b= / launch_b= do not combine");
    std::vector<bool> dbs = compare_db ? std::vector<bool>{false, true} : std::vector<bool>{opts.tuning != "default"};
    if (stack_b) dbs.push_back(dbs.front());
    // Stack si's kernel sources: CLDL_KERNEL_DIR for the second stack under kernel_dir_b (programs are
    // built at create and, for the wavefront, at the first call).
    auto with_kernels = [&](size_t si, const std::function<void()>& f) {
      std::optional<KernelDirScope> scope;
      if (!kernel_dir_b.empty() && si == 1) scope.emplace(kernel_dir_b);
      f();
    };
    std::vector<std::unique_ptr<RnnStack>> stacks;
    for (size_t si = 0; si < dbs.size(); ++si) {
      tuning::ScopedEnabled scoped(dbs[si]);
      std::vector<RnnConfig> cs = cfgs;
      if (si == 1 && launch_b >= 0)
        for (auto& c : cs) c.kernel.launch = launch_b;
      with_kernels(si, [&] { stacks.push_back(RnnStack::create(ctx, 0, cs, ws)); });
    }
    auto& stack = stacks.front();
    RnnStackIO io;
    io.x = ctx.upload(rnd({bc.T, bc.B, bc.I}));
    io.y = ctx.alloc({bc.T, 1, bc.B, bc.H}, DType::f32);
    // Round robin: the warm-up calls of every strategy first (PoCL adapts its work-group chunking to
    // each kernel's measured time), then run i of every strategy before run i + 1 of any, so a change
    // in machine load hits all strategies alike and their ratios stay meaningful.
    std::vector<std::function<void()>> fns;
    struct Variant {
      size_t strategy;  // index into strategies / lags
      size_t stack;     // index into stacks (1: the database's knobs under --tuning compare)
    };
    std::vector<Variant> variants;
    std::vector<RnnRunOptions> runopts;
    for (size_t si = 0; si < stacks.size(); ++si)
      for (size_t i = 0; i < strategies.size(); ++i) {
        RnnRunOptions o = base;
        o.strategy = strategies[i];
        if (lags[i]) o.wave.lag = lags[i];
        std::function<void()> fn = [st = stacks[si].get(), db = bool(dbs[si]), &io, &ctx, o] {
          tuning::ScopedEnabled scoped(db);
          ExecutionContext ec(ctx.queue());
          cl::Event done;
          ec.signal = &done;
          st->enqueue(io, o, ec);
          done.wait();
        };
        // A strategy this device refuses (the wavefront without the tiles weight layout, on GPUs) is
        // left out with its reason; the others still run.
        try {
          with_kernels(si, fn);
        } catch (const Error& e) {
          fmt::print(stderr, "bench rnn: {}: strategy {} left out: {}\n", name, to_string(o.strategy), e.what());
          continue;
        }
        if (si == 0) runopts.push_back(o);
        variants.push_back({i, si});
        fns.push_back(std::move(fn));
      }
    // The peer, when it is up, takes its turn after the strategies in every round (warm-up rounds too):
    // its times and ours come from the same moments of the machine (waits here for its ready line).
    const std::string peer_id = peer_case(bc);
    const bool with_peer = peer && peer->has(peer_id);
    if (opts.compare && !with_peer)
      log::warn("bench rnn: ONNX Runtime peer gave no result (python3 with onnxruntime and onnx needed)");
    std::vector<std::string> schedules(fns.size());
    for (int w = 0; w < opts.warmup; ++w) {
      for (size_t i = 0; i < fns.size(); ++i) fns[i]();
      if (with_peer) peer->run(peer_id);
    }
    std::vector<std::vector<double>> ms(fns.size()), cpu(fns.size());
    PeerRounds peer_rounds;
    for (int run = 0; run < std::max(1, opts.runs); ++run) {
      for (size_t i = 0; i < fns.size(); ++i) {
        // Untimed runs right before the timed one (the peer's turn does one): with the peer, for 60 ms,
        // past its spinning threads (warm_for).
        if (with_peer) warm_for(fns[i]);
        else fns[i]();
        const double c0 = process_cpu_ms();
        ms[i].push_back(time_runs(fns[i], 1, 0).median_ms);
        cpu[i].push_back(process_cpu_ms() - c0);
        schedules[i] = stacks[variants[i].stack]->last_schedule();
      }
      if (with_peer) peer_rounds.add(peer->run(peer_id));
    }
    if (set.count("profile") && set["profile"] != "0")
      for (const RnnRunOptions& o : runopts) profile_once(ctx, *stack, io, o, name);
    double seq_ms = 0;
    std::map<size_t, double> default_ms;  // --tuning compare: each strategy with the heuristic knobs
    std::optional<Result> best;
    size_t best_i = 0;
    for (size_t i = 0; i < fns.size(); ++i) {
      const RnnStrategy s = strategies[variants[i].strategy];
      const bool db_variant = compare_db && variants[i].stack == 1;
      Result r;
      r.family = "rnn";
      r.name = name;
      const int lag = lags[variants[i].strategy];
      const bool b_variant = stack_b && variants[i].stack == 1;
      r.impl = fmt::format("cldl:{}{}{}{}", to_string(s), lag ? fmt::format(":{}", lag) : "", db_variant ? "+db" : "",
                           b_variant ? "@B" : "");
      r.wall = summarize(ms[i]);  // ms[i] stays in round order for the per-round ratios
      r.work = stack->flops();
      if (s == RnnStrategy::sequential) seq_ms = r.wall.median_ms;
      std::sort(cpu[i].begin(), cpu[i].end());
      // CPU time of the whole process (PoCL's worker threads included): steadier than the wall time
      // on a shared machine, and it shows spinning or idle cores.
      r.note = fmt::format("{}; cpu {:.1f} ms/run (median)", schedules[i], cpu[i][cpu[i].size() / 2]);
      if (seq_ms > 0 && s != RnnStrategy::sequential) r.note += fmt::format("; {:.2f}x vs sequential", seq_ms / r.wall.median_ms);
      if (compare_db) {
        // The knobs of the first layer (the others have the same shape in these cases).
        RnnLayer& l0 = stacks[variants[i].stack]->layer(0);
        r.note += fmt::format("; rnn_step {}{}", tuning::to_string(tuning::rnn_params(l0.kernel_params(), bc.B)),
                              l0.kernel_params_tuned() ? " (db)" : " (heuristic)");
        if (!db_variant) default_ms[variants[i].strategy] = r.wall.median_ms;
        if (db_variant && default_ms.count(variants[i].strategy))
          r.note += fmt::format("; {:.2f}x vs heuristic knobs", default_ms[variants[i].strategy] / r.wall.median_ms);
      }
      if (b_variant)
        for (size_t j = 0; j < fns.size(); ++j)
          if (variants[j].stack == 0 && variants[j].strategy == variants[i].strategy)
            r.note += "; " + round_ratio(ms[i], ms[j], "B/A").describe() + " (" + b_what + ")";
      if (!best || r.wall.median_ms < best->wall.median_ms) {
        best = r;
        best_i = i;
      }
      rep.add(r);
    }
    if (!with_peer || !best) continue;
    const std::string best_label = best->impl.rfind("cldl:", 0) == 0 ? best->impl.substr(5) : best->impl;
    std::optional<Result> r =
        peer_rounds.row("rnn", name, stack->flops(), peer->note(peer_id), ms[best_i], "ORT/" + best_label);
    if (!r) {
      log::warn("bench rnn: ONNX Runtime peer gave no result for {}", name);
      continue;
    }
    r->note += fmt::format("; best cldl ({}) is {:.2f}x faster than this; {}", best->impl,
                           Reporter::speedup(*best, *r), r->round_ratio->describe());
    summary.push_back({name, best->impl, best->wall.median_ms, r->wall.median_ms, *r->round_ratio});
    rep.add(*r);
  }
  if (opts.json || summary.empty()) return;
  // The figure to read: per round, ONNX Runtime's ms over the best strategy's ms of the same round.
  fmt::print("\n{:<32} {:<18} {:>10} {:>10}  {}\n", "rnn (median ms)", "best cldl", "cldl", "onnxrt",
             "ORT/best per round: median (min-max, rounds)");
  for (const auto& s : summary)
    fmt::print("{:<32} {:<18} {:>10.3f} {:>10.3f}  {}\n", s.name, s.best_impl, s.best_ms, s.peer_ms,
               s.ratio.rounds ? fmt::format("{:.2f}x ({:.2f}x-{:.2f}x, {})", s.ratio.median, s.ratio.min, s.ratio.max,
                                            s.ratio.rounds)
                              : std::string("-"));
  std::fflush(stdout);
}

const Registration kRnnBench("rnn", "LSTM inference per strategy (sequential, time/layer/data parallel)", run_rnn);

}  // namespace
}  // namespace cldl::bench
