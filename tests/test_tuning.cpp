// Tuning databases and search (runtime/tuning.hpp, layers/tuning_ops.hpp, `cldl tune`): key levels and
// fallbacks, the user database over the shipped one, invalid candidates skipped before anything is
// built, a candidate with a wrong result rejected, and a short real `cldl tune` whose result the Gemm
// layer then uses (and computes correctly, against the double-precision reference); the same for the
// RNN step kernels (family "rnn_step"), whose environment overrides win over the database.
#include <cstdlib>
#include <fstream>

#include "layers/conv.hpp"
#include "layers/gemm.hpp"
#include "layers/rnn.hpp"
#include "layers/tuning_ops.hpp"
#include "models/builder.hpp"
#include "models/onnx_import.hpp"
#include "runtime/tuning.hpp"
#include "support/test_util.hpp"
#include "tests/reference/gemm_ref.hpp"
#include "tests/reference/rnn_ref.hpp"

using namespace cldl;
using namespace cldl::tuning;
using cldl::test::ctx;

namespace {

DeviceInfo fake_device() {
  DeviceInfo i;
  i.type = DeviceType::gpu;
  i.vendor = "Acme";
  i.name = "Acme X1";
  i.driver_version = "7.1";
  i.max_work_group_size = 256;
  i.max_work_item_sizes = {256, 256, 64};
  i.local_mem_bytes = 32768;
  return i;
}

Database db_with(std::vector<std::pair<DeviceKey, int64_t>> entries, const std::string& origin,
                 const std::string& problem = "p") {
  Database db = Database::parse(R"({"format": "cldl-tuning-1", "entries": []})", origin);
  for (auto& [k, v] : entries) db.entry_for(k).kernels["gemm"][problem] = Tuned{{{"mr", v}}, 1.0, 2.0};
  return db;
}

// Restores the process-wide registry after a test replaced it.
struct RegistryGuard {
  std::vector<Database> saved = Registry::global().databases();
  ~RegistryGuard() { Registry::global().set(saved); }
};

int64_t looked_up(const DeviceInfo& info, const char* problem = "p") {
  auto m = Registry::global().lookup(info, "gemm", problem);
  return m ? m->tuned.params.at("mr") : -1;
}

// An LSTM layer (odd sizes) with its inputs, run through RnnLayer and checked against ref::rnn_layer.
struct RnnCase {
  RnnConfig cfg;
  RnnWeights w;
  std::vector<float> X;
};

RnnCase rnn_case(RnnCell cell, int64_t T, int64_t B, int64_t I, int64_t H, uint32_t seed) {
  RnnCase c;
  c.cfg.cell = cell;
  c.cfg.seq_length = T, c.cfg.batch = B, c.cfg.input_size = I, c.cfg.hidden_size = H;
  const int64_t GH = c.cfg.gates() * H;
  c.w.W = test::random_tensor({1, GH, I}, seed, -0.5f, 0.5f);
  c.w.R = test::random_tensor({1, GH, H}, seed + 1, -0.5f, 0.5f);
  c.w.B = test::random_tensor({1, 2 * GH}, seed + 2, -0.5f, 0.5f);
  c.X = test::random_floats(size_t(T * B * I), seed + 3);
  return c;
}

// Creates the layer (the database / environment are read here), runs it and compares Y with the reference.
std::unique_ptr<RnnLayer> run_rnn_checked(const RnnCase& c) {
  auto layer = RnnLayer::create(ctx(), 0, c.cfg, c.w);
  const auto shapes = RnnLayer::validate(c.cfg);
  Tensor x = ctx().upload(HostTensor::from<float>({c.cfg.seq_length, c.cfg.batch, c.cfg.input_size}, c.X));
  Tensor y = ctx().alloc(shapes[0], DType::f32);
  Tensor in[1] = {x}, out[1] = {y};
  ExecutionContext ec(ctx().queue());
  cl::Event done;
  ec.signal = &done;
  layer->enqueue(in, out, nullptr, ec);
  done.wait();
  HostTensor got = ctx().download(y);
  const auto want = ref::rnn_layer(c.cfg, c.w, c.X, nullptr, nullptr, nullptr);
  INFO("algorithm: " << layer->algorithm());
  CLDL_CHECK_CLOSE(got.as<float>(), want.Y.data(), want.Y.size(), 1e-4, 2e-5);
  return layer;
}

using test::ScopedEnv;

}  // namespace

