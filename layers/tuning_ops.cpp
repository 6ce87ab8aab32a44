// Tuning adapters of the op families (see tuning_ops.hpp): keys, spaces, validity and application.
#include "layers/tuning_ops.hpp"

#include <clblast.h>

#include <mutex>

#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace cldl::tuning {

namespace {
int64_t get(const Params& p, const char* k, int64_t def) {
  auto it = p.find(k);
  return it == p.end() ? def : it->second;
}
}  // namespace

// ---- gemm ----------------------------------------------------------------------------------------------

std::string gemm_problem(const GemmConfig& c) {
  std::string s = fmt::format("{}x{}x{} b{} {}{}", c.M, c.N, c.K, c.batch, c.trans_a ? 'T' : 'N', c.trans_b ? 'T' : 'N');
  // Leading dimensions and strides change what is fastest (aliasing strides, broadcast weights), so
  // they are part of the key when they are not the packed defaults.
  if (c.lda || c.ldb || c.ldc) s += fmt::format(" ld{},{},{}", c.eff_lda(), c.eff_ldb(), c.eff_ldc());
  if (c.batch > 1 && (c.stride_a >= 0 || c.stride_b >= 0 || c.stride_c >= 0))
    s += fmt::format(" st{},{},{}", c.eff_stride_a(), c.eff_stride_b(), c.eff_stride_c());
  return s;
}

Space gemm_space(const DeviceInfo& info, const GemmConfig& c) {
  Space s;
  s.dims.push_back({"mr", {2, 3, 4, 5, 6, 7, 8}});
  s.dims.push_back({"nr", c.N <= 4 ? std::vector<int64_t>{4} : c.N <= 8 ? std::vector<int64_t>{4, 8}
                                                                        : std::vector<int64_t>{4, 8, 16}});
  s.dims.push_back({"nc", {1, 2, 4}});
  s.dims.push_back({"pack_a", {0, 1}});
  s.dims.push_back({"pack_b", c.trans_b ? std::vector<int64_t>{1} : std::vector<int64_t>{0, 1}});
  s.dims.push_back({"mt", {1, 2, 4, 8}});
  // PoCL runs a work-group on one thread: wider groups only add loop overhead there, but GPUs need them.
  s.dims.push_back({"local", info.type == DeviceType::cpu ? std::vector<int64_t>{1, 2, 4}
                                                          : std::vector<int64_t>{8, 16, 32, 64, 128}});
  return s;
}

std::string gemm_invalid(const DeviceInfo& info, const GemmConfig& c, const Params& p) {
  const int64_t local = get(p, "local", 1), nr = get(p, "nr", 8);
  if (size_t(local) > info.max_work_group_size)
    return fmt::format("work-group {} above the device maximum {}", local, info.max_work_group_size);
  if (!info.max_work_item_sizes.empty() && size_t(local) > info.max_work_item_sizes[0])
    return fmt::format("work-group {} above the device's dimension-0 maximum {}", local, info.max_work_item_sizes[0]);
  if (c.trans_b && get(p, "pack_b", 1) == 0) return "B^T needs packing";
  if (nr > 4 && c.N <= nr / 2) return fmt::format("nr {} is more than twice N = {}", nr, c.N);
  if (const int64_t nc = get(p, "nc", 1), panels = (c.N + nr - 1) / nr; nc > panels)
    return fmt::format("nc {} is more than the {} panel(s) of {} columns N = {} has", nc, panels, nr, c.N);
  return {};
}

Params gemm_params(const GemmOwnParams& o) {
  return {{"mr", o.mr},         {"nr", o.nr}, {"nc", o.nc},      {"pack_a", o.pack_a},
          {"pack_b", o.pack_b}, {"mt", o.mt}, {"local", o.local}};
}

void gemm_apply(const Params& p, GemmOwnParams& o) {
  if (o.mr == 0) o.mr = int(get(p, "mr", 0));
  if (o.nr == 0) o.nr = int(get(p, "nr", 0));
  // Entries from before the nc dimension were tuned with one vector per work-item.
  if (o.nc == 0) o.nc = int(get(p, "nc", 1));
  if (o.pack_a < 0) o.pack_a = int(get(p, "pack_a", -1));
  if (o.pack_b < 0) o.pack_b = int(get(p, "pack_b", -1));
  if (o.mt == 0) o.mt = int(get(p, "mt", 0));
  if (o.local == 0) o.local = int(get(p, "local", 0));
}

