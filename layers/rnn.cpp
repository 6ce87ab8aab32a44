// RnnLayer (ONNX RNN / LSTM / GRU): validation, weight re-layout at create, and the two building blocks
// every strategy uses: the input projection (one Gemm over many steps) and the per-step fused kernels.
// The strategies themselves live in layers/rnn_schedule.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "layers/rnn.hpp"
#include "layers/tuning_ops.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
// One program holds every cell's kernels (activations are runtime arguments), so one build serves all.
// The defaults of resolve_kernel_params: k-major weights on GPUs; rows / tiles elsewhere, the LSTM tiles
// float16 wide where the device prefers float16.
const ProgramVariants kRnnGpuVariants("rnn.cl", {"-DRNN_KMAJOR=1"},
                                      [](const DeviceInfo& d) { return d.type == DeviceType::gpu; });
const ProgramVariants kRnnVariants("rnn.cl", {"-DRNN_KMAJOR=0"},
                                   [](const DeviceInfo& d) { return d.type != DeviceType::gpu; });
const ProgramVariants kRnnWideVariants("rnn.cl", {"-DRNN_KMAJOR=0 -DRNN_TW=16"}, [](const DeviceInfo& d) {
  return d.type != DeviceType::gpu && d.preferred_vector_float >= 16;
});

// Tile kernels: batch rows per work-item of a step (1, 2 or 4: lstm_step_tile_m1/_m2/_m4). More rows
// reuse each loaded weight more often; rows past the batch are computed for nothing, so small batches
// take fewer (rnn_step_rows). The other knobs' defaults are in resolve_kernel_params.

// CLDL_RNN_MR / CLDL_RNN_WEIGHT_LAYOUT: 0 / -1 when unset; read at each create (tests set them).
int env_step_rows() {
  const char* e = std::getenv("CLDL_RNN_MR");
  if (!e) return 0;
  const std::string_view v(e);
  if (v != "1" && v != "2" && v != "4") fail("CLDL_RNN_MR must be 1, 2 or 4, got '{}'", v);
  return std::atoi(e);
}
int env_layout() {
  const char* e = std::getenv("CLDL_RNN_WEIGHT_LAYOUT");
  if (!e) return -1;
  const std::string_view v(e);
  if (v == "rows") return 0;
  if (v == "kmajor") return 1;
  if (v == "tiles") return 2;
  fail("CLDL_RNN_WEIGHT_LAYOUT must be tiles, rows or kmajor, got '{}'", v);
}
const char* layout_name(int layout) { return layout == 2 ? "tiles" : layout == 1 ? "kmajor" : "rows"; }

// What is wrong with the knobs (empty: fine); max_wg = 0 skips the device limits.
std::string kernel_params_error(const RnnKernelParams& k, size_t max_wg) {
  auto one_of = [](int v, std::initializer_list<int> ok) { return std::find(ok.begin(), ok.end(), v) != ok.end(); };
  if (k.layout < -1 || k.layout > 2)
    return fmt::format("kernel.layout must be -1 (auto), 0 (rows), 1 (k-major) or 2 (tiles), got {}", k.layout);
  if (!one_of(k.mr, {0, 1, 2, 4})) return fmt::format("kernel.mr must be 1, 2 or 4 (0 = auto), got {}", k.mr);
  for (auto [name, v] : {std::pair{"rg", k.rg}, {"prg", k.prg}})
    if (v < 0 || v > kRnnMaxRowGroups)
      return fmt::format("kernel.{} must be 1..{} (0 = auto), got {}", name, kRnnMaxRowGroups, v);
  if (!one_of(k.tw, {0, 8, 16})) return fmt::format("kernel.tw must be 8 or 16 (0 = auto), got {}", k.tw);
  if (!one_of(k.pmr, {0, 1, 2, 4, 8})) return fmt::format("kernel.pmr must be 1, 2, 4 or 8 (0 = auto), got {}", k.pmr);
  if (!one_of(k.bt, {0, 1, 2, 4, 8})) return fmt::format("kernel.bt must be 1, 2, 4 or 8 (0 = auto), got {}", k.bt);
  if (!one_of(k.launch, {0, 1, 2}))
    return fmt::format("kernel.launch must be 1 (per step) or 2 (all steps) (0 = auto), got {}", k.launch);
  for (auto [name, v] : {std::pair{"kb", k.kb}, {"wg_m", k.wg_m}, {"wg_n", k.wg_n}, {"proj_wg", k.proj_wg}, {"local", k.local}})
    if (v < 0 || v > 4096) return fmt::format("kernel.{} must be 1..4096 (0 = auto), got {}", name, v);
  if (max_wg) {
    if (size_t(k.wg_m) * size_t(std::max(1, k.wg_n)) > max_wg)
      return fmt::format("kernel.wg_m x wg_n = {} x {} is above the device's work-group maximum {}", k.wg_m, k.wg_n, max_wg);
    if (size_t(k.proj_wg) > max_wg)
      return fmt::format("kernel.proj_wg = {} is above the device's work-group maximum {}", k.proj_wg, max_wg);
  }
  return {};
}

// Sets kernel arguments one after another (the step kernels take ~50).
struct ArgSetter {
  cl::Kernel& k;
  unsigned i = 0;
  template <typename T> ArgSetter& operator()(const T& v) {
    detail::check_arg(k.setArg(i, v), k, i);
    ++i;
    return *this;
  }
};

// Row groups per work-item of a tile step over nb batch items: the knob, else the heuristic.
int step_row_groups(const RnnKernelParams& k, int64_t nb, int64_t H, const DeviceInfo& info) {
  if (k.rg > 0) return k.rg;
  const int64_t mr = k.mr > 0 ? k.mr : rnn_step_rows(nb), tw = std::max(1, k.tw);
  return rnn_step_row_groups((nb + mr - 1) / mr, (H + tw - 1) / tw, std::max<int64_t>(1, info.compute_units));
}

