// Explicit cross-device placement (CompileOptions::placement): rule matching (names, globs, op:TYPE,
// last rule wins) and its errors; the memory plan's per-device arenas and dedicated buffers; and (suite
// multi-device, two PoCL devices) models split over two devices against the C++ reference, PyTorch's
// stored outputs (models/zoo) and the same model on one device: a branchy graph with a view and a shared
// constant crossing devices, repeated runs, two sessions on two threads, the device-side API, the
// profile's per-device tracks and migrations, the CLI's --place, and bad placements.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "models/model.hpp"
#include "models/npy.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/two_devices.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

const std::string kZoo = std::string(CLDL_SOURCE_DIR) + "/models/zoo/";

HostTensor rnd(Shape s, uint32_t seed) { return test::random_tensor(std::move(s), seed); }

double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  REQUIRE(a.shape() == b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(double(a.as<float>()[i]) - double(b.as<float>()[i])));
  return m;
}

// x [5, 7] -> four branches relu(x W_i) (W_0 is shared with branch 1: one constant read on both
// devices), the last one through a tanh, b3 = tanh(relu(x W_3)); s = b0 + b1, t = b2 + b3; y = s * t;
// z = reshape(b1, [6, 5]) V (a view crossing devices); b3 is an output too. Branches 1 and 3 and `s`
// run on device 1 (rules_for(on_one)).
// The rules name nodes that element-wise fusion would merge into one (Add, Add, Mul, Tanh): while a
// Branchy lives, CLDL_FUSION=0 keeps them apart (fused nodes are placed by their own names, like any node).
struct FusionOff {
  FusionOff() { ::setenv("CLDL_FUSION", "0", 1); }
  ~FusionOff() { ::unsetenv("CLDL_FUSION"); }
  FusionOff(const FusionOff&) = delete;
  FusionOff& operator=(const FusionOff&) = delete;
};

struct Branchy {
  std::shared_ptr<FusionOff> fusion_off = std::make_shared<FusionOff>();
  Graph g;
  std::vector<std::string> on_one;  // node names (before the passes) placed on device 1
};

Branchy branchy() {
  GraphBuilder b("branchy");
  auto x = b.input("x", DType::f32, Shape{5, 7});
  auto w0 = b.constant("w0", rnd({7, 6}, 11));
  auto w2 = b.constant("w2", rnd({7, 6}, 12));
  auto w3 = b.constant("w3", rnd({7, 6}, 13));
  auto v = b.constant("v", rnd({5, 4}, 14));
  Branchy r;
  auto br0 = b.relu(b.matmul(x, w0));
  auto m1 = b.matmul(x, w0);
  auto br1 = b.relu(m1);
  auto br2 = b.relu(b.matmul(x, w2));
  auto m3 = b.matmul(x, w3);
  auto br3 = b.relu(m3);
  auto u3 = b.op1("Tanh", {br3});  // br3 (or the fused MatMul+Relu) is read on device 1 only
  auto s = b.add(br0, br1);
  auto t = b.add(br2, u3);
  r.on_one = {m1.name, br1.name, m3.name, br3.name, u3.name, s.name};
  b.output(b.op1("Mul", {s, t}), "y");
  b.output(b.matmul(b.reshape(br1, {6, 5}), v), "z");
  b.output(u3, "b3");
  r.g = b.build();
  return r;
}

// The same on the host (double accumulation through gemm_ref).
std::map<std::string, std::vector<float>> branchy_ref(const Graph& g, const HostTensor& x) {
  auto w = [&](const char* n) { return g.initializers.at(n).as<float>(); };
  auto relu = [](std::vector<float> a) {
    for (auto& e : a) e = std::max(e, 0.0f);
    return a;
  };
  auto b0 = relu(test::gemm_ref(x.as<float>(), w("w0"), 5, 6, 7));
  auto b1 = b0;
  auto b2 = relu(test::gemm_ref(x.as<float>(), w("w2"), 5, 6, 7));
  auto b3 = relu(test::gemm_ref(x.as<float>(), w("w3"), 5, 6, 7));
  for (auto& e : b3) e = std::tanh(e);
  std::vector<float> y(30);
  for (size_t i = 0; i < 30; ++i) y[i] = (b0[i] + b1[i]) * (b2[i] + b3[i]);
  return {{"y", y}, {"z", test::gemm_ref(b1.data(), w("v"), 6, 4, 5)}, {"b3", b3}};
}

