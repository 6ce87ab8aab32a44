// A plan made by a Model that has planned other signatures before (and evicted them) is the plan made from
// scratch for that signature: prepare() on a fresh import with those dims bound, and a fresh load with
// them fixed. Same nodes (names, ops, inputs, outputs,
// algorithms), the same shape for every value, the same folded constants, the same memory plan, and the
// same output bytes. Whatever planning keeps from one signature to the next (models/model.cpp) must not
// change a plan: this is what catches it.
#include <cstring>
#include <random>
#include <tuple>

#include "models/const_fold.hpp"
#include "models/model.hpp"
#include "models/onnx_import.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

using Dims = std::map<std::string, int64_t>;

// Inputs for one signature: token ids below 100 (the test encoders' vocabulary), masks of ones with the
// tail of each row masked out, other inputs random.
std::map<std::string, HostTensor> make_inputs(const Graph& g, const Dims& dims, std::mt19937& rng) {
  std::map<std::string, HostTensor> feed;
  for (auto& in : g.inputs) {
    Shape s;
    for (size_t i = 0; i < in.shape.dims.size(); ++i)
      s.dims.push_back(in.shape.dims[i] >= 0 ? in.shape.dims[i] : dims.at(in.shape.symbols.at(i)));
    HostTensor t(in.dtype, s);
    if (in.dtype == DType::i64) {
      auto v = t.span<int64_t>();
      const bool mask = in.name.find("mask") != std::string::npos;
      const int64_t cols = s.dims.back();
      for (size_t k = 0; k < v.size(); ++k)
        v[k] = mask ? int64_t(int64_t(k) % cols < 1 + int64_t(k / size_t(cols)) % cols) : int64_t(rng() % 100);
    } else {
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (auto& x : t.span<float>()) x = u(rng);
    }
    feed[in.name] = std::move(t);
  }
  return feed;
}

std::string node_line(const Node& n) {
  std::string s = n.name + " " + n.domain + ":" + n.op_type + " (";
  for (auto& i : n.inputs) s += i + ",";
  s += ") -> (";
  for (auto& o : n.outputs) s += o + ",";
  s += ") attrs";
  for (auto& [k, v] : n.attrs) s += " " + k;
  return s;
}

void check_same_plan(const CompiledModel& reused, const CompiledModel& fresh) {
  const Graph &a = reused.graph(), &b = fresh.graph();
  REQUIRE(a.nodes.size() == b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    CAPTURE(i);
    CHECK(node_line(a.nodes[i]) == node_line(b.nodes[i]));
    for (auto& o : a.nodes[i].outputs) {
      if (o.empty()) continue;
      CAPTURE(o);
      REQUIRE(a.values.count(o));
      REQUIRE(b.values.count(o));
      CHECK(a.values.at(o).shape.str() == b.values.at(o).shape.str());
      CHECK(a.values.at(o).dtype == b.values.at(o).dtype);
    }
  }
  CHECK(reused.describe() == fresh.describe());  // device, queue and algorithm of each node
  // Constants: the plan's folded shape values and the model's weights, with the same bytes.
  REQUIRE(a.initializers.size() == b.initializers.size());
  for (auto ia = a.initializers.begin(), ib = b.initializers.begin(); ia != a.initializers.end(); ++ia, ++ib) {
    CAPTURE(ia->first);
    REQUIRE(ia->first == ib->first);
    REQUIRE(ia->second.shape() == ib->second.shape());
    REQUIRE(ia->second.bytes() == ib->second.bytes());
    CHECK(std::memcmp(ia->second.data(), ib->second.data(), ia->second.bytes()) == 0);
  }
  const MemoryPlan &pa = reused.plan(), &pb = fresh.plan();
  CHECK(pa.arena_bytes == pb.arena_bytes);
  CHECK(pa.total_bytes == pb.total_bytes);
  REQUIRE(pa.slots.size() == pb.slots.size());
  for (auto sa = pa.slots.begin(), sb = pb.slots.begin(); sa != pa.slots.end(); ++sa, ++sb) {
    CAPTURE(sa->first);
    CHECK(sa->first == sb->first);
    CHECK(sa->second.offset == sb->second.offset);
    CHECK(sa->second.bytes == sb->second.bytes);
  }
  CHECK(pa.view_root == pb.view_root);
}