// Row groups per work-item of the tile projection over `rows` (t, b) rows: the knob, else the heuristic.
int projection_row_groups(const RnnKernelParams& k, int64_t rows, int64_t H, const DeviceInfo& info) {
  if (k.prg > 0) return k.prg;
  const int64_t pmr = std::max(1, k.pmr), tw = std::max(1, k.tw);
  return rnn_step_row_groups((rows + pmr - 1) / pmr, (H + tw - 1) / tw, std::max<int64_t>(1, info.compute_units));
}

// Row groups per work-item (its batch shard) of the all-steps kernel: the knob, else the call's row groups
// spread over the compute units (one shard each: every shard reads all of R per step), at most
// kRnnMaxRowGroups.
int all_steps_row_groups(const RnnKernelParams& k, int64_t nb, int64_t mr, const DeviceInfo& info) {
  if (k.rg > 0) return k.rg;
  const int64_t groups = (nb + mr - 1) / mr, cu = std::max<int64_t>(1, info.compute_units);
  return int(std::clamp<int64_t>((groups + cu - 1) / cu, 1, kRnnMaxRowGroups));
}

// The batch shards (work-items) of a tile LSTM call over nb batch items that runs all its steps in one launch,
// 0 where it runs one launch per step (RnnKernelParams::launch): the knob, else the heuristic, on CPU devices only. One
// launch per step splits the weights of a step between the compute units and pays a launch (PoCL: waking its threads,
// some 30-40 us here) per step; one launch for all steps gives every shard of the batch all the weights of every step
// to read. The weights a shard reads per step are one direction's R (4 H x H floats), plus W (4 H x I) when the step
// computes the input projection itself (fused_I = I; 0 with the projection GEMM). One launch pays where
// - those weights fit 1 MiB, a core's L2 on most CPUs, or where a shard has at least 16 rows (16 FMAs per
//   weight float it reads: enough on cores with two AVX-512 FMA units fed at 8 B/cycle from L3) and the
//   weights fit a quarter of the device's global memory cache (PoCL: the last-level cache);
// - and every compute unit gets a shard, or the work the idle units would have taken per step is below
//   2^21 FMAs (about a launch's cost: 40 us at 50 GFMA/s on one core).
// All-steps over per-step time in one process (bench rnn launch=1 launch_b=2), sequential (fused) / time
// parallel, T100:
// - PoCL 3.1, 2 Zen 4 cores (1 MB L2, 32 MB L3): B32 H512 0.96x / 0.97x, L2 0.96x / 0.97x, B32 H384
//   0.96x / 0.94x, B32 H256 0.90x / 0.91x, T200 B64 H256 L2 0.93x / 0.95x, B1 H256 time 0.65x, B8 H128
//   0.52x / 0.56x (and B4 H512 0.93x / 0.87x, not taken: a shard of 4 rows); but B1 H512 1.31x / 1.04x,
//   B2 H512 1.35x / 0.98x, T50 B32 H1024 (W + R 32 MB) 1.14x / 0.99x, B16 H768 1.02x / 0.99x.
// - PoCL 3.1, 2 Sapphire Rapids cores (2 MB L2), time parallel: H128 B16 0.63x, H256 B8 0.88x, B32 0.97x,
//   B64 L2 0.92x, B128 0.92x; but H384 B32 (R 2.25 MB) 1.04x, H512 B32 1.04x, B64 1.03x, B4 1.41x (one shard
//   of 4 rows). Fused with W + R = 2 MB, H256 B8 L2 on Intel's CPU runtime: 1.07x.
int64_t all_steps_shards(const RnnKernelParams& k, int64_t nb, int64_t mr, int64_t H, int64_t fused_I,
                         const DeviceInfo& info) {
  const int64_t cu = std::max<int64_t>(1, info.compute_units), groups = (nb + mr - 1) / mr;
  const int64_t arg = all_steps_row_groups(k, nb, mr, info), shards = (groups + arg - 1) / arg;
  if (k.launch) return k.launch == 2 ? shards : 0;
  if (info.type != DeviceType::cpu) return 0;
  const int64_t rows = std::min(nb, arg * mr), fmas = 4 * H * (H + fused_I);  // per batch row and step
  const int64_t bytes = fmas * int64_t(sizeof(float));
  const bool fits = bytes <= (int64_t(1) << 20) || (rows >= 16 && uint64_t(bytes) <= info.global_mem_cache_bytes / 4);
  const bool busy = shards >= cu || rows * fmas * (cu - shards) / cu <= (int64_t(1) << 21);
  return fits && busy ? shards : 0;
}

// k-block of a tile kernel (RnnKernelParams::kb): the knob, else kRnnDefaultKBlock, but one block (the whole
// K) for a step that computes its input projection itself. There each row group keeps its accumulators in
// registers over all of K while the tile's weights (W and R: 256 KB at H512) stream from L2, instead of
// moving them in and out at every block. PoCL 3.1, 2 Zen 4 cores (1 MB L2), sequential (fused), one block
// over blocks of 64 in one process (bench rnn kernel_dir_b, 9-11 runs): T100 B32 H512 L1 0.94x and 0.97x,
// L2 0.97x, H384 0.99x, T50 B64 H512 0.98x, T200 B64 H256 0.99x; one launch per step: H512 0.92x, H256
// 0.96x. Without the fused projection (time parallel): 0.98x-1.01x, so blocks of 64 stay there.
int tile_kblock(const RnnKernelParams& k, bool fused_input) {
  return k.kb > 0 ? k.kb : fused_input ? std::numeric_limits<int>::max() : kRnnDefaultKBlock;
}

const char* cell_name(RnnCell c) { return c == RnnCell::lstm ? "LSTM" : c == RnnCell::gru ? "GRU" : "RNN"; }
}  // namespace

std::string_view to_string(RnnCell c) { return cell_name(c); }