// ---- clblast -------------------------------------------------------------------------------------------

namespace {
std::mutex g_clblast_mutex;
std::map<cl_device_id, Params> g_clblast_defaults;  // captured before our first override
std::map<cl_device_id, Params> g_clblast_current;   // what we last set

Params retrieve_locked(const Device& device) {
  auto it = g_clblast_defaults.find(device.device());
  if (it != g_clblast_defaults.end()) return it->second;
  std::unordered_map<std::string, size_t> m;
  auto st = clblast::RetrieveParameters(device.device(), "Xgemm", clblast::Precision::kSingle, m);
  if (st != clblast::StatusCode::kSuccess)
    fail("CLBlast RetrieveParameters(Xgemm) failed with status {} on {}", int(st), device.info.name);
  Params p;
  for (const auto& [k, v] : m) p[k] = int64_t(v);
  g_clblast_defaults[device.device()] = p;
  g_clblast_current[device.device()] = p;
  return p;
}
}  // namespace

Params clblast_defaults(const Device& device) {
  std::lock_guard lock(g_clblast_mutex);
  return retrieve_locked(device);
}

Space clblast_space(const DeviceInfo& info) {
  Space s;
  const bool cpu = info.type == DeviceType::cpu;
  s.dims.push_back({"MWG", {16, 32, 64, 128}});
  s.dims.push_back({"NWG", {16, 32, 64, 128}});
  s.dims.push_back({"KWG", {16, 32}});
  s.dims.push_back({"MDIMC", cpu ? std::vector<int64_t>{4, 8, 16} : std::vector<int64_t>{8, 16, 32}});
  s.dims.push_back({"NDIMC", cpu ? std::vector<int64_t>{4, 8, 16} : std::vector<int64_t>{8, 16, 32}});
  s.dims.push_back({"MDIMA", cpu ? std::vector<int64_t>{4, 8, 16} : std::vector<int64_t>{8, 16, 32}});
  s.dims.push_back({"NDIMB", cpu ? std::vector<int64_t>{4, 8, 16} : std::vector<int64_t>{8, 16, 32}});
  s.dims.push_back({"KWI", {2, 8}});
  s.dims.push_back({"VWM", {1, 2, 4, 8}});
  s.dims.push_back({"VWN", {1, 2, 4, 8}});
  s.dims.push_back({"STRM", {0, 1}});
  s.dims.push_back({"STRN", {0, 1}});
  s.dims.push_back({"SA", {0, 1}});
  s.dims.push_back({"SB", {0, 1}});
  return s;
}

std::string clblast_invalid(const DeviceInfo& info, const Params& p) {
  // CLBlast's constraints for the Xgemm kernel with GEMMK = 0 (its tuner skips the same configurations).
  const int64_t MWG = get(p, "MWG", 0), NWG = get(p, "NWG", 0), KWG = get(p, "KWG", 0), MDIMC = get(p, "MDIMC", 0),
                NDIMC = get(p, "NDIMC", 0), MDIMA = get(p, "MDIMA", 0), NDIMB = get(p, "NDIMB", 0),
                KWI = get(p, "KWI", 1), VWM = get(p, "VWM", 1), VWN = get(p, "VWN", 1), SA = get(p, "SA", 0),
                SB = get(p, "SB", 0);
  if (get(p, "GEMMK", 0) != 0) return "only GEMMK=0 is searched";
  if (MWG <= 0 || NWG <= 0 || KWG <= 0 || MDIMC <= 0 || NDIMC <= 0 || MDIMA <= 0 || NDIMB <= 0)
    return "missing tile parameters";
  if (size_t(MDIMC * NDIMC) > info.max_work_group_size)
    return fmt::format("work-group {}x{} above the device maximum {}", MDIMC, NDIMC, info.max_work_group_size);
  if (KWG % KWI) return "KWG not a multiple of KWI";
  if (MWG % (MDIMC * VWM)) return "MWG not a multiple of MDIMC*VWM";
  if (NWG % (NDIMC * VWN)) return "NWG not a multiple of NDIMC*VWN";
  if (MWG % (MDIMA * VWM)) return "MWG not a multiple of MDIMA*VWM";
  if (NWG % (NDIMB * VWN)) return "NWG not a multiple of NDIMB*VWN";
  if ((MDIMC * NDIMC) % MDIMA || KWG % ((MDIMC * NDIMC) / MDIMA)) return "KWG not a multiple of MDIMC*NDIMC/MDIMA";
  if ((MDIMC * NDIMC) % NDIMB || KWG % ((MDIMC * NDIMC) / NDIMB)) return "KWG not a multiple of MDIMC*NDIMC/NDIMB";
  const uint64_t local = uint64_t(SA * KWG * MWG + SB * KWG * NWG) * sizeof(float);
  if (local > info.local_mem_bytes)
    return fmt::format("{} bytes of local memory above the device's {}", local, info.local_mem_bytes);
  return {};
}