TEST_CASE("tuning: device key levels follow CLBlast's fallback order") {
  const DeviceInfo info = fake_device();
  const DeviceKey d = device_key(info);
  CHECK(d.type == "gpu");
  CHECK(d.library == std::string(library_version()));
  CHECK(match_level({"gpu", "Acme", "Acme X1", "7.1", d.library}, d) == 0);
  CHECK(match_level({"gpu", "Acme", "Acme X1", "7.1", "*"}, d) == 1);
  CHECK(match_level({"gpu", "*", "Acme X1", "*", "*"}, d) == 2);
  CHECK(match_level({"gpu", "Acme", "*", "*", "*"}, d) == 3);
  CHECK(match_level({"gpu", "*", "*", "*", "*"}, d) == 4);
  CHECK(match_level({"*", "*", "*", "*", "*"}, d) == 4);
  CHECK(match_level({"cpu", "*", "*", "*", "*"}, d) == -1);           // other device type
  CHECK(match_level({"gpu", "Acme", "Acme X2", "7.1", "*"}, d) == -1);  // other device
  CHECK(match_level({"gpu", "Acme", "Acme X1", "7.2", "*"}, d) == -1);  // other driver
  CHECK(match_level({"gpu", "Acme", "Acme X1", "7.1", "0.0.0-other"}, d) == -1);

  RegistryGuard guard;
  // Each step removes the most specific entry: the next level must answer.
  std::vector<std::pair<DeviceKey, int64_t>> all = {{{"gpu", "*", "*", "*", "*"}, 5},
                                                    {{"gpu", "Acme", "*", "*", "*"}, 4},
                                                    {{"gpu", "*", "Acme X1", "*", "*"}, 3},
                                                    {{"gpu", "Acme", "Acme X1", "7.1", "*"}, 2},
                                                    {{"gpu", "Acme", "Acme X1", "7.1", d.library}, 1},
                                                    {{"gpu", "Acme", "Acme X2", "7.1", d.library}, 9}};
  for (int64_t want = 1; want <= 5; ++want) {
    Registry::global().set({db_with(all, "test")});
    CAPTURE(want);
    CHECK(looked_up(info) == want);
    all.erase(std::find_if(all.begin(), all.end(), [&](auto& e) { return e.second == want; }));
  }
  Registry::global().set({db_with(all, "test")});
  CHECK(looked_up(info) == -1);                // only the other device's entry is left
  CHECK(looked_up(info, "other problem") == -1);  // problems are matched exactly
}

TEST_CASE("tuning: the user database overrides the shipped one at the same level") {
  const DeviceInfo info = fake_device();
  const DeviceKey exact = device_key(info);
  const DeviceKey vendor{"gpu", "Acme", "*", "*", "*"};
  RegistryGuard guard;
  Registry::global().set({db_with({{exact, 1}}, "user"), db_with({{exact, 2}}, "shipped")});
  auto m = Registry::global().lookup(info, "gemm", "p");
  REQUIRE(m);
  CHECK(m->tuned.params.at("mr") == 1);
  CHECK(m->source.find("user") != std::string::npos);
  // A more specific shipped entry still beats a vendor-wide user entry.
  Registry::global().set({db_with({{vendor, 1}}, "user"), db_with({{exact, 2}}, "shipped")});
  CHECK(looked_up(info) == 2);
  // Disabled: layers get nothing.
  Registry::global().set({db_with({{exact, 1}}, "user")});
  {
    ScopedEnabled off(false);
    CHECK_FALSE(find(info, "gemm", "p"));
  }
  CHECK(find(info, "gemm", "p"));
}