// Runs `signatures` in order through one Model with a plan cache of 2 (so signatures met again are planned
// again after eviction) and compares each plan and its outputs with a fresh load of that signature.
void check_reuse(const std::string& file, const std::vector<Dims>& signatures) {
  const std::string path = std::string(CLDL_SOURCE_DIR) + "/tests/data/dynamic/" + file;
  ModelOptions mo;
  mo.plan_cache = 2;
  auto m = load_model(test::shared_ctx(), path, mo);
  REQUIRE(m->preplanned() == nullptr);
  auto s = m->session();
  std::mt19937 rng(11);
  size_t misses = 0;
  for (auto& dims : signatures) {
    std::string what;
    for (auto& [k, v] : dims) what += fmt::format("{}={} ", k, v);
    CAPTURE(what);
    auto feed = make_inputs(m->graph(), dims, rng);
    auto out = s->run(feed);
    misses = m->plan_cache_stats().misses;
    const CompiledModel* reused = s->last_plan();
    REQUIRE(reused);

    // From scratch without a Model: the one-shot passes on a fresh import with the dims bound, then what
    // Model::make_plan does after them (device folding, compile).
    Graph g = import_onnx_file(path);
    PrepareOptions po;
    po.dims = dims;
    prepare(g, po);
    CompileOptions co;
    fold_constants_on_device(test::shared_ctx(), g, co);
    auto scratch = CompiledModel::compile(test::shared_ctx(), std::move(g), co);
    check_same_plan(*reused, *scratch);
    // And a fresh Model with these dims fixed (planned at load, as a new process would).
    ModelOptions fixed;
    fixed.prepare.dims = dims;
    auto f = load_model(test::shared_ctx(), path, fixed);
    REQUIRE(f->preplanned());
    check_same_plan(*reused, *f->preplanned());
    auto want = scratch->session()->run(feed);
    REQUIRE(out.size() == want.size());
    for (auto& [name, t] : want) {
      CAPTURE(name);
      const HostTensor& got = out.at(name);
      REQUIRE(got.shape() == t.shape());
      REQUIRE(got.bytes() == t.bytes());
      CHECK(std::memcmp(got.data(), t.data(), t.bytes()) == 0);  // the same kernels on the same bytes
    }
  }
  CHECK(misses == signatures.size() - 1);  // one repeat while still cached, one after its eviction
}

}  // namespace

TEST_SUITE("plan reuse") {
  TEST_CASE("a plan after other signatures equals the plan from scratch: BERT-style encoder") {
    // Batch 1, odd sequence lengths, a length of 1; [2, 7] again while cached (a hit), [3, 13] again
    // after its eviction (planned anew).
    std::vector<Dims> sigs;
    for (auto [b, s] : std::vector<std::pair<int64_t, int64_t>>{{2, 7}, {1, 1}, {2, 7}, {3, 13}, {1, 33}, {4, 5},
                                                                 {3, 13}, {1, 40}})
      sigs.push_back({{"batch", b}, {"sequence", s}});
    SUBCASE("opset 14") { check_reuse("bert_opset14.onnx", sigs); }
    SUBCASE("opset 11") { check_reuse("bert_opset11.onnx", sigs); }
  }

  TEST_CASE("a plan after other signatures equals the plan from scratch: CNN with dynamic image size") {
    std::vector<Dims> sigs;
    for (auto [b, h, w] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {1, 32, 32}, {2, 9, 17}, {1, 32, 32}, {1, 49, 8}, {3, 23, 31}, {1, 32, 32}})
      sigs.push_back({{"batch", b}, {"height", h}, {"width", w}});
    check_reuse("cnn.onnx", sigs);
  }

  TEST_CASE("shape inference's value table: inputs and initializers interleaved by name") {
    // infer_shapes enters the initializers in name order next to each other (a hinted insertion): names
    // that sort before, between and after the inputs' must each get their own dtype and shape.
    Graph g;
    g.opsets[""] = 14;
    g.inputs.push_back(ValueInfo{"m_in", DType::f32, ValueShape(Shape{2, 3})});
    g.inputs.push_back(ValueInfo{"p_in", DType::i64, ValueShape(Shape{5})});
    const std::vector<std::tuple<std::string, DType, Shape>> inits = {
        {"a_w", DType::f32, Shape{3}}, {"n_w", DType::i64, Shape{2, 1}}, {"o_w", DType::f32, Shape{1, 3}},
        {"z_w", DType::i32, Shape{7}}, {"m_in0", DType::f32, Shape{}}};
    for (auto& [name, dt, shape] : inits) g.initializers[name] = HostTensor(dt, shape);
    Node add;
    add.name = "add";
    add.op_type = "Add";
    add.inputs = {"m_in", "o_w"};
    add.outputs = {"y"};
    g.nodes.push_back(add);
    g.outputs.push_back(ValueInfo{"y", DType::f32, ValueShape{}});
    infer_shapes(g, true);
    CHECK(g.values.size() == 2 + inits.size() + 1);
    for (auto& [name, dt, shape] : inits) {
      INFO(name);
      REQUIRE(g.values.count(name));
      CHECK(g.values.at(name).name == name);
      CHECK(g.values.at(name).dtype == dt);
      CHECK(g.values.at(name).shape.to_shape() == shape);
    }
    CHECK(g.values.at("m_in").shape.to_shape() == Shape{2, 3});
    CHECK(g.values.at("p_in").dtype == DType::i64);
    CHECK(g.values.at("y").shape.to_shape() == Shape{2, 3});
  }
}