int rnn_step_rows(int64_t nb) { return nb >= 8 ? 4 : nb >= 2 ? 2 : 1; }

int rnn_step_row_groups(int64_t groups, int64_t tiles, int64_t compute_units) {
  auto blocks = [&](int64_t rg) { return (groups + rg - 1) / rg; };
  int64_t rg = std::clamp<int64_t>(groups, 1, kRnnMaxRowGroups);
  while (rg > 1 && tiles * blocks(rg) < 2 * compute_units) rg = (rg + 1) / 2;
  const int64_t b = blocks(rg);
  return int((groups + b - 1) / b);
}

std::string_view to_string(RnnStrategy s) {
  switch (s) {
    case RnnStrategy::automatic: return "auto";
    case RnnStrategy::sequential: return "sequential";
    case RnnStrategy::time_parallel: return "time_parallel";
    case RnnStrategy::layer_parallel: return "layer_parallel";
    case RnnStrategy::data_parallel: return "data_parallel";
    case RnnStrategy::wavefront: return "wavefront";
  }
  return "?";
}

RnnStrategy parse_rnn_strategy(std::string_view s) {
  if (s == "auto" || s == "automatic") return RnnStrategy::automatic;
  if (s == "sequential" || s == "seq") return RnnStrategy::sequential;
  if (s == "time" || s == "time_parallel") return RnnStrategy::time_parallel;
  if (s == "layer" || s == "layer_parallel") return RnnStrategy::layer_parallel;
  if (s == "data" || s == "data_parallel") return RnnStrategy::data_parallel;
  if (s == "wave" || s == "wavefront") return RnnStrategy::wavefront;
  fail("unknown RNN strategy '{}' (auto, sequential, time, layer, data, wave)", s);
}

std::vector<Activation> RnnConfig::resolved_activations() const {
  if (!activations.empty()) return activations;
  std::vector<Activation> per_dir;
  if (cell == RnnCell::rnn) per_dir = {Activation(Act::tanh)};
  if (cell == RnnCell::gru) per_dir = {Activation(Act::sigmoid), Activation(Act::tanh)};
  if (cell == RnnCell::lstm) per_dir = {Activation(Act::sigmoid), Activation(Act::tanh), Activation(Act::tanh)};
  std::vector<Activation> all;
  for (int d = 0; d < dirs(); ++d) all.insert(all.end(), per_dir.begin(), per_dir.end());
  return all;
}

double RnnConfig::flops() const {
  const double gh = double(gates()) * double(hidden_size);
  return 2.0 * double(dirs()) * double(seq_length) * double(batch) * gh * double(input_size + hidden_size);
}

std::vector<Activation> rnn_activations_from_onnx(const std::vector<std::string>& names,
                                                  const std::vector<float>& alphas, const std::vector<float>& betas) {
  // Which activations take alpha / beta (ONNX operator attributes).
  auto takes = [](Act a, bool beta) {
    switch (a) {
      case Act::leaky_relu: case Act::elu: case Act::thresholded_relu: return !beta;
      case Act::hard_sigmoid: case Act::affine: case Act::scaled_tanh: return true;
      default: return false;
    }
  };
  std::vector<Activation> out;
  size_t ia = 0, ib = 0;
  for (const auto& n : names) {
    Activation a = activation_from_onnx(n);
    if (takes(a.kind, false) && ia < alphas.size()) a.alpha = alphas[ia++];
    if (takes(a.kind, true) && ib < betas.size()) a.beta = betas[ib++];
    out.push_back(a);
  }
  return out;
}

std::vector<Shape> RnnLayer::validate(const RnnConfig& c, const RnnWeights* w) {
  const char* op = cell_name(c.cell);
  if (c.hidden_size <= 0) invalid(op, "hidden_size must be positive, got {}", c.hidden_size);
  if (c.seq_length <= 0) invalid(op, "seq_length must be positive, got {}", c.seq_length);
  if (c.batch <= 0) invalid(op, "batch must be positive, got {}", c.batch);
  if (c.input_size <= 0) invalid(op, "input_size must be positive, got {}", c.input_size);
  if (c.layout != 0 && c.layout != 1) invalid(op, "layout must be 0 or 1, got {}", c.layout);
  if (c.clip < 0 || std::isnan(c.clip)) invalid(op, "clip must be positive (or 0 for none), got {}", c.clip);
  if (c.input_forget && c.cell != RnnCell::lstm) invalid(op, "input_forget is an LSTM attribute");
  if (c.linear_before_reset && c.cell != RnnCell::gru) invalid(op, "linear_before_reset is a GRU attribute");
  if (std::string why = kernel_params_error(c.kernel, 0); !why.empty()) invalid(op, "{}", why);
  const int64_t lim = int64_t(1) << 31;
  if (c.seq_length * c.batch * c.gates() * c.hidden_size * c.dirs() >= lim)
    invalid(op, "T * B * gates * H * directions = {} exceeds 2^31", c.seq_length * c.batch * c.gates() * c.hidden_size * c.dirs());
  if (!c.activations.empty() && c.activations.size() != size_t(c.acts_per_dir() * c.dirs()))
    invalid(op, "activations has {} entries, expected {} ({} per direction x {} directions)", c.activations.size(),
            c.acts_per_dir() * c.dirs(), c.acts_per_dir(), c.dirs());
  const int64_t D = c.dirs(), GH = c.gates() * c.hidden_size, H = c.hidden_size;
  if (w) {
    auto check = [&](const char* name, const HostTensor& t, Shape want) {
      if (t.dtype() != DType::f32) invalid(op, "{} must be f32, got {}", name, to_string(t.dtype()));
      if (t.shape() != want) invalid(op, "{} has shape {}, expected {}", name, t.shape().str(), want.str());
    };
    check("W", w->W, {D, GH, c.input_size});
    check("R", w->R, {D, GH, H});
    if (w->B) check("B", *w->B, {D, 2 * GH});
    if (w->P) {
      if (c.cell != RnnCell::lstm) invalid(op, "P (peepholes) is an LSTM input");
      check("P", *w->P, {D, 3 * H});
    }
  }
  const int64_t T = c.seq_length, B = c.batch;
  Shape y = c.layout == 0 ? Shape{T, D, B, H} : Shape{B, T, D, H};
  Shape yh = c.layout == 0 ? Shape{D, B, H} : Shape{B, D, H};
  return {y, yh, yh};
}