TEST_CASE("tuning: databases round-trip through JSON and bad files name themselves") {
  Database db = db_with({{{"cpu", "V", "N", "D", "L"}, 6}}, "x", "1024x1024x1024 b1 NN");
  db.entry_for({"cpu", "V", "N", "D", "L"}).kernels["conv"]["n1"] = Tuned{{{"algo", 1}}, 3.5, 7.25};
  Database back = Database::parse(db.dump(), "again");
  REQUIRE(back.entries().size() == 1);
  const Entry& e = back.entries()[0];
  CHECK(e.device.name == "N");
  CHECK(e.kernels.at("gemm").at("1024x1024x1024 b1 NN").params.at("mr") == 6);
  CHECK(e.kernels.at("conv").at("n1").ms == doctest::Approx(3.5));
  CHECK(e.kernels.at("conv").at("n1").default_ms == doctest::Approx(7.25));

  auto message = [](const std::string& text) {
    try {
      Database::parse(text, "my/file.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message("{not json").find("my/file.json") != std::string::npos);
  CHECK(message(R"({"format": "other", "entries": []})").find("cldl-tuning-1") != std::string::npos);
  CHECK(message(R"({"format": "cldl-tuning-1", "entries": [{"device": {}, "kernels": {"gemm": {"p": {}}}}]})")
            .find("my/file.json") != std::string::npos);

  const std::string dir = test::temp_dir("tuning-db");
  db.save_file(dir + "/sub/t.json");
  CHECK(Database::load_file(dir + "/sub/t.json").entries().size() == 1);
  CHECK(Database::load_file(dir + "/missing.json").entries().empty());
}

TEST_CASE("tuning: the shipped database parses and names this machine's PoCL device") {
  // Registry::global() parsed every embedded tuning/*.json at first use (a parse error would throw).
  size_t shipped = 0;
  for (const auto& db : Registry::global().databases())
    if (db.origin().rfind("shipped", 0) == 0) shipped += db.entries().size();
  CHECK(shipped >= 1);
}

TEST_CASE("tuning: invalid candidates are skipped before evaluation; exhaustive and sampled search") {
  Space space{{{"a", {1, 2, 3, 4}}, {"b", {1, 2, 3}}}};
  CHECK(space.size() == 12);
  auto invalid = [](const Params& p) { return p.at("a") * p.at("b") > 6 ? std::string("too big") : std::string(); };
  // Cost is minimal at a=3, b=2 among valid ones (a*b <= 6).
  size_t calls = 0;
  auto eval = [&](const Params& p) {
    ++calls;
    REQUIRE(invalid(p).empty());  // never asked to build an invalid configuration
    Evaluation ev;
    ev.ok = true;
    ev.ms = std::abs(double(p.at("a")) - 3) + std::abs(double(p.at("b")) - 2) + 1;
    ev.out = {1.0f, 2.0f};
    return ev;
  };
  SearchOptions so;
  so.budget_s = 100;
  SearchResult r = search(space, invalid, eval, {1.0f, 2.0f}, so);
  REQUIRE(r.best);
  CHECK(r.best->at("a") == 3);
  CHECK(r.best->at("b") == 2);
  CHECK(r.skipped_invalid == 3);  // (3,3), (4,2), (4,3)
  CHECK(r.evaluated == 9);
  CHECK(calls == 9);

  // Large space: random samples + local refinement still find the valley, skipping invalid ones.
  Space big{{{"a", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, {"b", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}}};
  auto invalid2 = [](const Params& p) { return p.at("a") == 9 ? std::string("a=9 invalid") : std::string(); };
  auto eval2 = [&](const Params& p) {
    REQUIRE(invalid2(p).empty());
    Evaluation ev;
    ev.ok = true;
    ev.ms = std::abs(double(p.at("a")) - 7) + std::abs(double(p.at("b")) - 4) + 1;
    ev.out = {0.0f};
    return ev;
  };
  so.exhaustive_limit = 10;
  so.random_samples = 10;
  r = search(big, invalid2, eval2, {0.0f}, so, Params{{"a", 1}, {"b", 1}});
  REQUIRE(r.best);
  CHECK(r.best->at("a") == 7);
  CHECK(r.best->at("b") == 4);
  CHECK(r.evaluated < 100);

  // Budget 0: nothing runs, the search reports that it was cut short.
  so.budget_s = 0;
  r = search(big, invalid2, eval2, {0.0f}, so);
  CHECK_FALSE(r.best);
  CHECK(r.interrupted);
}

TEST_CASE("tuning: op families reject what the device cannot run") {
  DeviceInfo info = fake_device();
  GemmConfig g;
  g.M = 100, g.N = 64, g.K = 32;
  CHECK(gemm_invalid(info, g, {{"mr", 4}, {"nr", 8}, {"mt", 1}, {"local", 64}}).empty());
  CHECK(gemm_invalid(info, g, {{"mr", 4}, {"nr", 8}, {"mt", 1}, {"local", 512}}).find("work-group") != std::string::npos);
  g.trans_b = true;
  CHECK_FALSE(gemm_invalid(info, g, {{"mr", 4}, {"nr", 8}, {"pack_b", 0}, {"local", 1}}).empty());

  Params clb{{"MWG", 64}, {"NWG", 64}, {"KWG", 32}, {"MDIMC", 16}, {"NDIMC", 16}, {"MDIMA", 16}, {"NDIMB", 16},
             {"KWI", 2},  {"VWM", 4},  {"VWN", 4},  {"SA", 1},     {"SB", 1}};
  CHECK(clblast_invalid(info, clb).empty());
  clb["MWG"] = 128, clb["NWG"] = 128;  // 32 KiB of local tiles = exactly the device's local memory
  CHECK(clblast_invalid(info, clb).empty());
  clb["KWG"] = 64;  // 64 KiB: too much local memory
  CHECK(clblast_invalid(info, clb).find("local memory") != std::string::npos);
  clb["KWG"] = 32, clb["MDIMC"] = 32, clb["NDIMC"] = 16;  // 512 work-items
  CHECK(clblast_invalid(info, clb).find("work-group") != std::string::npos);
  clb["MDIMC"] = 16, clb["VWM"] = 8;  // MWG 128 % (16 * 8) == 0 but MWG % (MDIMA 16 * 8) == 0 too; VWN 3 breaks
  clb["VWN"] = 3;
  CHECK_FALSE(clblast_invalid(info, clb).empty());

  AttentionConfig a;
  a.batch = 1, a.q_heads = 2, a.q_len = 8, a.kv_len = 8, a.head_size = 24;
  CHECK(attention_invalid(info, a, {{"block_m", 16}, {"block_n", 16}, {"vec", 8}, {"use_local", 1}}).empty());
  CHECK_FALSE(attention_invalid(info, a, {{"block_m", 16}, {"block_n", 16}, {"vec", 16}, {"use_local", 1}}).empty());
  CHECK_FALSE(attention_invalid(info, a, {{"block_m", 512}, {"block_n", 16}, {"vec", 8}, {"use_local", 1}}).empty());
  // 256 keys x 48 floats = 48 KiB of local tiles: too much with local tiles, fine without.
  CHECK_FALSE(attention_invalid(info, a, {{"block_m", 16}, {"block_n", 256}, {"vec", 8}, {"use_local", 1}}).empty());
  CHECK(attention_invalid(info, a, {{"block_m", 16}, {"block_n", 256}, {"vec", 8}, {"use_local", 0}}).empty());
  // The blocked kernel (the CPU form) is searched on CPUs only; its row groups are a dimension there.
  auto dim_values = [&](DeviceType type, const std::string& name) {
    DeviceInfo d = info;
    d.type = type;
    for (const auto& dim : attention_space(d, a).dims)
      if (dim.name == name) return dim.values;
    return std::vector<int64_t>{};
  };
  CHECK(dim_values(DeviceType::cpu, "blocked") == std::vector<int64_t>{0, 1});
  CHECK(dim_values(DeviceType::gpu, "blocked") == std::vector<int64_t>{0});
  CHECK(dim_values(DeviceType::cpu, "rg") == std::vector<int64_t>{1, 2});
  // The blocked kernel's register blocks: kb must divide bkv.
  CHECK(attention_invalid(info, a, {{"blocked", 1}, {"kb", 6}, {"cb", 4}, {"bkv", 24}}).empty());
  CHECK(attention_invalid(info, a, {{"blocked", 1}, {"kb", 6}, {"cb", 4}, {"bkv", 16}}).find("kb 6 does not divide bkv 16") !=
        std::string::npos);
  // The blocked kernel reads its three register blocks; the tile kernel its four knobs. block_q (the
  // earlier blocked kernel's rows per work-item, still in older databases) matters to neither.
  CHECK(attention_relevant({{"blocked", 1}, {"block_q", 4}, {"block_m", 8}, {"vec", 4}, {"kb", 6}}) ==
        Params{{"blocked", 1}, {"kb", 6}});
  CHECK(attention_relevant({{"blocked", 0}, {"block_q", 4}, {"block_m", 8}, {"rg", 2}, {"cb", 4}, {"bkv", 24}}) ==
        Params{{"blocked", 0}, {"block_m", 8}});
  CHECK(attention_relevant({{"blocked", 1}, {"kv_splits", 4}, {"kb", 6}}) == Params{{"blocked", 1}, {"kb", 6}});
  CHECK(attention_relevant({{"blocked", 0}, {"kv_splits", 4}, {"kb", 6}}) == Params{{"blocked", 0}, {"kv_splits", 4}});
  AttentionConfig applied;
  applied.vec = 2, applied.cb = 6;  // explicit: kept
  attention_apply({{"blocked", 1}, {"block_m", 8}, {"vec", 4}, {"rg", 2}, {"kb", 4}, {"cb", 8}, {"bkv", 48}, {"kv_splits", 8}},
                  applied);
  CHECK(applied.kv_splits == 8);
  CHECK(applied.blocked == 1);
  CHECK(applied.block_m == 8);
  CHECK(applied.vec == 2);
  CHECK(applied.rg == 2);
  CHECK(applied.kb == 4);
  CHECK(applied.cb == 6);
  CHECK(applied.bkv == 48);
}

TEST_CASE("tuning: a candidate with a wrong result is rejected however fast it is") {
  // A real GEMM search on the device; the candidate mr=3 has its output corrupted (one element) and
  // claims to be the fastest. The engine must reject it and keep a correct one.
  GemmConfig cfg;
  cfg.M = 23, cfg.N = 19, cfg.K = 31;
  cfg.provider = GemmProvider::own;
  HostTensor a = test::random_tensor(Shape{cfg.M, cfg.K}, 11), b = test::random_tensor(Shape{cfg.K, cfg.N}, 12);
  std::vector<float> want(size_t(cfg.M * cfg.N), 0.0f);
  ref::gemm(cfg, a.as<float>(), b.as<float>(), want.data(), nullptr);
  Tensor da = ctx().upload(a), db = ctx().upload(b);
  Tensor dc = ctx().alloc(Shape{cfg.M, cfg.N}, DType::f32);
  auto ec = ctx().exec();
  size_t built = 0;
  auto eval = [&](const Params& p) {
    GemmConfig k = cfg;
    gemm_apply(p, k.own);
    auto g = Gemm::create(ctx(), 0, k);
    ++built;
    g->run(da, db, dc, ec);
    ec.queue.finish();
    Evaluation ev;
    ev.ok = true;
    HostTensor c = ctx().download(dc);
    ev.out.assign(c.as<float>(), c.as<float>() + c.numel());
    ev.ms = 10.0 - double(p.at("mr"));
    if (p.at("mr") == 3) {
      ev.out[7] += 0.5f;  // the injected bug
      ev.ms = 0.001;
    }
    return ev;
  };
  Space space{{{"mr", {1, 2, 3}}, {"nr", {4}}, {"local", {1}}}};
  SearchOptions so;
  so.budget_s = 300;
  so.atol = 1e-4f;
  SearchResult r = search(space, [](const Params&) { return std::string(); }, eval, want, so);
  CHECK(built == 3);
  CHECK(r.rejected_wrong == 1);
  REQUIRE(r.best);
  CHECK(r.best->at("mr") == 2);
  CHECK(r.best_ms == doctest::Approx(8.0));
  REQUIRE_FALSE(r.log.empty());
  CHECK(r.log[0].find("wrong result") != std::string::npos);
  // A candidate that throws (a build failure) counts as failed, not as a result.
  auto throwing = [](const Params&) -> Evaluation { throw Error("build failed"); };
  r = search(space, [](const Params&) { return std::string(); }, throwing, want, so);
  CHECK(r.failed == 3);
  CHECK_FALSE(r.best);
}

TEST_CASE("tuning: conv and gemm layers use database entries and fall back on bad ones") {
  RegistryGuard guard;
  const DeviceInfo& info = ctx().device().info;
  // Conv: a 3x3 shape whose heuristic is Winograd on every device (over 64 output pixels: no small-plane
  // kernel on CPUs); the database says direct.
  ConvConfig cc;
  cc.input = Shape{1, 16, 9, 11};
  cc.weight = test::random_tensor(Shape{16, 16, 3, 3}, 21);
  cc.pads = {1, 1, 1, 1};
  REQUIRE(ConvOp::choose(cc) == ConvAlgo::winograd);
  Database db = Database::parse(R"({"format": "cldl-tuning-1", "entries": []})", "test");
  db.entry_for(device_key(info)).kernels["conv"][conv_problem(ConvOp::geometry(cc))] =
      Tuned{{{"algo", int64_t(ConvAlgo::direct)}}, 0, 0};
  Registry::global().set({db});
  CHECK(ConvOp::create(ctx(), 0, cc)->algo() == ConvAlgo::direct);
  {
    ScopedEnabled off(false);
    CHECK(ConvOp::create(ctx(), 0, cc)->algo() == ConvAlgo::winograd);
  }
  cc.algo = ConvAlgo::im2col_gemm;  // an explicit request wins over the database
  CHECK(ConvOp::create(ctx(), 0, cc)->algo() == ConvAlgo::im2col_gemm);
  cc.algo = ConvAlgo::automatic;
  // An entry naming an algorithm that does not apply (1x1-as-GEMM for a 3x3) is ignored.
  db.entry_for(device_key(info)).kernels["conv"][conv_problem(ConvOp::geometry(cc))] =
      Tuned{{{"algo", int64_t(ConvAlgo::gemm_1x1)}}, 0, 0};
  Registry::global().set({db});
  CHECK(ConvOp::create(ctx(), 0, cc)->algo() == ConvAlgo::winograd);

  // Gemm: an out-of-range tuned value is an error naming Gemm, not a silent fallback.
  GemmConfig g;
  g.M = 5, g.N = 6, g.K = 7;
  g.provider = GemmProvider::own;
  db.entry_for(device_key(info)).kernels["gemm"][gemm_problem(g)] = Tuned{{{"mr", 12}}, 0, 0};
  Registry::global().set({db});
  CHECK_THROWS_WITH_AS(Gemm::create(ctx(), 0, g), doctest::Contains("own.mr"), Error);
  // Fields the caller sets explicitly win over the database.
  db.entry_for(device_key(info)).kernels["gemm"][gemm_problem(g)] = Tuned{{{"mr", 3}, {"nr", 8}}, 0, 0};
  Registry::global().set({db});
  g.own.nr = 4;
  auto op = Gemm::create(ctx(), 0, g);
  CHECK(op->config().own.mr == 3);
  CHECK(op->config().own.nr == 4);
  CHECK(op->algorithm().find("(tuned)") != std::string::npos);
}

TEST_CASE("tuning: a short cldl tune on a small GEMM gives a correct configuration that Gemm then uses") {
  RegistryGuard guard;
  const std::string dir = test::temp_dir("tune-e2e");
  const std::string out = dir + "/db.json";
  std::string log;
  const int rc = test::run_command(std::string(CLDL_CLI_PATH) + " tune --device " + test::device_spec() +
                                       " --op gemm --shapes gemm:37x29x45 --budget 25 --out " + out,
                                   log);
  INFO(log);
  REQUIRE(rc == 0);
  CHECK(log.find("gemm 37x29x45 b1 NN") != std::string::npos);
  Database db = Database::load_file(out);
  REQUIRE(db.entries().size() == 1);
  CHECK(db.entries()[0].device.name == ctx().device().info.name);
  CHECK(db.entries()[0].tuning_seconds > 0);
  const Tuned t = db.entries()[0].kernels.at("gemm").at("37x29x45 b1 NN");
  CHECK(t.ms > 0);
  CHECK(t.default_ms > 0);

  Registry::global().set({db});
  GemmConfig cfg;
  cfg.M = 37, cfg.N = 29, cfg.K = 45;
  cfg.provider = GemmProvider::own;  // what cldl tune --op gemm tunes (automatic is CLBlast off CPUs)
  auto g = Gemm::create(ctx(), 0, cfg);
  CHECK(g->algorithm().find("(tuned)") != std::string::npos);
  CHECK(gemm_params(g->config().own) == t.params);
  HostTensor a = test::random_tensor(Shape{37, 45}, 31), b = test::random_tensor(Shape{45, 29}, 32);
  std::vector<float> want(37 * 29, 0.0f);
  ref::gemm(cfg, a.as<float>(), b.as<float>(), want.data(), nullptr);
  Tensor c = ctx().alloc(Shape{37, 29}, DType::f32);
  auto ec = ctx().exec();
  g->run(ctx().upload(a), ctx().upload(b), c, ec);
  HostTensor got = ctx().download(c);
  CLDL_CHECK_CLOSE(got.as<float>(), want.data(), want.size(), 1e-4, 1e-5 * 45);

  // --show lists the entry with its source for this device.
  const int rc2 = test::run_command("CLDL_TUNING_FILE=" + out + " " + std::string(CLDL_CLI_PATH) +
                                        " tune --device " + test::device_spec() + " --show",
                                    log);
  CHECK(rc2 == 0);
  CHECK(log.find("gemm 37x29x45 b1 NN") != std::string::npos);
  CHECK(log.find(out) != std::string::npos);
}

TEST_CASE("tuning: an rnn_step entry round-trips through JSON and fills only what the config leaves open") {
  RnnConfig c;
  c.cell = RnnCell::lstm;
  c.seq_length = 100, c.batch = 32, c.input_size = 512, c.hidden_size = 512;
  CHECK(rnn_problem(c) == "LSTM b32 i512 h512 d1");
  c.seq_length = 7;  // the sequence length is not part of the key
  CHECK(rnn_problem(c) == "LSTM b32 i512 h512 d1");
  c.cell = RnnCell::gru, c.linear_before_reset = true, c.direction = RnnDirection::bidirectional;
  CHECK(rnn_problem(c) == "GRU b32 i512 h512 d2 lbr");

  const Params p{{"layout", 2}, {"tw", 16}, {"mr", 2},       {"rg", 3},     {"kb", 32}, {"wg_m", 4},  {"wg_n", 2},
                 {"pmr", 8},    {"prg", 2}, {"proj_wg", 32}, {"local", 16}, {"bt", 1},  {"launch", 1}};
  Database db = Database::parse(R"({"format": "cldl-tuning-1", "entries": []})", "x");
  db.entry_for({"cpu", "V", "N", "D", "*"}).kernels["rnn_step"]["LSTM b32 i512 h512 d1"] = Tuned{p, 12.5, 20.25};
  Database back = Database::parse(db.dump(), "again");
  REQUIRE(back.entries().size() == 1);
  const Tuned& t = back.entries()[0].kernels.at("rnn_step").at("LSTM b32 i512 h512 d1");
  CHECK(t.params == p);
  CHECK(t.ms == doctest::Approx(12.5));
  CHECK(t.default_ms == doctest::Approx(20.25));

  RnnKernelParams k;
  k.mr = 4;  // explicit: kept
  rnn_apply(t.params, k);
  CHECK(k.layout == 2);
  CHECK(k.tw == 16);
  CHECK(k.mr == 4);
  CHECK(k.rg == 3);
  CHECK(k.kb == 32);
  CHECK(k.wg_m == 4);
  CHECK(k.wg_n == 2);
  CHECK(k.pmr == 8);
  CHECK(k.prg == 2);
  CHECK(k.proj_wg == 32);
  CHECK(k.local == 16);
  CHECK(k.bt == 1);
  CHECK(k.launch == 1);
  CHECK(rnn_params(k, 32) == Params{{"layout", 2},
                                    {"tw", 16},
                                    {"mr", 4},
                                    {"rg", 3},
                                    {"kb", 32},
                                    {"wg_m", 4},
                                    {"wg_n", 2},
                                    {"pmr", 8},
                                    {"prg", 2},
                                    {"proj_wg", 32},
                                    {"local", 16},
                                    {"bt", 1},
                                    {"launch", 1}});
  k.mr = 0;  // auto: the heuristic's rows for the batch
  CHECK(rnn_params(k, 1).at("mr") == 1);
  CHECK(rnn_params(k, 5).at("mr") == 2);
  CHECK(rnn_params(k, 32).at("mr") == 4);

  // Validity before anything is built; knobs of the other layout do not make kernels differ.
  const DeviceInfo info = fake_device();  // max work-group 256
  RnnConfig l;
  l.cell = RnnCell::lstm, l.seq_length = 10, l.batch = 3, l.input_size = 9, l.hidden_size = 20;
  CHECK(rnn_invalid(info, l, {{"layout", 2}, {"mr", 2}, {"wg_m", 8}, {"wg_n", 8}, {"proj_wg", 16}}).empty());
  CHECK(rnn_invalid(info, l, {{"layout", 2}, {"mr", 2}, {"wg_m", 16}, {"wg_n", 32}, {"proj_wg", 16}})
            .find("work-group") != std::string::npos);
  l.batch = 1;
  CHECK(rnn_invalid(info, l, {{"layout", 2}, {"mr", 2}, {"wg_m", 1}, {"wg_n", 1}}).find("batch") != std::string::npos);
  CHECK(rnn_invalid(info, l, {{"layout", 0}, {"local", 512}}).find("work-group") != std::string::npos);
  // A last row group wholly past the batch (3 rows: rg 2 of 2 rows is fine, rg 3 is not; 0 = auto).
  l.batch = 3;
  CHECK(rnn_invalid(info, l, {{"layout", 2}, {"mr", 2}, {"rg", 2}}).empty());
  CHECK(rnn_invalid(info, l, {{"layout", 2}, {"mr", 2}, {"rg", 3}}) == "rg 3 of 2 rows for a batch of 3");
  CHECK(rnn_invalid(info, l, {{"layout", 2}, {"mr", 2}, {"rg", 0}}).empty());
  // All steps in one launch has no work-groups of tiles: their sizes do not make kernels differ.
  CHECK(rnn_relevant(l, {{"layout", 2}, {"launch", 2}, {"wg_m", 4}, {"wg_n", 2}, {"kb", 32}}) ==
        Params{{"layout", 2}, {"launch", 2}, {"kb", 32}});
  CHECK(rnn_relevant(l, {{"layout", 2}, {"launch", 1}, {"wg_m", 4}, {"wg_n", 2}}).count("wg_m") == 1);
  CHECK(rnn_relevant(l, {{"layout", 0}, {"launch", 2}, {"local", 8}}) == Params{{"layout", 0}, {"local", 8}});
  l.batch = 1;
  RnnConfig gru = l;
  gru.cell = RnnCell::gru;
  CHECK_FALSE(rnn_invalid(info, gru, {{"layout", 2}}).empty());
  CHECK(rnn_space(info, gru).dims[0].values == std::vector<int64_t>{0, 1});
  // Tile width 16 is searched only where the device prefers float16 (and first: the heuristic's choice).
  auto tw_values = [&](uint32_t preferred) {
    DeviceInfo d = info;
    d.preferred_vector_float = preferred;
    for (const auto& dim : rnn_space(d, l).dims)
      if (dim.name == "tw") return dim.values;
    return std::vector<int64_t>{};
  };
  CHECK(tw_values(16) == std::vector<int64_t>{16, 8});
  CHECK(tw_values(8) == std::vector<int64_t>{8});
  CHECK(tw_values(1) == std::vector<int64_t>{8});
  l.batch = 3;
  // Rows layout: the tile knobs do not matter; tiles: wg_m clamped to the 2 row groups of 3 rows / mr 2,
  // wg_n to the 3 tiles of 20 units.
  // rg to the 2 row groups, prg to the 8 projection row groups of 30 rows / pmr 4.
  CHECK(rnn_relevant(
            l, {{"layout", 0}, {"mr", 2}, {"rg", 2}, {"kb", 32}, {"wg_m", 4}, {"prg", 2}, {"local", 16}, {"bt", 2}}) ==
        Params{{"layout", 0}, {"local", 16}, {"bt", 2}});
  CHECK(rnn_relevant(l, {{"layout", 2},
                         {"mr", 2},
                         {"rg", 4},
                         {"kb", 32},
                         {"wg_m", 16},
                         {"wg_n", 8},
                         {"pmr", 4},
                         {"prg", 8},
                         {"proj_wg", 4},
                         {"local", 16}}) == Params{{"layout", 2},
                                                   {"mr", 2},
                                                   {"rg", 2},
                                                   {"kb", 32},
                                                   {"wg_m", 2},
                                                   {"wg_n", 3},
                                                   {"pmr", 4},
                                                   {"prg", 8},
                                                   {"proj_wg", 4}});
}

TEST_CASE("tuning: an rnn_step entry changes the LSTM step kernel; the environment overrides win") {
  RegistryGuard guard;
  const DeviceInfo& info = ctx().device().info;
  const RnnCase c = rnn_case(RnnCell::lstm, 5, 3, 7, 13, 41);
  const std::string key = rnn_problem(c.cfg);
  // The device heuristic, database off.
  RnnKernelParams heuristic;
  {
    ScopedEnabled off(false);
    auto l = RnnLayer::create(ctx(), 0, c.cfg, c.w);
    heuristic = l->kernel_params();
    CHECK_FALSE(l->kernel_params_tuned());
    CHECK(l->algorithm().find("(tuned)") == std::string::npos);
  }
  CHECK(heuristic.layout == (info.type == DeviceType::gpu ? 1 : 2));
  CHECK(heuristic.mr == 0);  // by the batch of each call

  // An entry choosing the other kind of kernel: the row layout, 16-unit work-groups, 1 item per work-item.
  const int other = heuristic.layout == 2 ? 0 : 2;
  Database db = Database::parse(R"({"format": "cldl-tuning-1", "entries": []})", "test db");
  db.entry_for(device_key(info)).kernels["rnn_step"][key] =
      Tuned{{{"layout", other}, {"mr", 1}, {"wg_m", 2}, {"wg_n", 2}, {"pmr", 2}, {"proj_wg", 4}, {"local", 16}, {"bt", 1}}, 0, 0};
  Registry::global().set({db});
  {
    auto l = run_rnn_checked(c);  // same numbers as the reference with the database's kernel
    CHECK(l->kernel_params_tuned());
    CHECK(l->kernel_params().layout == other);
    CHECK(l->kernel_params().local == 16);
    CHECK(l->kernel_params().bt == 1);
    CHECK(l->kernel_params().mr == 1);
    CHECK(l->algorithm().find(other == 0 ? "weights in rows" : "gate-interleaved tiles") != std::string::npos);
    CHECK(l->algorithm().find("(tuned)") != std::string::npos);
  }
  // Explicit settings in the config win over the database.
  {
    RnnCase e = c;
    e.cfg.kernel.layout = heuristic.layout;
    auto l = run_rnn_checked(e);
    CHECK(l->kernel_params().layout == heuristic.layout);
  }
  // Other shapes have no entry: heuristic.
  {
    RnnCase d = rnn_case(RnnCell::lstm, 5, 4, 7, 13, 42);
    auto l = RnnLayer::create(ctx(), 0, d.cfg, d.w);
    CHECK_FALSE(l->kernel_params_tuned());
    CHECK(l->kernel_params().layout == heuristic.layout);
  }
  // The environment wins over the database.
  {
    ScopedEnv layout("CLDL_RNN_WEIGHT_LAYOUT", "tiles");
    ScopedEnv mr("CLDL_RNN_MR", "4");
    auto l = run_rnn_checked(c);
    CHECK(l->kernel_params().layout == 2);
    CHECK(l->kernel_params().mr == 4);
    CHECK(l->algorithm().find("4 batch rows") != std::string::npos);
  }
  {
    ScopedEnv layout("CLDL_RNN_WEIGHT_LAYOUT", "kmajor");
    auto l = run_rnn_checked(c);
    CHECK(l->kernel_params().layout == 1);
    CHECK(l->kernel_params().local == 16);  // the database still supplies what the environment leaves
  }
  // Tiles from the database with every tile knob off its default; the result still matches.
  db.entry_for(device_key(info)).kernels["rnn_step"][key] =
      Tuned{{{"layout", 2}, {"mr", 2}, {"wg_m", 1}, {"wg_n", 4}, {"pmr", 8}, {"proj_wg", 2}}, 0, 0};
  Registry::global().set({db});
  {
    auto l = run_rnn_checked(c);
    CHECK(l->kernel_params().layout == 2);
    CHECK(l->kernel_params().wg_n == 4);
    CHECK(l->kernel_params().pmr == 8);
    CHECK(l->algorithm().find("2 batch rows") != std::string::npos);
  }
  // A bad value in the database is an error naming the op, the entry and the knob.
  db.entry_for(device_key(info)).kernels["rnn_step"][key] = Tuned{{{"layout", 2}, {"mr", 3}}, 0, 0};
  Registry::global().set({db});
  std::string message;
  try {
    RnnLayer::create(ctx(), 0, c.cfg, c.w);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("LSTM") != std::string::npos);
  CHECK(message.find("rnn_step [LSTM b3 i7 h13 d1]") != std::string::npos);
  CHECK(message.find("kernel.mr") != std::string::npos);
  RnnCase bad = c;
  bad.cfg.kernel.bt = 3;
  CHECK_THROWS_WITH_AS(RnnLayer::validate(bad.cfg), doctest::Contains("kernel.bt"), Error);
  Registry::global().set({});
  {
    ScopedEnv mr("CLDL_RNN_MR", "3");
    CHECK_THROWS_WITH_AS(RnnLayer::create(ctx(), 0, c.cfg, c.w), doctest::Contains("CLDL_RNN_MR"), Error);
  }
}

TEST_CASE("tuning: a short cldl tune over an RNN shape gives an entry the layer uses, matching the reference") {
  RegistryGuard guard;
  const std::string dir = test::temp_dir("tune-rnn");
  const std::string out = dir + "/db.json";
  std::string log;
  const int rc = test::run_command(std::string(CLDL_CLI_PATH) + " tune --device " + test::device_spec() +
                                       " --op rnn --shapes rnn:6,3,10,13 "
                                       "--budget 30 --out " +
                                       out,
                                   log);
  INFO(log);
  REQUIRE(rc == 0);
  CHECK(log.find("rnn LSTM b3 i10 h13 d1 (T 6)") != std::string::npos);
  Database db = Database::load_file(out);
  REQUIRE(db.entries().size() == 1);
  const Tuned t = db.entries()[0].kernels.at("rnn_step").at("LSTM b3 i10 h13 d1");
  CHECK(t.ms > 0);
  CHECK(t.default_ms > 0);
  for (const char* k : {"layout", "mr", "rg", "kb", "wg_m", "wg_n", "pmr", "prg", "proj_wg", "local", "bt"})
    CHECK(t.params.count(k) == 1);

  Registry::global().set({db});
  const RnnCase c = rnn_case(RnnCell::lstm, 6, 3, 10, 13, 51);
  auto l = run_rnn_checked(c);
  CHECK(l->kernel_params_tuned());
  CHECK(rnn_params(l->kernel_params(), 3) == t.params);

  // --show lists the entry with its source.
  const int rc2 = test::run_command("CLDL_TUNING_FILE=" + out + " " + std::string(CLDL_CLI_PATH) + " tune --device " +
                                        test::device_spec() + " --show",
                                    log);
  CHECK(rc2 == 0);
  CHECK(log.find("rnn_step LSTM b3 i10 h13 d1") != std::string::npos);
  // The environment overrides would make every candidate the same: refused.
  const int rc3 =
      test::run_command("CLDL_RNN_MR=2 " + std::string(CLDL_CLI_PATH) + " tune --device " + test::device_spec() +
                            " --op rnn --shapes rnn:6,3,10,13 --budget 5 --out " + out,
                        log);
  CHECK(rc3 != 0);
  CHECK(log.find("CLDL_RNN_MR") != std::string::npos);
}

TEST_CASE("tuning: cldl tune --model times a convolution with a fused residual Add and MaxPool without them") {
  // y = MaxPool2x2(Relu(Conv3x3(r) + r)), r = Relu(x): the Add and the pool join the Conv in the model; the tuner
  // times the bare convolution (the database keys the geometry), so every candidate runs.
  RegistryGuard guard;
  const std::string dir = test::temp_dir("tune-model");
  const std::string model = dir + "/res.onnx", out = dir + "/db.json";
  {
    graph::GraphBuilder gb("res", 13);
    auto r = gb.relu(gb.input("x", DType::f32, Shape{1, 8, 12, 10}));
    auto c = gb.conv(r, gb.constant("w", test::random_tensor(Shape{8, 8, 3, 3}, 3)), {}, {1, 1}, {1, 1, 1, 1});
    gb.output(gb.max_pool(gb.relu(gb.add(c, r)), {2, 2}, {2, 2}), "y");
    graph::export_onnx_file(gb.build(), model);
  }
  std::string log;
  const int rc = test::run_command(std::string(CLDL_CLI_PATH) + " tune --device " + test::device_spec() +
                                       " --op conv --model " + model + " --budget 30 --out " + out,
                                   log);
  INFO(log);
  REQUIRE(rc == 0);
  CHECK(log.find("failed:") == std::string::npos);
  Database db = Database::load_file(out);
  REQUIRE(db.entries().size() == 1);
  CHECK(db.entries()[0].kernels.at("conv").count("n1 c8 8x12x10 k3x3 s1x1 d1x1 p1,1,1,1 g1") == 1);
}