void clblast_apply(const Device& device, const Params& p) {
  std::lock_guard lock(g_clblast_mutex);
  Params full = retrieve_locked(device);  // every key CLBlast expects, defaults where `p` is silent
  for (const auto& [k, v] : p)
    if (full.count(k)) full[k] = v;
  if (g_clblast_current[device.device()] == full) return;
  std::unordered_map<std::string, size_t> m;
  for (const auto& [k, v] : full) m[k] = size_t(v);
  auto st = clblast::OverrideParameters(device.device(), "Xgemm", clblast::Precision::kSingle, m);
  if (st != clblast::StatusCode::kSuccess)
    fail("CLBlast OverrideParameters(Xgemm, {}) failed with status {} on {}", to_string(p), int(st), device.info.name);
  g_clblast_current[device.device()] = full;
}

void clblast_use_database(const Device& device) {
  auto t = find(device.info, "clblast_xgemm", kClblastProblem);
  clblast_apply(device, t ? t->params : Params{});
}

// ---- conv ----------------------------------------------------------------------------------------------

std::string conv_problem(const ConvGeometry& g) {
  return fmt::format("n{} c{} {}x{}x{} k{}x{} s{}x{} d{}x{} p{},{},{},{} g{}", g.N, g.C, g.K, g.H, g.W, g.KH, g.KW, g.SH,
                     g.SW, g.DH, g.DW, g.PT, g.PL, g.PB, g.PR, g.groups);
}

Space conv_space(const ConvConfig& cfg) {
  Dimension d{"algo", {}};
  for (ConvAlgo a : {ConvAlgo::im2col_gemm, ConvAlgo::gemm_1x1, ConvAlgo::direct, ConvAlgo::depthwise,
                     ConvAlgo::winograd, ConvAlgo::fft})
    if (ConvOp::applies(cfg, a)) d.values.push_back(int64_t(a));
  return Space{{d}};
}

// ---- attention -----------------------------------------------------------------------------------------

std::string attention_problem(const AttentionConfig& c) {
  return fmt::format("b{} h{}/{} q{} kv{} d{}/{}{}{}{}", c.batch, c.q_heads, c.eff_kv_heads(), c.q_len, c.kv_len,
                     c.head_size, c.eff_v_head_size(), c.causal ? " causal" : "",
                     c.mask != AttentionMask::none ? fmt::format(" mask{}", int(c.mask)) : "",
                     c.kv_lens != AttentionKvLens::none ? " lens" : "");
}