void RnnLayer::check_sequence_lens(const RnnConfig& c, std::span<const int32_t> lens) {
  const char* op = cell_name(c.cell);
  if (int64_t(lens.size()) != c.batch) invalid(op, "sequence_lens has {} entries, expected batch = {}", lens.size(), c.batch);
  for (size_t b = 0; b < lens.size(); ++b)
    if (lens[b] < 0 || lens[b] > c.seq_length)
      invalid(op, "sequence_lens[{}] = {} is outside [0, seq_length = {}]", b, lens[b], c.seq_length);
}

std::unique_ptr<RnnLayer> RnnLayer::create(Context& ctx, int device, const RnnConfig& cfg, const RnnWeights& w) {
  validate(cfg, &w);
  tuning::record(cfg);
  std::unique_ptr<RnnLayer> l(new RnnLayer(ctx, device, cfg));
  l->sched_ = std::make_unique<detail::RnnSchedState>();
  l->acts_ = cfg.resolved_activations();
  const int64_t D = cfg.dirs(), H = cfg.hidden_size, G = cfg.gates(), GH = G * H, I = cfg.input_size;
  // Weights are re-laid out per device when replicated (see replica()); biases are folded here into
  // one projection bias (Wb + Rb), except GRU linear_before_reset whose Rb_h must stay inside
  // r * (h R_h^T + Rb_h).
  l->W_.assign(w.W.as<float>(), w.W.as<float>() + D * GH * I);
  l->R_.assign(w.R.as<float>(), w.R.as<float>() + D * GH * H);
  l->bx_.assign(size_t(D * GH), 0.0f);
  l->rbh_.assign(size_t(D * H), 0.0f);
  l->P_.assign(size_t(D * 3 * H), 0.0f);
  if (w.B) {
    const float* Bp = w.B->as<float>();
    for (int64_t d = 0; d < D; ++d)
      for (int64_t row = 0; row < GH; ++row) {
        float wb = Bp[d * 2 * GH + row], rb = Bp[d * 2 * GH + GH + row];
        bool rb_inside = cfg.cell == RnnCell::gru && cfg.linear_before_reset && row >= 2 * H;
        // Same summation order as the reference: Wb + Rb.
        l->bx_[size_t(d * GH + row)] = rb_inside ? wb : wb + rb;
        if (rb_inside) l->rbh_[size_t(d * H + row - 2 * H)] = rb;
      }
  }
  if (w.P) std::copy(w.P->as<float>(), w.P->as<float>() + D * 3 * H, l->P_.begin());
  l->replicate(device);
  const Replica& r0 = l->replicas_.at(device);
  const RnnKernelParams& k = r0.kp;
  const DeviceInfo& info = ctx.device(device).info;
  const int mr = k.mr > 0 ? k.mr : rnn_step_rows(cfg.batch);
  const bool all = l->steps_in_one_launch(device, cfg.batch);
  const bool all_fused = l->steps_in_one_launch(device, cfg.batch, true);
  const int rg = all ? all_steps_row_groups(k, cfg.batch, mr, info) : step_row_groups(k, cfg.batch, H, info);
  const int prg = projection_row_groups(k, cfg.seq_length * cfg.batch, H, info);
  l->algorithm_ = r0.tiles
                      ? fmt::format(
                            "{}: register-blocked {} ({} row group(s) of {} batch rows x {} units x "
                            "{} gates per work-item in k-blocks of {}, {}; projection {} row "
                            "group(s) of {} rows per work-item, groups of {}), weights in gate-interleaved tiles",
                            cell_name(cfg.cell),
                            all ? all_fused ? "all-steps kernel, one launch per call"
                                            : fmt::format("all-steps kernel, one launch per call (fused input "
                                                          "projection: per step, {} row group(s))",
                                                          step_row_groups(k, cfg.batch, H, info))
                                : "step kernel",
                            rg, mr, k.tw, cfg.gates(),
                            k.kb > 0 ? fmt::format("{}", k.kb)
                                     : fmt::format("{} (fused input projection: one block)", kRnnDefaultKBlock),
                            all ? "a batch shard per work-item through every step and tile"
                                : fmt::format("work-groups {}x{}", k.wg_m, k.wg_n),
                            prg, k.pmr, k.proj_wg)
                      : fmt::format(
                            "{}: fused step kernel{}, weights {} (work-groups of {} units, {} batch items per "
                            "work-item)",
                            cell_name(cfg.cell),
                            cfg.cell == RnnCell::gru && !cfg.linear_before_reset ? " (gates + h: 2 kernels/step)" : "",
                            r0.kmajor ? "k-major" : "in rows", k.local, k.bt);
  if (r0.tuned) l->algorithm_ += " (tuned)";
  log::debug("{} T={} B={} I={} H={} D={}: {}", cell_name(cfg.cell), cfg.seq_length, cfg.batch, I, H, D, l->algorithm_);
  return l;
}