// Rules for the nodes of the prepared graph that come from `names` (a fused Relu is gone).
std::vector<std::pair<std::string, int>> rules_for(const Graph& prepared, const std::vector<std::string>& names,
                                                   int d) {
  std::vector<std::pair<std::string, int>> r;
  for (auto& n : prepared.nodes)
    if (std::find(names.begin(), names.end(), n.name) != names.end()) r.push_back({n.name, d});
  return r;
}

void check_branchy(const std::map<std::string, HostTensor>& got,
                   const std::map<std::string, std::vector<float>>& want) {
  for (auto& [name, w] : want) {
    CAPTURE(name);
    REQUIRE(got.count(name));
    REQUIRE(size_t(got.at(name).numel()) == w.size());
    CLDL_CHECK_CLOSE(got.at(name).as<float>(), w.data(), w.size(), 1e-4, 1e-5);
  }
}

using test::two_devices;

}  // namespace

TEST_SUITE("placement") {
  TEST_CASE("placement rules: names, globs, op types, the last match wins; errors name the rule") {
    GraphBuilder b("g");
    auto x = b.input("x", DType::f32, Shape{2, 3});
    auto a = b.relu(x);                  // Relu_0
    auto c = b.op1("Sigmoid", {a});      // Sigmoid_1
    auto d = b.op1("Tanh", {c});         // Tanh_2
    b.output(b.add(d, b.relu(c)), "y");  // Relu_3, Add_4, Identity_5
    Graph g = b.build();
    REQUIRE(g.nodes.size() == 6);
    auto place = [&](std::vector<std::pair<std::string, int>> rules, int device = 0, size_t count = 3) {
      CompileOptions o;
      o.device = device;
      o.placement = std::move(rules);
      return resolve_placement(g, o, count);
    };
    CHECK(place({}) == std::vector<int>{0, 0, 0, 0, 0, 0});
    CHECK(place({}, 2) == std::vector<int>{2, 2, 2, 2, 2, 2});
    CHECK(place({{"Tanh_2", 1}}) == std::vector<int>{0, 0, 1, 0, 0, 0});
    CHECK(place({{"op:Relu", 2}}) == std::vector<int>{2, 0, 0, 2, 0, 0});
    CHECK(place({{"*", 1}, {"Sig*", 2}, {"?dd_4", 0}}) == std::vector<int>{1, 2, 1, 1, 0, 1});
    CHECK(place({{"Sig*", 2}, {"*", 1}}) == std::vector<int>{1, 1, 1, 1, 1, 1});  // last wins
    CHECK(place({{"*_*", 1}}, 2) == std::vector<int>{1, 1, 1, 1, 1, 1});
    CHECK(place({{"Re*u_3", 1}, {"*a*", 2}}) == std::vector<int>{0, 0, 2, 1, 0, 0});  // Tanh_2 has an 'a'

    auto err = [&](std::vector<std::pair<std::string, int>> rules, size_t count = 2) {
      return test::error_of([&] { place(std::move(rules), 0, count); });
    };
    CHECK(err({{"Relu_0", 5}}).find("placement rule 'Relu_0=5': device 5 does not exist (the context has 2 devices)") !=
          std::string::npos);
    CHECK(err({{"Relu_0", 1}}, 1).find("the context has 1 device; give several") != std::string::npos);
    CHECK(err({{"Relu_0", -1}}).find("device -1 does not exist") != std::string::npos);
    auto unknown = err({{"conv1", 1}});
    CHECK(unknown.find("placement rule 'conv1=1' matches no node of graph 'g'") != std::string::npos);
    CHECK(unknown.find("Relu_0, Sigmoid_1") != std::string::npos);  // lists the nodes there are
    auto op = err({{"op:Conv", 1}});
    CHECK(op.find("'op:Conv=1' matches no op type") != std::string::npos);
    CHECK(op.find("Add, Identity, Relu, Sigmoid, Tanh") != std::string::npos);
    CHECK(err({{"x*", 1}}).find("matches no node") != std::string::npos);
    CHECK(err({{"", 1}}).find("empty node pattern") != std::string::npos);
    CHECK(test::error_of([&] { place({}, 3, 2); }).find("compile: device 3 does not exist") != std::string::npos);

    // A node's _cldl_device attribute (kDeviceAttr: set by passes) places it unless a rule matches it.
    g.nodes[1].attrs[kDeviceAttr] = int64_t(2);
    CHECK(place({}) == std::vector<int>{0, 2, 0, 0, 0, 0});
    CHECK(place({}, 1) == std::vector<int>{1, 2, 1, 1, 1, 1});
    CHECK(place({{"Sig*", 1}}) == std::vector<int>{0, 1, 0, 0, 0, 0});
    CHECK(test::error_of([&] { place({}, 0, 2); })
              .find("node 'Sigmoid_1' (Sigmoid): placed on device 2 (_cldl_device), which does not exist (the "
                    "context has 2 devices)") != std::string::npos);
    g.nodes[1].attrs.erase(kDeviceAttr);

    CHECK(parse_placement_rule("conv1=1") == std::pair<std::string, int>{"conv1", 1});
    CHECK(parse_placement_rule("/a=b/c=0") == std::pair<std::string, int>{"/a=b/c", 0});  // the last '=' splits
    CHECK(parse_placement_rule("op:LSTM=12") == std::pair<std::string, int>{"op:LSTM", 12});
    for (const char* bad : {"conv1", "=1", "conv1=", "conv1=x", "conv1=-1", "conv1=1.5"}) {
      CAPTURE(bad);
      CHECK(test::error_of([&] { parse_placement_rule(bad); }).find(fmt::format("placement '{}'", bad)) !=
            std::string::npos);
    }
  }

  TEST_CASE("memory plan: an arena per device; a value read on another device gets its own buffer") {
    Branchy br = branchy();
    prepare(br.g);
    auto rules = rules_for(br.g, br.on_one, 1);
    REQUIRE(rules.size() >= 3);
    CompileOptions o;
    o.placement = rules;
    auto dev = resolve_placement(br.g, o, 2);
    auto plan = plan_memory(br.g, {}, 256, dev);
    REQUIRE(plan.device_arena_bytes.size() == 2);
    CHECK(plan.device_arena_bytes[0] > 0);
    CHECK(plan.device_arena_bytes[1] > 0);
    std::map<std::string, size_t> producer;
    for (size_t i = 0; i < br.g.nodes.size(); ++i)
      for (auto& v : br.g.nodes[i].outputs) producer[v] = i;
    size_t dedicated = 0, sum = 0;
    for (auto& [v, s] : plan.slots) {
      CAPTURE(v);
      CHECK(s.device == dev[producer.at(v)]);
      bool crosses = false;  // read (directly or through a view) on another device
      for (size_t i = 0; i < br.g.nodes.size(); ++i)
        for (auto& in : br.g.nodes[i].inputs) {
          auto r = plan.view_root.count(in) ? plan.view_root.at(in) : in;
          if (r == v && dev[i] != s.device) crosses = true;
        }
      CHECK(s.dedicated == crosses);
      dedicated += s.dedicated;
      if (s.dedicated) sum += s.bytes;
      for (auto& [u, t] : plan.slots) {  // arena neighbours never overlap while both alive
        if (u == v || s.dedicated || t.dedicated || s.device != t.device) continue;
        bool alive_together = s.first <= t.last && t.first <= s.last;
        bool overlap = s.offset < t.offset + t.bytes && t.offset < s.offset + s.bytes;
        CHECK_FALSE((alive_together && overlap));
      }
      if (!s.dedicated) CHECK(s.offset + s.bytes <= plan.device_arena_bytes[size_t(s.device)]);
    }
    CHECK(dedicated >= 3);  // b1 (also through the reshape view), s, b3
    CHECK(plan.arena_bytes == plan.device_arena_bytes[0] + plan.device_arena_bytes[1] + sum);
    // Without placement: one arena, nothing dedicated (the plan of before).
    auto one = plan_memory(br.g);
    CHECK(one.device_arena_bytes.size() == 1);
    CHECK(one.arena_bytes == one.device_arena_bytes[0]);
    for (auto& [v, s] : one.slots) CHECK_FALSE(s.dedicated);
  }

  TEST_CASE("placement on a one-device context: every node on device 0 by rule, and device 1 is refused") {
    Branchy br = branchy();
    auto ctx = test::shared_ctx();
    auto x = rnd({5, 7}, 21);
    auto m = test::compile_graph(br.g, {}, CompileOptions{.placement = {{"*", 0}}});
    check_branchy(m->session()->run({{"x", x}}), branchy_ref(m->graph(), x));
    for (auto& line : m->describe()) CHECK(line.find("device 0 queue") != std::string::npos);
    if (ctx->device_count() == 1) {
      auto e = test::error_of([&] { test::compile_graph(br.g, {}, CompileOptions{.placement = {{"op:MatMul", 1}}}); });
      CHECK(e.find("placement rule 'op:MatMul=1': device 1 does not exist (the context has 1 device") !=
            std::string::npos);
    }
  }
}