Space attention_space(const DeviceInfo& info, const AttentionConfig&) {
  Space s;
  // blocked: 1 = the blocked kernel (16 * rg rows per work-item; the tile knobs are unused), 0 = the tile
  // kernel (block_m, block_n, vec, use_local).
  // The blocked kernel is the CPU form (per work-item private arrays of up to 64 KiB): searched on CPUs.
  s.dims.push_back({"blocked", info.type == DeviceType::cpu ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0}});
  s.dims.push_back({"block_m", info.type == DeviceType::cpu ? std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}
                                                            : std::vector<int64_t>{16, 32, 64, 128}});
  s.dims.push_back({"block_n", {4, 8, 16, 32, 64}});
  s.dims.push_back({"vec", {1, 2, 4, 8, 16}});
  s.dims.push_back({"use_local", {0, 1}});
  // The blocked kernel's row groups of 16 and register blocks: keys per Q.K^T pass, output dims per P.V
  // pass, keys per block.
  s.dims.push_back({"rg", {1, 2}});
  s.dims.push_back({"kb", {4, 6, 8, 12}});
  s.dims.push_back({"cb", {4, 6, 8}});
  s.dims.push_back({"bkv", {16, 24, 48}});
  // The tile kernel over chunks of the keys (1: none); the auto rule splits only off CPUs.
  s.dims.push_back({"kv_splits", info.type == DeviceType::cpu ? std::vector<int64_t>{1}
                                                              : std::vector<int64_t>{1, 2, 4, 8, 16, 32}});
  return s;
}

std::string attention_invalid(const DeviceInfo& info, const AttentionConfig& c, const Params& p) {
  if (get(p, "blocked", 0) == 1) {  // the blocked kernel takes any shape the fused path takes
    const int64_t kb = get(p, "kb", 6), bkv = get(p, "bkv", 24);
    if (bkv % kb) return fmt::format("kb {} does not divide bkv {}", kb, bkv);
    return {};
  }
  const int64_t bm = get(p, "block_m", 16), bn = get(p, "block_n", 16), vec = get(p, "vec", 4);
  const int64_t D = c.head_size, Dv = c.eff_v_head_size();
  if (size_t(bm) > info.max_work_group_size)
    return fmt::format("work-group {} above the device maximum {}", bm, info.max_work_group_size);
  if (D % vec || Dv % vec) return fmt::format("vec {} does not divide head sizes {} / {}", vec, D, Dv);
  if (get(p, "use_local", 1)) {
    const uint64_t local = uint64_t(bn * (D + Dv)) * sizeof(float);
    if (local > info.local_mem_bytes)
      return fmt::format("{} bytes of local memory above the device's {}", local, info.local_mem_bytes);
  }
  return {};
}

void attention_apply(const Params& p, AttentionConfig& c) {
  if (c.block_m <= 0) c.block_m = int(get(p, "block_m", 0));
  if (c.block_n <= 0) c.block_n = int(get(p, "block_n", 0));
  if (c.vec <= 0) c.vec = int(get(p, "vec", 0));
  if (c.use_local < 0) c.use_local = int(get(p, "use_local", -1));
  if (c.blocked < 0) c.blocked = int(get(p, "blocked", -1));
  if (c.rg <= 0) c.rg = int(get(p, "rg", 0));
  if (c.kb <= 0) c.kb = int(get(p, "kb", 0));
  if (c.cb <= 0) c.cb = int(get(p, "cb", 0));
  if (c.bkv <= 0) c.bkv = int(get(p, "bkv", 0));
  if (c.kv_splits <= 0) c.kv_splits = int(get(p, "kv_splits", 0));
}

Params attention_relevant(const Params& p) {
  Params r = p;
  if (get(p, "blocked", 0) == 1)
    for (const char* k : {"block_m", "block_n", "vec", "use_local", "kv_splits"}) r.erase(k);
  else
    for (const char* k : {"rg", "kb", "cb", "bkv"}) r.erase(k);
  r.erase("block_q");  // a knob of the earlier blocked kernel, still in older databases
  return r;
}

// ---- rnn_step -------------------------------------------------------------------------------------------

std::string rnn_problem(const RnnConfig& c) {
  return fmt::format("{} b{} i{} h{} d{}{}", to_string(c.cell), c.batch, c.input_size, c.hidden_size, c.dirs(),
                     c.cell == RnnCell::gru && c.linear_before_reset ? " lbr" : "");
}