namespace {
// Explicit settings, then the tuning database, then the device heuristic; the environment overrides all.
RnnKernelParams resolve_kernel_params(const RnnConfig& cfg, const DeviceInfo& info, bool& tuned) {
  const char* op = cell_name(cfg.cell);
  RnnKernelParams k = cfg.kernel;
  tuned = false;
  const std::string problem = tuning::rnn_problem(cfg);
  if (auto t = tuning::find(info, "rnn_step", problem)) {
    tuning::rnn_apply(t->params, k);
    if (std::string why = kernel_params_error(k, 0); !why.empty())
      invalid(op, "tuning database entry rnn_step [{}] on {}: {}", problem, info.name, why);
    tuned = true;
  }
  // Weights: k-major for GPUs (coalesced: neighbouring work-items read neighbouring addresses);
  // gate-interleaved tiles for CPUs and others (the register-blocked *_tile kernels: per k one vector
  // of weights per gate, reused by mr batch rows).
  if (k.layout < 0) k.layout = info.type == DeviceType::gpu ? 1 : 2;
  // Tile width = the vector width: float16 where the device prefers it (PoCL reports 16 with AVX-512,
  // whose zmm registers do twice the FMAs of float8's ymm), float8 elsewhere.
  if (k.tw == 0) k.tw = info.preferred_vector_float >= 16 ? 16 : 8;
  // Tiles: up to 8 work-items along the batch per work-group (they share the tile's weights in cache), one
  // tile wide; the projection in blocks of 16 work-items (up to 16 x 8 groups x 4 rows = 512 rows of x,
  // L2-resident while the tiles of W pass over them).
  if (k.wg_m == 0) k.wg_m = 8;
  if (k.wg_n == 0) k.wg_n = 1;
  // k-blocks of 64: 16 KB of a float16 tile's weights (4 gates), which stay in L1 while every row group of
  // the work-item takes them. PoCL/AVX-512, T100 B32 H512, 5 alternating pairs, device time of the 100
  // time-parallel steps: 43.3 / 42.5 / 42.2 / 36.1 / 47.7 ms against 45.5 / 45.7 / 46.3 / 44.2 / 45.0 with
  // one row group per work-item (eight per work-group); k-blocks of 32 to 256 did not differ beyond the noise.
  // kb stays 0 (the heuristic, tile_kblock) so each kernel resolves its own.
  if (k.pmr == 0) k.pmr = 4;
  if (k.proj_wg == 0) k.proj_wg = 16;
  // Rows / k-major: work-groups of up to 64 along the hidden units (neighbouring units read
  // neighbouring weights), 4 batch items per work-item (each loaded weight used 4 times).
  if (k.local == 0) k.local = 64;
  if (k.bt == 0) k.bt = 4;
  // CLDL_RNN_WEIGHT_LAYOUT=tiles|rows|kmajor and CLDL_RNN_MR=1|2|4 override (tests exercise every
  // layout on any device; measurements compare variants).
  if (const int e = env_layout(); e >= 0) {
    k.layout = e;
    log::info("{}: weight layout {} forced by CLDL_RNN_WEIGHT_LAYOUT", op, layout_name(e));
  }
  if (const int e = env_step_rows(); e > 0) {
    k.mr = e;
    log::info("{}: {} batch rows per work-item forced by CLDL_RNN_MR", op, e);
  }
  // Tile kernels exist for LSTM; GRU and RNN use the row layout where tiles are asked for.
  if (k.layout == 2 && cfg.cell != RnnCell::lstm) k.layout = 0;
  if (std::string why = kernel_params_error(k, info.max_work_group_size); !why.empty())
    invalid(op, "{}{}", why, tuned ? fmt::format(" (with the tuning database entry rnn_step [{}])", problem) : "");
  return k;
}
}  // namespace

void RnnLayer::replicate(int dev) { (void)replica(dev); }

RnnLayer::TileWeights RnnLayer::tile_weights(int dev) {
  Replica& r = replica(dev);
  TileWeights t;
  if (!r.tiles) return t;
  const int64_t TW = r.kp.tw, NT = (cfg_.hidden_size + TW - 1) / TW, G = cfg_.gates();
  t.tw = r.kp.tw;
  t.W = r.W;
  t.RT = r.RT[0];
  t.bx = r.bx;
  t.P = r.P[0];
  t.w_elems = NT * cfg_.input_size * G * TW;
  t.rt_elems = NT * cfg_.hidden_size * G * TW;
  return t;
}

