// `cldl bench gemm`: SGEMM GFLOP/s of the own kernel and CLBlast against OpenBLAS (the peer) in the
// same run, with the ratio own / OpenBLAS. Settings (--set key=value):
//   openblas_threads=N   default: the device's compute units, so both sides use the same cores
//   mr, nr, nc, mt, local, pack_a=0|1, pack_b=0|1   own-kernel parameters (default: Gemm's heuristic)
//   clblast=0            skip CLBlast (slow with its default parameters on CPUs)
// --tuning compare times own and CLBlast with their defaults and with the tuning database ("+db"); the
// CLBlast variants run in blocks after the interleaved rounds (switching its parameters recompiles).
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "layers/gemm.hpp"
#include "layers/tuning_ops.hpp"
#include "runtime/log.hpp"
#include "tools/cldl/bench.hpp"

#ifdef CLDL_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace cldl::bench {
namespace {

struct Case {
  int64_t M, N, K;
  bool trans_b = false;
};

int setting(const Options& o, const std::string& key, int def) {
  for (const auto& a : o.args)
    if (a.rfind(key + "=", 0) == 0) return std::atoi(a.c_str() + key.size() + 1);
  return def;
}

void run_gemm(Context& ctx, const Options& opts, Reporter& rep) {
  // The last three are convolutions as GEMM whose N (output pixels or Winograd tiles) is not a multiple of
  // the kernel's column block: ResNet's 7x7 stage (512x49x4608), its 14x14 stage (256x196x2304), and one
  // of the 16 products of Winograd F(2x2,3x3) there (256x49x256).
  std::vector<Case> cases = {{1024, 1024, 1024}, {512, 512, 512},  {256, 3136, 576},  {4096, 64, 64},
                             {1000, 3, 257},     {1024, 1024, 1024, true}, {512, 49, 4608}, {256, 196, 2304},
                             {256, 49, 256}};
  // --set shape=MxNxK[t] times that problem alone (t: B transposed).
  for (const auto& a : opts.args)
    if (a.rfind("shape=", 0) == 0) {
      Case c{};
      char t = 0;
      if (std::sscanf(a.c_str() + 6, "%ldx%ldx%ld%c", &c.M, &c.N, &c.K, &t) < 3 || c.M <= 0 || c.N <= 0 || c.K <= 0)
        fail("gemm bench: --set {}: expected shape=MxNxK or MxNxKt", a);
      c.trans_b = t == 't';
      cases = {c};
    }
  const int blas_threads = setting(opts, "openblas_threads", int(std::max(1u, ctx.device().info.compute_units)));
#ifdef CLDL_HAVE_OPENBLAS
  openblas_set_num_threads(blas_threads);
#endif
  auto ec = ctx.exec();
  for (const auto& cs : cases) {
    const std::string shape = fmt::format("{}x{}x{}{}", cs.M, cs.N, cs.K, cs.trans_b ? " B^T" : "");
    if (!opts.selected(shape)) continue;
    GemmConfig cfg;
    cfg.M = cs.M, cfg.N = cs.N, cfg.K = cs.K, cfg.trans_b = cs.trans_b;
    cfg.own.mr = setting(opts, "mr", 0);
    cfg.own.nr = setting(opts, "nr", 0);
    cfg.own.nc = setting(opts, "nc", 0);
    cfg.own.pack_b = setting(opts, "pack_b", -1);
    cfg.own.pack_a = setting(opts, "pack_a", -1);
    cfg.own.local = setting(opts, "local", 0);
    cfg.own.mt = setting(opts, "mt", 0);
    cfg.own.gemv = setting(opts, "gemv", -1);
    std::vector<float> ha(size_t(cs.M * cs.K)), hb(size_t(cs.K * cs.N)), hc(size_t(cs.M * cs.N));
    for (size_t i = 0; i < ha.size(); ++i) ha[i] = float(int(i * 7 % 13) - 6) / 8.0f;
    for (size_t i = 0; i < hb.size(); ++i) hb[i] = float(int(i * 5 % 11) - 5) / 8.0f;
    Tensor a = ctx.upload(HostTensor::from<float>(Shape{cs.M, cs.K}, ha));
    Tensor b = ctx.upload(HostTensor::from<float>(cs.trans_b ? Shape{cs.N, cs.K} : Shape{cs.K, cs.N}, hb));
    Tensor c = ctx.alloc(Shape{cs.M, cs.N}, DType::f32);
    // The three implementations run interleaved (one timed call of each per round) so that load from
    // other processes on a shared machine hits them alike; the ratio is of medians from the same rounds.
    // CLBlast holds one Xgemm parameter set per device and recompiles when it changes, so its variants
    // (default / tuned) run one after the other in blocks, each switching the parameters first.
    struct Impl {
      Result r;
      std::function<void()> fn;
      std::vector<double> ms;
      std::optional<tuning::Params> clblast_params;  // set: a CLBlast block with these (empty = defaults)
    };
    std::vector<Impl> impls;
    std::vector<std::unique_ptr<Gemm>> ops;
    std::vector<Tensor> wss;
    // --tuning compare: each provider with its heuristic / CLBlast defaults and with the database.
    std::vector<std::pair<GemmProvider, bool>> variants;
    for (GemmProvider p : {GemmProvider::own, GemmProvider::clblast}) {
      if (p == GemmProvider::clblast && !setting(opts, "clblast", 1)) continue;
      if (opts.tuning == "compare") variants.push_back({p, false});
      variants.push_back({p, opts.tuning != "default"});
    }
    for (auto [p, use_db] : variants) {
      cfg.provider = p;
      Impl im;
      im.r.impl = p == GemmProvider::own ? "cldl:own" : "clblast";
      if (opts.tuning == "compare") im.r.impl += use_db ? "+db" : "";
      try {
        tuning::ScopedEnabled db(use_db);
        ops.push_back(Gemm::create(ctx, 0, cfg));
        if (p == GemmProvider::clblast) {
          auto t = tuning::find(ctx.device().info, "clblast_xgemm", tuning::kClblastProblem);
          im.clblast_params = t ? t->params : tuning::Params{};
          if (t) im.r.note = "xgemm " + tuning::to_string(t->params) + "; ";
        }
      } catch (const std::exception& e) {
        log::warn("gemm bench {} {}: {}", shape, im.r.impl, e.what());
        continue;
      }
      Gemm* g = ops.back().get();
      Tensor ws;
      if (g->workspace_bytes()) ws = ctx.alloc(Shape{int64_t(g->workspace_bytes() / 4)}, DType::f32);
      im.r.note += g->algorithm();
      im.fn = [g, ws, a, b, c, &ec] {
        Tensor in[2] = {a, b}, out[1] = {c};
        g->enqueue(in, out, ws.valid() ? &ws : nullptr, ec);
        ec.queue.finish();
      };
      impls.push_back(std::move(im));
    }
#ifdef CLDL_HAVE_OPENBLAS
    if (opts.compare) {
      Impl im;
      im.r.impl = "openblas";
      im.r.note = fmt::format("{} threads", blas_threads);
      im.fn = [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, cs.trans_b ? CblasTrans : CblasNoTrans, int(cs.M), int(cs.N),
                    int(cs.K), 1.0f, ha.data(), int(cs.K), hb.data(), int(cs.trans_b ? cs.K : cs.N), 0.0f,
                    hc.data(), int(cs.N));
      };
      impls.push_back(std::move(im));
    }
#endif
    auto timed = [](Impl& im) {
      auto t0 = std::chrono::steady_clock::now();
      im.fn();
      im.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    };
    for (auto& im : impls)
      if (!im.clblast_params)
        for (int i = 0; i < opts.warmup; ++i) im.fn();
    for (int i = 0; i < std::max(1, opts.runs); ++i)
      for (auto& im : impls)
        if (!im.clblast_params) timed(im);
    for (auto& im : impls)
      if (im.clblast_params) {
        tuning::clblast_apply(ctx.device(), *im.clblast_params);
        for (int i = 0; i < std::max(1, opts.warmup); ++i) im.fn();  // the first call compiles
        for (int i = 0; i < std::max(1, opts.runs); ++i) timed(im);
      }
    double own_med = 0, own_min = 0;
    std::map<std::string, double> medians;  // impl -> median (for the default / tuned ratios)
    for (auto& im : impls) {
      std::sort(im.ms.begin(), im.ms.end());
      Stats& st = im.r.wall;
      st.runs = int(im.ms.size());
      st.min_ms = im.ms.front();
      st.max_ms = im.ms.back();
      size_t h = im.ms.size() / 2;
      st.median_ms = im.ms.size() % 2 ? im.ms[h] : 0.5 * (im.ms[h - 1] + im.ms[h]);
      if (im.r.impl == "cldl:own" || im.r.impl == "cldl:own+db") own_med = st.median_ms, own_min = st.min_ms;
      medians[im.r.impl] = st.median_ms;
      if (im.r.impl.ends_with("+db") && medians.count(im.r.impl.substr(0, im.r.impl.size() - 3)))
        im.r.note += fmt::format("; tuned/default = {:.2f}x faster",
                                 medians[im.r.impl.substr(0, im.r.impl.size() - 3)] / st.median_ms);
      if (im.r.impl == "openblas" && own_med > 0)
        im.r.note += fmt::format("; own/openblas = {:.2f}x (median), {:.2f}x (min)", st.median_ms / own_med,
                                 st.min_ms / own_min);
      im.r.family = "gemm";
      im.r.name = shape;
      im.r.work = cfg.flops();
      rep.add(im.r);
    }
  }
}

const Registration reg("gemm", "SGEMM GFLOP/s: own kernel, CLBlast, and OpenBLAS as the peer", run_gemm);

}  // namespace
}  // namespace cldl::bench