Space rnn_space(const DeviceInfo& info, const RnnConfig& c) {
  const bool cpu = info.type == DeviceType::cpu;
  Space s;
  // layout 2 (tiles: tw, mr, rg, kb, wg_m, wg_n, pmr, prg, proj_wg) exists for LSTM; 0 / 1 (rows, k-major: local, bt).
  s.dims.push_back({"layout", c.cell == RnnCell::lstm ? std::vector<int64_t>{2, 0, 1} : std::vector<int64_t>{0, 1}});
  // 16 only where the device prefers float16 (AVX-512): elsewhere a float16 tile is split into narrower
  // registers and spills (AVX2), and Intel's FPGA emulator took minutes to build one.
  s.dims.push_back({"tw", info.preferred_vector_float >= 16 ? std::vector<int64_t>{16, 8} : std::vector<int64_t>{8}});
  s.dims.push_back({"mr", {1, 2, 4}});
  // Row groups per work-item (0: the heuristic for the device's compute units) and the k-block they share.
  s.dims.push_back({"rg", {0, 1, 2, 4, 8}});
  // kb 0: the heuristic (tile_kblock: 64, one block for the fused step); 4096: one block everywhere.
  s.dims.push_back({"kb", {0, 32, 128, 4096}});
  s.dims.push_back({"wg_m", {1, 2, 4, 8, 16}});
  s.dims.push_back({"wg_n", {1, 2, 4, 8}});
  s.dims.push_back({"pmr", {1, 2, 4, 8}});
  s.dims.push_back({"prg", {0, 1, 2, 4}});
  s.dims.push_back({"proj_wg", {4, 8, 16, 32}});
  // One launch per step, or all steps in one (batch shards; 0: the heuristic, all_steps_shards).
  s.dims.push_back({"launch", {0, 1, 2}});
  // PoCL runs a work-group as one thread's loop: narrow groups give more parallel tasks there.
  s.dims.push_back({"local", cpu ? std::vector<int64_t>{8, 16, 32, 64, 128} : std::vector<int64_t>{32, 64, 128, 256}});
  s.dims.push_back({"bt", {1, 2, 4, 8}});
  return s;
}

std::string rnn_invalid(const DeviceInfo& info, const RnnConfig& c, const Params& p) {
  const int64_t layout = get(p, "layout", 0);
  if (layout == 2 && c.cell != RnnCell::lstm) return "tiles exist for LSTM only";
  if (layout == 2) {
    const int64_t mr = get(p, "mr", 1), wg_m = get(p, "wg_m", 1), wg_n = get(p, "wg_n", 1);
    // mr rows per work-item with at least half of them past the batch: the smaller kernel does the same.
    if (mr > 1 && mr >= 2 * c.batch) return fmt::format("mr {} for a batch of {}", mr, c.batch);
    // A last row group wholly past the batch: fewer groups do the same.
    if (const int64_t rg = get(p, "rg", 0); rg > 1 && (rg - 1) * mr >= c.batch)
      return fmt::format("rg {} of {} rows for a batch of {}", rg, mr, c.batch);
    if (size_t(wg_m * wg_n) > info.max_work_group_size)
      return fmt::format("work-group {}x{} above the device maximum {}", wg_m, wg_n, info.max_work_group_size);
    if (info.max_work_item_sizes.size() >= 2 &&
        (size_t(wg_m) > info.max_work_item_sizes[0] || size_t(wg_n) > info.max_work_item_sizes[1]))
      return fmt::format("work-group {}x{} above the device's per-dimension maximum", wg_m, wg_n);
    if (size_t(get(p, "proj_wg", 1)) > info.max_work_group_size)
      return fmt::format("projection work-group {} above the device maximum {}", get(p, "proj_wg", 1),
                         info.max_work_group_size);
  } else {
    const int64_t local = get(p, "local", 1);
    if (size_t(local) > info.max_work_group_size)
      return fmt::format("work-group {} above the device maximum {}", local, info.max_work_group_size);
    if (!info.max_work_item_sizes.empty() && size_t(local) > info.max_work_item_sizes[0])
      return fmt::format("work-group {} above the device's dimension-0 maximum {}", local, info.max_work_item_sizes[0]);
  }
  return {};
}