RnnLayer::Replica& RnnLayer::replica(int dev) {
  std::lock_guard lock(launch_mutex_);
  auto it = replicas_.find(dev);
  if (it != replicas_.end()) return it->second;
  const int64_t D = cfg_.dirs(), H = cfg_.hidden_size, GH = cfg_.gates() * H, I = cfg_.input_size;
  auto up = [&](const float* p, int64_t n) {
    return ctx_->upload(HostTensor::from<float>({n}, std::span<const float>(p, size_t(n))), dev);
  };
  Replica r;
  r.kp = resolve_kernel_params(cfg_, ctx_->device(dev).info, r.tuned);
  r.kmajor = r.kp.layout == 1;
  r.tiles = r.kp.layout == 2;
  const int64_t G = cfg_.gates(), TW = r.kp.tw, NT = (H + TW - 1) / TW;
  // Rows [G*H][K] of one direction -> tiles [NT][K][G][TW] (zero past H).
  auto tile = [&](const float* src, int64_t K, float* dst) {
    for (int64_t n = 0; n < NT; ++n)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t g = 0; g < G; ++g)
          for (int64_t u = 0; u < TW; ++u) {
            const int64_t j = n * TW + u;
            dst[((n * K + k) * G + g) * TW + u] = j < H ? src[(g * H + j) * K + k] : 0.0f;
          }
  };
  if (r.tiles) {
    std::vector<float> wt(size_t(D * NT * I * G * TW));
    for (int64_t d = 0; d < D; ++d) tile(W_.data() + d * GH * I, I, wt.data() + d * NT * I * G * TW);
    r.W = up(wt.data(), int64_t(wt.size()));
  } else if (r.kmajor) {
    std::vector<float> wt(W_.size());
    for (int64_t row = 0; row < D * GH; ++row)
      for (int64_t k = 0; k < I; ++k) wt[size_t(k * D * GH + row)] = W_[size_t(row * I + k)];
    r.W = up(wt.data(), D * GH * I);
  } else {
    r.W = up(W_.data(), D * GH * I);
  }
  r.bx = up(bx_.data(), D * GH);
  for (int64_t d = 0; d < D; ++d) {
    std::vector<float> rt(R_.begin() + d * GH * H, R_.begin() + (d + 1) * GH * H);
    if (r.tiles) {
      rt.assign(size_t(NT * H * G * TW), 0.0f);
      tile(R_.data() + d * GH * H, H, rt.data());
    } else if (r.kmajor) {
      for (int64_t row = 0; row < GH; ++row)
        for (int64_t k = 0; k < H; ++k) rt[size_t(k * GH + row)] = R_[size_t(d * GH * H + row * H + k)];
    }
    r.RT.push_back(up(rt.data(), int64_t(rt.size())));
    r.rbh.push_back(up(rbh_.data() + d * H, H));
    r.P.push_back(up(P_.data() + d * 3 * H, 3 * H));
  }
  // Macro knobs only when they differ from the kernel's defaults, so the default build is the one
  // kRnnVariants registers (offline binaries, warm-up).
  std::string options = fmt::format("-DRNN_KMAJOR={}", int(r.kmajor));
  if (r.tiles && r.kp.pmr != 4) options += fmt::format(" -DRNN_PMR={}", r.kp.pmr);
  if (r.tiles && r.kp.tw != 8) options += fmt::format(" -DRNN_TW={}", r.kp.tw);
  if (!r.tiles && r.kp.bt != 4) options += fmt::format(" -DRNN_BT={}", r.kp.bt);
  cl::Program prog = ctx_->program("rnn.cl", options, dev);
  switch (cfg_.cell) {
    case RnnCell::rnn: r.step = make_kernel(prog, "rnn_step"); break;
    case RnnCell::lstm:
      r.step = make_kernel(prog, "lstm_step");
      if (r.tiles) {
        r.project = make_kernel(prog, "lstm_project_tile");
        for (int i = 0; i < 3; ++i) {
          r.tile_steps[i] = make_kernel(prog, fmt::format("lstm_step_tile_m{}", 1 << i).c_str());
          r.tile_all[i] = make_kernel(prog, fmt::format("lstm_steps_tile_m{}", 1 << i).c_str());
        }
      }
      break;
    case RnnCell::gru:
      if (cfg_.linear_before_reset) {
        r.step = make_kernel(prog, "gru_step");
      } else {
        r.gates = make_kernel(prog, "gru_gates");
        r.step = make_kernel(prog, "gru_step_lbr0");
      }
      break;
  }
  if (dev != device_) log::debug("{}: weights replicated to device {}", cell_name(cfg_.cell), dev);
  return replicas_.emplace(dev, std::move(r)).first->second;
}

size_t RnnLayer::workspace_bytes(int64_t Bx) const {
  const int64_t D = cfg_.dirs(), H = cfg_.hidden_size, GH = cfg_.gates() * H, T = cfg_.seq_length;
  return size_t(T * Bx * D * GH + D * 6 * Bx * H) * sizeof(float);
}

namespace {
Tensor offset_view(const Tensor& t, int64_t elems) {
  Tensor v = t;
  v.offset_bytes += size_t(elems) * dtype_size(t.dtype);
  return v;
}
}  // namespace

void RnnLayer::enqueue_projection(int dev, const RnnLayerIO& io, int64_t b0, int64_t nb, int64_t t0, int64_t t1,
                                  ExecutionContext& ec) {
  Replica& r = replica(dev);
  const int64_t D = cfg_.dirs(), GH = cfg_.gates() * cfg_.hidden_size, I = cfg_.input_size, DGH = D * GH;
  if (r.tiles) {
    // The register-blocked projection kernel, one launch per direction over all (t, b) rows.
    const int64_t H = cfg_.hidden_size, TW = r.kp.tw, NT = (H + TW - 1) / TW, nrows = (t1 - t0) * nb;
    // Work-items of prg row groups of pmr rows; blocks of proj_wg of them (16 x 8 x 4 = 512 rows of x by
    // default: L2-resident) x all tiles, block after block.
    const int64_t pmr = r.kp.pmr, groups = (nrows + pmr - 1) / pmr;
    const int prg = projection_row_groups(r.kp, nrows, H, ctx_->device(dev).info);
    const size_t items = size_t((groups + prg - 1) / prg), rb = std::min<size_t>(size_t(r.kp.proj_wg), items);
    const cl::NDRange global{rb, size_t(NT), (items + rb - 1) / rb};
    std::lock_guard lock(launch_mutex_);
    for (int64_t d = 0; d < D; ++d) {
      ArgSetter a{r.project};
      a(cl_int(H))(cl_int(I))(cl_int(nrows))(cl_int(nb))(cl_int(b0))(cl_int(t0));
      a(io.x.buffer)(cl_long(io.x.offset_elems()))(cl_long(io.x_st))(cl_long(io.x_sb));
      a(r.W.buffer)(cl_long(r.W.offset_elems() + d * NT * I * cfg_.gates() * TW))(r.bx.buffer)(cl_long(r.bx.offset_elems() + d * GH));
      a(io.ws.buffer)(cl_long(io.ws.offset_elems() + d * GH))(cl_long(io.B * DGH))(cl_long(DGH));
      a(cl_int(prg))(cl_int(tile_kblock(r.kp, false)));
      ec.enqueue_kernel(r.project, global, cl::NDRange{rb, 1, 1}, "lstm_project_tile");
    }
    return;
  }
  GemmConfig g;
  g.M = nb;
  g.N = DGH;
  g.K = I;
  g.trans_b = !r.kmajor;  // W [D*G*H][I] (trans) or W^T [I][D*G*H]
  g.ldb = r.kmajor ? DGH : I;
  g.lda = std::max(io.x_sb, I);
  g.ldc = DGH;
  g.batch = t1 - t0;
  g.stride_a = io.x_st;
  g.stride_b = 0;
  g.stride_c = io.B * DGH;
  g.bias = GemmBias::per_col;
  std::string key = fmt::format("{} {} {} {} {}", g.M, g.batch, g.lda, g.stride_a, g.stride_c);
  Gemm* gemm;
  {
    std::lock_guard lock(launch_mutex_);
    auto& slot = r.gemms[key];
    if (!slot) slot = Gemm::create(*ctx_, dev, g);
    gemm = slot.get();
  }
  Tensor a = offset_view(io.x, t0 * io.x_st + b0 * io.x_sb);
  Tensor c = offset_view(io.ws, t0 * io.B * DGH + b0 * DGH);
  gemm->run(a, r.W, c, ec, &r.bx);
}

