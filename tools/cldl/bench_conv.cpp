// `cldl bench conv`: GFLOP/s of every applicable Conv algorithm on ResNet/MobileNet-style shapes
// (direct-convolution FLOPs, 2 * N*K*OH*OW * C/group*KH*KW, for every algorithm so rates compare).
// Winograd runs twice, as rows "winograd F2" and "winograd F4" (ConvConfig::winograd_tile 2 and 4).
// Settings: --set batch=N overrides every case's batch; --set algos=winograd,direct limits algorithms;
// --set shape=N,C,H,W,K,k,stride,pad[,groups] times that one shape; --set direct_kernel=1|2|3|4 picks the direct
// algorithm's kernel (ConvConfig::direct_kernel), --set depthwise_block=1|8|16|32|64|128 the depthwise one,
// --set act=Silu (an ONNX activation name) the fused activation instead of Relu.
// --tuning compare adds the automatic choice with heuristics only ("cldl:auto") and with the tuning
// database ("cldl:auto+db": tuned algorithm and GEMM parameters), and their ratio.
// After the timed runs, one profiled run splits the time by kernel (the note's stage list, device ms;
// a clFFT transform that runs several kernels reports only its last one).
#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "layers/conv.hpp"
#include "runtime/tuning.hpp"
#include "runtime/profiler.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {
namespace {

struct ConvCase {
  std::string name;
  int64_t N, C, H, W, K, k, stride, pad, groups;
};

std::string setting(const Options& o, const std::string& key, const std::string& def) {
  for (const auto& a : o.args)
    if (a.rfind(key + "=", 0) == 0) return a.substr(key.size() + 1);
  return def;
}

HostTensor filled(Shape s, float seed) {
  HostTensor t(DType::f32, std::move(s));
  float* p = t.as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float((i * 7919 + int64_t(seed * 13)) % 2001) / 1000.0f - 1.0f;
  return t;
}

void run_conv(Context& ctx, const Options& opts, Reporter& rep) {
  std::vector<ConvCase> cases = {
      {"3x3 64->64 56x56", 8, 64, 56, 56, 64, 3, 1, 1, 1},
      {"1x1 256->64 56x56", 8, 256, 56, 56, 64, 1, 1, 0, 1},
      {"7x7/2 3->64 224x224", 1, 3, 224, 224, 64, 7, 2, 3, 1},
      {"depthwise 3x3 32x112x112", 1, 32, 112, 112, 32, 3, 1, 1, 32},
      {"3x3/2 3->16 224x224", 1, 3, 224, 224, 16, 3, 2, 1, 1},     // MobileNet v2 / v3's stem
      {"3x3 1->16 8x8", 450, 1, 8, 8, 16, 3, 1, 1, 1},              // the zoo's digits CNN at batch 450
      {"3x3 16->32 4x4", 450, 16, 4, 4, 32, 3, 1, 1, 1},
  };
  // --set shape=N,C,H,W,K,k,stride,pad[,groups]: one case of that shape instead of the list.
  const std::string shape = setting(opts, "shape", "");
  if (!shape.empty()) {
    std::vector<int64_t> v;
    for (size_t at = 0; at <= shape.size();) {
      size_t comma = shape.find(',', at);
      if (comma == std::string::npos) comma = shape.size();
      v.push_back(std::stoll(shape.substr(at, comma - at)));
      at = comma + 1;
    }
    if (v.size() != 8 && v.size() != 9) fail("bench conv: --set shape=N,C,H,W,K,k,stride,pad[,groups], got '{}'", shape);
    std::string name = fmt::format("{}x{} {}->{} {}x{} /{} pad {} groups {}", v[5], v[5], v[1], v[4], v[2], v[3], v[6], v[7],
                             v.size() == 9 ? v[8] : 1);
    cases = {{name, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v.size() == 9 ? v[8] : 1}};
  }
  const std::string batch = setting(opts, "batch", "");
  const std::string algos = setting(opts, "algos", "");
  for (const auto& cs : cases) {
    const int64_t N = batch.empty() ? cs.N : std::stoll(batch);
    const std::string name = fmt::format("{} b{}", cs.name, N);
    if (!opts.selected(name)) continue;
    ConvConfig cfg;
    cfg.input = Shape{N, cs.C, cs.H, cs.W};
    cfg.weight = filled(Shape{cs.K, cs.C / cs.groups, cs.k, cs.k}, 1);
    cfg.bias = filled(Shape{cs.K}, 2);
    cfg.strides = {cs.stride, cs.stride};
    cfg.pads = {cs.pad, cs.pad, cs.pad, cs.pad};
    cfg.groups = cs.groups;
    cfg.act = activation_from_onnx(setting(opts, "act", "Relu"));
    cfg.direct_kernel = std::atoi(setting(opts, "direct_kernel", "0").c_str());
    cfg.depthwise_block = std::atoi(setting(opts, "depthwise_block", "0").c_str());
    Tensor x = ctx.upload(filled(cfg.input, 3));
    const std::string automatic(to_string(ConvOp::choose(cfg, ctx.device(0).info)));
    const ConvConfig auto_cfg = cfg;
    // (algorithm, tuning database on); --tuning compare adds the automatic choice without and with it.
    // (algorithm, tuning database on, Winograd tile: 0 = the default); Winograd runs with both tiles
    // (rows "winograd F2" and "winograd F4").
    struct Run {
      ConvAlgo a;
      bool db;
      int tile;
    };
    std::vector<Run> runs;
    const bool db = opts.tuning != "default";
    for (ConvAlgo a : {ConvAlgo::winograd, ConvAlgo::gemm_1x1, ConvAlgo::im2col_gemm, ConvAlgo::depthwise,
                       ConvAlgo::fft, ConvAlgo::direct}) {
      if (!ConvOp::applies(cfg, a)) continue;
      if (!algos.empty() && algos.find(to_string(a)) == std::string::npos) continue;
      if (a == ConvAlgo::winograd) {
        runs.push_back({a, db, 2});
        runs.push_back({a, db, 4});
      } else {
        runs.push_back({a, db, 0});
      }
    }
    if (opts.tuning == "compare")
      runs.insert(runs.end(), {{ConvAlgo::automatic, false, 0}, {ConvAlgo::automatic, true, 0}});
    double auto_default_ms = 0;
    for (auto [a, use_db, tile] : runs) {
      cfg.algo = a;
      cfg.winograd_tile = tile;
      tuning::ScopedEnabled scoped_db(use_db);
      auto op = ConvOp::create(ctx, 0, cfg);
      Tensor y = ctx.alloc(op->output_shape(), DType::f32);
      Tensor ws;
      if (op->workspace_bytes()) ws = ctx.alloc(Shape{int64_t(op->workspace_bytes())}, DType::u8);
      auto ec = ctx.exec();
      Tensor in[1] = {x}, out[1] = {y};
      Result r;
      r.family = "conv";
      r.name = name;
      r.impl = a == ConvAlgo::automatic ? (use_db ? "cldl:auto+db" : "cldl:auto")
               : tile                   ? fmt::format("cldl:{} F{}", to_string(a), tile)
                                        : fmt::format("cldl:{}", to_string(a));
      r.wall = time_runs(
          [&] {
            op->enqueue(in, out, op->workspace_bytes() ? &ws : nullptr, ec);
            ec.queue.finish();
          },
          opts.runs, opts.warmup);
      r.work = op->geom().flops();
      // One profiled run: device time per stage (im2col / gemm / transforms / FFTs).
      Profiler prof;
      ExecutionContext pec = ctx.exec(0, 0, true);
      pec.profiler = &prof;
      op->enqueue(in, out, op->workspace_bytes() ? &ws : nullptr, pec);
      pec.queue.finish();
      std::vector<std::pair<std::string, double>> stage_ms;  // in first-seen order, summed by name
      double device_ms = 0;
      for (const auto& rec : prof.records()) {
        auto it = std::find_if(stage_ms.begin(), stage_ms.end(), [&](auto& s) { return s.first == rec.name; });
        if (it == stage_ms.end()) it = stage_ms.insert(stage_ms.end(), {rec.name, 0.0});
        it->second += rec.duration_ms();
        device_ms += rec.duration_ms();
      }
      std::string stages;
      for (const auto& [name, ms] : stage_ms) stages += fmt::format("{}{} {:.1f}", stages.empty() ? "" : ", ", name, ms);
      r.device_ms = device_ms;
      const bool is_auto = automatic == to_string(a) &&
                           (a != ConvAlgo::winograd || ConvOp::winograd_tile_for(auto_cfg, ctx.device(0).info) == tile);
      r.note =
          fmt::format("{}ws {:.1f} MB; {}", is_auto ? "automatic; " : "", op->workspace_bytes() / 1048576.0, stages);
      if (a == ConvAlgo::automatic) {
        r.note = fmt::format("{}; {}", op->algorithm(), r.note);
        if (!use_db) auto_default_ms = r.wall.median_ms;
        else if (auto_default_ms > 0) r.note += fmt::format("; tuned/default = {:.2f}x faster", auto_default_ms / r.wall.median_ms);
      }
      rep.add(r);
    }
  }
}

const Registration kConvBench("conv", "Conv algorithms on ResNet/MobileNet shapes (GFLOP/s, --set batch=N algos=... shape=N,C,H,W,K,k,stride,pad[,groups])",
                              run_conv);

}  // namespace
}  // namespace cldl::bench