Params rnn_params(const RnnKernelParams& k, int64_t batch) {
  return {{"layout", k.layout},   {"tw", k.tw},       {"mr", k.mr > 0 ? k.mr : rnn_step_rows(batch)},
          {"rg", k.rg},           {"kb", k.kb},       {"wg_m", k.wg_m},
          {"wg_n", k.wg_n},       {"pmr", k.pmr},     {"prg", k.prg},
          {"proj_wg", k.proj_wg}, {"local", k.local}, {"bt", k.bt},
          {"launch", k.launch}};
}

void rnn_apply(const Params& p, RnnKernelParams& k) {
  if (k.layout < 0) k.layout = int(get(p, "layout", -1));
  if (k.tw == 0) k.tw = int(get(p, "tw", 0));
  if (k.mr == 0) k.mr = int(get(p, "mr", 0));
  if (k.rg == 0) k.rg = int(get(p, "rg", 0));
  if (k.kb == 0) k.kb = int(get(p, "kb", 0));
  if (k.wg_m == 0) k.wg_m = int(get(p, "wg_m", 0));
  if (k.wg_n == 0) k.wg_n = int(get(p, "wg_n", 0));
  if (k.pmr == 0) k.pmr = int(get(p, "pmr", 0));
  if (k.prg == 0) k.prg = int(get(p, "prg", 0));
  if (k.proj_wg == 0) k.proj_wg = int(get(p, "proj_wg", 0));
  if (k.local == 0) k.local = int(get(p, "local", 0));
  if (k.bt == 0) k.bt = int(get(p, "bt", 0));
  if (k.launch == 0) k.launch = int(get(p, "launch", 0));
}

Params rnn_relevant(const RnnConfig& c, const Params& p) {
  Params r = p;
  if (get(p, "layout", 0) == 2) {
    for (const char* k : {"local", "bt"}) r.erase(k);
    // The step launches min(wg_m, row groups) x min(wg_n, tiles); the projection min(proj_wg, its row groups).
    const int64_t mr = get(p, "mr", 1), groups = (c.batch + mr - 1) / mr, tw = get(p, "tw", 8),
                  nt = (c.hidden_size + tw - 1) / tw;
    const int64_t pmr = get(p, "pmr", 4), pgroups = (c.seq_length * c.batch + pmr - 1) / pmr;
    if (r.count("rg")) r["rg"] = std::min(r["rg"], groups);
    if (r.count("wg_m")) r["wg_m"] = std::min(r["wg_m"], groups);
    if (r.count("wg_n")) r["wg_n"] = std::min(r["wg_n"], nt);
    if (r.count("prg")) r["prg"] = std::min(r["prg"], pgroups);
    if (r.count("proj_wg")) r["proj_wg"] = std::min(r["proj_wg"], pgroups);
    // All steps in one launch: a work-item per batch shard, no work-groups of tiles.
    if (get(p, "launch", 0) == 2)
      for (const char* k : {"wg_m", "wg_n"}) r.erase(k);
  } else {
    for (const char* k : {"tw", "mr", "rg", "kb", "wg_m", "wg_n", "pmr", "prg", "proj_wg", "launch"}) r.erase(k);
    if (r.count("local")) r["local"] = std::min<int64_t>(r["local"], (c.hidden_size + 7) / 8 * 8);
  }
  return r;
}

// ---- recorder -------------------------------------------------------------------------------------------

namespace {
std::mutex g_record_mutex;
ProblemRecorder* g_recorder = nullptr;
}  // namespace

void set_recorder(ProblemRecorder* r) {
  std::lock_guard lock(g_record_mutex);
  g_recorder = r;
}
void record(const GemmConfig& c) {
  std::lock_guard lock(g_record_mutex);
  if (g_recorder) g_recorder->gemm.push_back(c);
}
void record(const ConvConfig& c) {
  std::lock_guard lock(g_record_mutex);
  if (g_recorder) g_recorder->conv.push_back(c);
}
void record(const AttentionConfig& c) {
  std::lock_guard lock(g_record_mutex);
  if (g_recorder) g_recorder->attention.push_back(c);
}
void record(const RnnConfig& c) {
  std::lock_guard lock(g_record_mutex);
  if (g_recorder) g_recorder->rnn.push_back(c);
}

}  // namespace cldl::tuning