int64_t RnnLayer::one_launch_shards(int dev, int64_t nb, bool fused_input) {
  const Replica& r = replica(dev);
  const DeviceInfo& info = ctx_->device(dev).info;
  const int64_t mr = r.kp.mr > 0 ? r.kp.mr : rnn_step_rows(nb);
  if (!r.tiles || cfg_.cell != RnnCell::lstm) return 0;
  return all_steps_shards(r.kp, nb, mr, cfg_.hidden_size, fused_input ? cfg_.input_size : 0, info);
}

void RnnLayer::enqueue_steps(int dev, const RnnLayerIO& io, int d, int64_t b0, int64_t nb, int64_t s0, int64_t s1,
                             bool fuse_input, ExecutionContext& ec) {
  Replica& r = replica(dev);
  const int64_t D = cfg_.dirs(), H = cfg_.hidden_size, G = cfg_.gates(), GH = G * H, T = cfg_.seq_length;
  const int64_t I = cfg_.input_size, B = io.B, DGH = D * GH;
  const bool reverse = cfg_.direction == RnnDirection::reverse || (cfg_.direction == RnnDirection::bidirectional && d == 1);
  const int64_t ws0 = io.ws.offset_elems();
  const int64_t state = ws0 + T * B * DGH + d * 6 * B * H;  // h [2][B][H], c [2][B][H], zr [2][B][H]
  const Activation* act = &acts_[size_t(d * cfg_.acts_per_dir())];
  const bool lbr0 = cfg_.cell == RnnCell::gru && !cfg_.linear_before_reset;
  const bool has_h0 = io.h0.valid(), has_c0 = io.c0.valid();
  const Tensor& y = io.y.valid() ? io.y : io.ws;
  const Tensor& yh = io.yh.valid() ? io.yh : io.ws;
  const Tensor& yc = io.yc.valid() ? io.yc : io.ws;
  // Work-groups along the hidden units (neighbouring units read neighbouring weights).
  const size_t lx = std::min<size_t>({size_t(r.kp.local), round_up(size_t(H), 8), std::max<size_t>(1, ctx_->device(dev).info.max_work_group_size)});
  const size_t mr = size_t(r.kp.mr > 0 ? r.kp.mr : rnn_step_rows(nb)), bt = size_t(r.kp.bt);
  const int rg = r.tiles ? step_row_groups(r.kp, nb, H, ctx_->device(dev).info) : 1;
  const int64_t TW = std::max(1, r.kp.tw);
  const size_t mi = mr == 1 ? 0 : mr == 2 ? 1 : 2;  // tile kernels with 1, 2, 4 rows per row group
  cl::Kernel step = r.tiles ? r.tile_steps[mi] : r.step;
  // Before the lock: replica() takes it.
  const size_t items = s0 < s1 ? size_t(one_launch_shards(dev, nb, fuse_input)) : 0;
  std::lock_guard lock(launch_mutex_);
  if (items > 0) {
    // One launch for steps [s0, s1): a shard of the batch per work-item (one per compute unit by default).
    const int arg = all_steps_row_groups(r.kp, nb, int64_t(mr), ctx_->device(dev).info);
    const Tensor& h0 = io.h0.valid() ? io.h0 : io.ws;
    const Tensor& c0 = io.c0.valid() ? io.c0 : io.ws;
    cl::Kernel& k = r.tile_all[mi];
    ArgSetter a{k};
    a(cl_int(H))(cl_int(I))(cl_int(T))(cl_int(s0))(cl_int(s1))(cl_int(reverse))(cl_int(b0))(cl_int(nb))(cl_int(B));
    a(io.lens.buffer)(cl_long(io.lens.offset_elems()))(cl_int(fuse_input));
    a(io.ws.buffer)(cl_long(ws0 + d * GH))(cl_long(B * DGH))(cl_long(DGH));
    a(io.x.buffer)(cl_long(io.x.offset_elems()))(cl_long(io.x_st))(cl_long(io.x_sb));
    a(r.W.buffer)(cl_long(r.W.offset_elems() + d * ((H + TW - 1) / TW) * I * G * TW));
    a(r.bx.buffer)(cl_long(r.bx.offset_elems() + d * GH))(r.RT[size_t(d)].buffer);
    a(io.ws.buffer)(cl_long(state))(cl_long(state + 2 * B * H));
    a(cl_int(io.h0.valid()))(h0.buffer)(cl_long(h0.offset_elems() + d * io.h0_sd))(cl_long(io.h0_sb));
    a(cl_int(io.c0.valid()))(c0.buffer)(cl_long(c0.offset_elems() + d * io.h0_sd))(cl_long(io.h0_sb));
    a(y.buffer)(cl_long(y.offset_elems() + d * io.y_sd))(cl_long(io.y_st))(cl_long(io.y_sb))(cl_int(io.y.valid()));
    a(yh.buffer)(cl_long(yh.offset_elems() + d * io.yh_sd))(cl_long(io.yh_sb))(cl_int(io.yh.valid()));
    a(yc.buffer)(cl_long(yc.offset_elems() + d * io.yh_sd))(cl_long(io.yh_sb))(cl_int(io.yc.valid()));
    a(cfg_.clip);
    for (int i = 0; i < 3; ++i) a(cl_int(act[i].kind))(act[i].alpha)(act[i].beta);
    a(r.P[size_t(d)].buffer)(cl_int(1))(cl_int(cfg_.input_forget))(cl_int(arg))(cl_int(tile_kblock(r.kp, fuse_input)));
    ec.enqueue_kernel(k, cl::NDRange{items}, cl::NDRange{1}, cell_name(cfg_.cell));
    return;
  }
  for (int64_t s = s0; s < s1; ++s) {
    const bool first = s == 0;
    const int64_t hn_off = state + (s & 1) * B * H, hp_state = state + ((s + 1) & 1) * B * H;
    auto common = [&](cl::Kernel& k, bool zero_prev_h) {
      ArgSetter a{k};
      a(cl_int(H))(cl_int(G))(cl_int(I))(cl_int(T))(cl_int(s))(cl_int(reverse))(cl_int(b0))(cl_int(nb));
      a(io.lens.buffer)(cl_long(io.lens.offset_elems()))(cl_int(fuse_input));
      a(io.ws.buffer)(cl_long(ws0 + d * GH))(cl_long(B * DGH))(cl_long(DGH));
      a(io.x.buffer)(cl_long(io.x.offset_elems()))(cl_long(io.x_st))(cl_long(io.x_sb));
      const int64_t wd = r.tiles ? d * ((H + TW - 1) / TW) * I * G * TW : r.kmajor ? d * GH : d * GH * I;
      a(r.W.buffer)(cl_long(r.W.offset_elems() + wd))(cl_long(DGH))(r.bx.buffer)(cl_long(r.bx.offset_elems() + d * GH));
      a(r.RT[size_t(d)].buffer)(cl_int(zero_prev_h));
      if (first && has_h0)
        a(io.h0.buffer)(cl_long(io.h0.offset_elems() + d * io.h0_sd))(cl_long(io.h0_sb));
      else
        a(io.ws.buffer)(cl_long(hp_state))(cl_long(H));
      a(io.ws.buffer)(cl_long(hn_off));
      a(y.buffer)(cl_long(y.offset_elems() + d * io.y_sd))(cl_long(io.y_st))(cl_long(io.y_sb))(cl_int(io.y.valid()));
      a(yh.buffer)(cl_long(yh.offset_elems() + d * io.yh_sd))(cl_long(io.yh_sb))(cl_int(io.yh.valid()));
      a(cl_int(s == T - 1))(cfg_.clip);
      return a;
    };
    const bool zero_h = first && !has_h0;
    // Tiles: dimension 0 = blocks of rg row groups of one tile (a work-group's items share the tile's
    // weights in cache), dimension 1 = tiles.
    const size_t nt = size_t((H + TW - 1) / TW), rows = mr * size_t(rg), groups = (size_t(nb) + rows - 1) / rows,
                 tlx = std::min<size_t>(size_t(r.kp.wg_m), groups), tly = std::min<size_t>(size_t(r.kp.wg_n), nt);
    const cl::NDRange global = r.tiles ? cl::NDRange{round_up(groups, tlx), round_up(nt, tly)}
                                       : cl::NDRange{round_up(size_t(H), lx), (size_t(nb) + bt - 1) / bt};
    const cl::NDRange local = r.tiles ? cl::NDRange{tlx, tly} : cl::NDRange{lx, 1};
    if (cfg_.cell == RnnCell::rnn) {
      common(step, zero_h)(cl_int(act[0].kind))(act[0].alpha)(act[0].beta);
    } else if (cfg_.cell == RnnCell::lstm) {
      auto a = common(step, zero_h);
      for (int i = 0; i < 3; ++i) a(cl_int(act[i].kind))(act[i].alpha)(act[i].beta);
      const int64_t cs = state + 2 * B * H;
      a(cl_int(first && !has_c0));
      if (first && has_c0)
        a(io.c0.buffer)(cl_long(io.c0.offset_elems() + d * io.h0_sd))(cl_long(io.h0_sb));
      else
        a(io.ws.buffer)(cl_long(cs + ((s + 1) & 1) * B * H))(cl_long(H));
      a(io.ws.buffer)(cl_long(cs + (s & 1) * B * H));
      a(yc.buffer)(cl_long(yc.offset_elems() + d * io.yh_sd))(cl_long(io.yh_sb))(cl_int(io.yc.valid()));
      a(r.P[size_t(d)].buffer)(cl_int(1))(cl_int(cfg_.input_forget));
      if (r.tiles) a(cl_int(rg))(cl_int(tile_kblock(r.kp, fuse_input)));
    } else if (!lbr0) {
      auto a = common(step, zero_h);
      for (int i = 0; i < 2; ++i) a(cl_int(act[i].kind))(act[i].alpha)(act[i].beta);
      a(r.rbh[size_t(d)].buffer);
    } else {
      const int64_t zr = state + 4 * B * H;
      common(r.gates, zero_h)(cl_int(act[0].kind))(act[0].alpha)(act[0].beta)(io.ws.buffer)(cl_long(zr))(cl_int(B));
      ec.enqueue_kernel(r.gates, global, local, "gru_gates");
      common(step, zero_h)(cl_int(act[1].kind))(act[1].alpha)(act[1].beta)(io.ws.buffer)(cl_long(zr))(cl_int(B));
    }
    ec.enqueue_kernel(step, global, local, cell_name(cfg_.cell));
  }
}

Tensor detail::RnnSchedState::scratch_tensor(Context& ctx, const std::string& key, Shape shape, DType dt, int dev) {
  auto& t = scratch[fmt::format("{} d{}", key, dev)];
  if (!t.valid() || t.shape != shape || t.dtype != dt) t = ctx.alloc(shape, dt, dev);
  return t;
}

}  // namespace cldl