TEST_SUITE("multi-device") {
  TEST_CASE("placement: a branchy graph over two devices equals the C++ reference; runs, threads, device API") {
    auto two = two_devices();
    if (!two) return;
    Branchy br = branchy();
    prepare(br.g);
    auto rules = rules_for(br.g, br.on_one, 1);
    auto m = CompiledModel::compile(two, br.g, CompileOptions{.placement = rules});
    std::set<int> devices(m->node_devices().begin(), m->node_devices().end());
    CHECK(devices == std::set<int>{0, 1});
    int described_on_one = 0;
    for (auto& line : m->describe()) described_on_one += line.find(" device 1 queue ") != std::string::npos;
    CHECK(described_on_one == int(rules.size()));
    // The same graph on one device of the same context, for an exact comparison.
    auto single = CompiledModel::compile(two, br.g, CompileOptions{});
    auto s = m->session();
    auto s1 = single->session();
    for (uint32_t it = 0; it < 4; ++it) {  // new data every run: nothing stale may survive
      CAPTURE(it);
      auto x = rnd({5, 7}, 100 + it);
      auto got = s->run({{"x", x}});
      check_branchy(got, branchy_ref(m->graph(), x));
      auto one = s1->run({{"x", x}});
      for (auto& [name, t] : one) CHECK(max_abs_diff(got.at(name), t) < 1e-6);
    }
    // Two sessions of the split model from two threads.
    std::atomic<int> bad{0};
    auto worker = [&](uint32_t seed) {
      auto ss = m->session();
      for (uint32_t it = 0; it < 12; ++it) {
        auto x = rnd({5, 7}, seed + it);
        auto got = ss->run({{"x", x}});
        auto want = branchy_ref(m->graph(), x);
        for (auto& [name, w] : want) {
          auto c = test::compare(got.at(name).as<float>(), w.data(), w.size(), 1e-4, 1e-5);
          if (c.mismatches) ++bad;
        }
      }
    };
    std::thread t1(worker, 1000), t2(worker, 2000);
    t1.join();
    t2.join();
    CHECK(bad == 0);
    // The device-side API: write_input, enqueue (returns an event), read_output.
    for (uint32_t it = 0; it < 3; ++it) {
      auto x = rnd({5, 7}, 300 + it);
      s->write_input("x", x);
      cl::Event done = s->enqueue();
      check(done.wait(), "clWaitForEvents", "test");
      std::map<std::string, HostTensor> got;
      for (const char* o : {"y", "z", "b3"}) got[o] = s->read_output(o);
      check_branchy(got, branchy_ref(m->graph(), x));
    }
  }

  TEST_CASE("placement: the profile shows each command's device, and the migrations between them") {
    auto two = two_devices();
    if (!two) return;
    Branchy br = branchy();
    prepare(br.g);
    auto m = CompiledModel::compile(two, br.g,
                                    CompileOptions{.profiling = true, .placement = rules_for(br.g, br.on_one, 1)});
    auto s = m->session();
    auto x = rnd({5, 7}, 5);
    Profiler prof;
    check_branchy(s->run({{"x", x}}, &prof), branchy_ref(m->graph(), x));
    auto recs = prof.records();
    int on_one = 0, migrations = 0;
    for (auto& r : recs) {
      on_one += r.queue.rfind("device 1 queue", 0) == 0;
      migrations += r.name.find("migrate to device") != std::string::npos;
    }
    CHECK(on_one >= 3);
    CHECK(migrations >= 3);  // x to device 1; b1 / s / b3 back to device 0 (and w0 is a per-device constant)
    CHECK(prof.chrome_trace_json().find("\"device 1 queue 0\"") != std::string::npos);
  }

  TEST_CASE("placement: digits CNN split over two devices gives PyTorch's logits, batches 450, 7 and 1") {
    auto two = two_devices();
    if (!two) return;
    const std::string dir = kZoo + "digits_cnn/";
    HostTensor x = read_npy(dir + "x_test.npy"), want = read_npy(dir + "ref_logits.npy");
    // conv1 (its pool fused: conv-maxpool) on 0, conv2 and its pool on 1, flatten (a view) and the first dense on
    // 0, the last on 1: values cross 0 -> 1 -> 0 -> 1, one of them through the Flatten view.
    LoadOptions lo;
    lo.prepare.dims["N"] = x.shape()[0];
    lo.compile.placement = {{"/features/features.4/*", 1}, {"/classifier/classifier.3/Gemm", 1}};
    auto m = load_onnx_model(two, dir + "model.onnx", lo);
    std::vector<int> cross;
    for (size_t i = 0; i < m->graph().nodes.size(); ++i) cross.push_back(m->node_devices()[i]);
    CHECK(std::count(cross.begin(), cross.end(), 1) >= 2);
    HostTensor got = m->session()->run({{"image", x}}).at("logits");
    double err = max_abs_diff(got, want);
    MESSAGE("digits CNN over two devices: max abs error vs PyTorch " << err);
    CHECK(err < 1e-4);
    LoadOptions lone = lo;
    lone.compile.placement.clear();
    auto single = load_onnx_model(two, dir + "model.onnx", lone);
    CHECK(max_abs_diff(got, single->session()->run({{"image", x}}).at("logits")) < 1e-6);
    for (int64_t b : {7, 1}) {
      CAPTURE(b);
      LoadOptions lb = lo;
      lb.prepare.dims["N"] = b;
      auto mb = load_onnx_model(two, dir + "model.onnx", lb);
      auto sb = mb->session();
      for (int64_t start : {5, 200, 5}) {  // other images in between: no stale data
        CAPTURE(start);
        HostTensor part(DType::f32, Shape{b, 1, 8, 8});
        std::memcpy(part.data(), x.as<float>() + 64 * start, part.bytes());
        HostTensor out = sb->run({{"image", part}}).at("logits");
        const size_t count = size_t(b) * 10;
        CLDL_CHECK_CLOSE(out.as<float>(), want.as<float>() + 10 * start, count, 1e-4, 1e-4);
      }
    }
  }

  TEST_CASE("placement: char LSTM with its second LSTM layer and head on device 1 gives PyTorch's outputs") {
    auto two = two_devices();
    if (!two) return;
    const std::string dir = kZoo + "char_lstm/";
    HostTensor tokens = read_npy(dir + "ref_tokens.npy"), want = read_npy(dir + "ref_logits.npy"),
               want_h = read_npy(dir + "ref_h_out.npy"), want_c = read_npy(dir + "ref_c_out.npy");
    HostTensor zeros(DType::f32, want_h.shape());  // [layers, 1, hidden]
    std::memset(zeros.data(), 0, zeros.bytes());
    for (auto rules : {std::vector<std::pair<std::string, int>>{{"/lstm/LSTM_1", 1}, {"/head/*", 1}},
                       std::vector<std::pair<std::string, int>>{{"op:LSTM", 1}}}) {
      CAPTURE(rules[0].first);
      LoadOptions lo;
      lo.prepare.dims["B"] = 1;
      lo.prepare.dims["T"] = tokens.shape()[1];
      lo.compile.placement = rules;
      auto m = load_onnx_model(two, dir + "model.onnx", lo);
      auto s = m->session();
      for (int rep = 0; rep < 2; ++rep) {
        auto out = s->run({{"tokens", tokens}, {"h_in", zeros}, {"c_in", zeros}});
        CHECK(max_abs_diff(out.at("logits"), want) < 2e-4);
        CHECK(max_abs_diff(out.at("h_out"), want_h) < 1e-5);
        CHECK(max_abs_diff(out.at("c_out"), want_c) < 1e-4);
      }
    }
  }

  TEST_CASE("placement: bad placements on two devices name the rule; cldl run --place --stats") {
    auto two = two_devices();
    if (!two) return;
    Branchy br = branchy();
    prepare(br.g);
    auto e = test::error_of([&] {
      CompiledModel::compile(two, br.g, CompileOptions{.placement = {{"op:MatMul", 5}}});
    });
    CHECK(e.find("placement rule 'op:MatMul=5': device 5 does not exist (the context has 2 devices)") !=
          std::string::npos);
    e = test::error_of([&] { CompiledModel::compile(two, br.g, CompileOptions{.placement = {{"conv9", 1}}}); });
    CHECK(e.find("placement rule 'conv9=1' matches no node of graph 'branchy'") != std::string::npos);

    std::string cli = CLDL_CLI_PATH, out;
    const std::string model = kZoo + "digits_cnn/model.onnx";
    REQUIRE(test::run_command(cli + " run " + model + " --dim N=3 --random -d cpu:0,cpu:1 --place 'op:Gemm=1' --stats",
                              out) == 0);
    INFO(out);
    CHECK(out.find("/classifier/classifier.3/Gemm") != std::string::npos);
    size_t gemm_line = out.find("/classifier/classifier.1/Gemm");
    REQUIRE(gemm_line != std::string::npos);
    CHECK(out.substr(gemm_line, out.find('\n', gemm_line) - gemm_line).find("device 1 queue") != std::string::npos);
    CHECK(test::run_command(cli + " run " + model + " --dim N=3 --random -d cpu:0,cpu:1 --place nosuch=1", out) == 1);
    CHECK(out.find("placement rule 'nosuch=1' matches no node") != std::string::npos);
    CHECK(test::run_command(cli + " run " + model + " --dim N=3 --random -d cpu:0 --place op:Conv=1", out) == 1);
    CHECK(out.find("the context has 1 device; give several") != std::string::npos);
  }
}
