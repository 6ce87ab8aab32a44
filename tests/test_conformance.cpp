// ONNX conformance data (../shared/conformance: onnx-node, onnx-node-more, onnx-legacy; read in place): load, run and compare every
// output; prints pass / fail / unsupported per op with totals. Fails on any FAIL and on any unsupported
// test of a claimed op. Inputs that a node needs at load (Reshape's shape, Range's bounds...) are bound
// from the test data, as a user binds fixed shape tensors (cldl run --input binds them the same way).
// CLDL_CONFORMANCE_VERBOSE=1 prints the reason of every unsupported test. CLDL_CONFORMANCE_DIR (at run time)
// reads the data from another folder.
// The same run gives docs/ops.md its conformance column (tests/support/ops_table.hpp): the last test case
// compares the table with the file, and CLDL_WRITE_OPS_TABLE=1 writes it.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>

#include "models/model.hpp"
#include "models/npy.hpp"
#include "models/op_registry.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/ops_table.hpp"

using namespace cldl;
using namespace cldl::graph;
namespace fs = std::filesystem;

namespace {

// Claimed ops: every op with an OpDef in the registry (each family's ops_*.cpp registers its own), so an
// op that is registered must pass all its tests, except the known gaps listed below with a reason.
std::set<std::string> claimed_ops() {
  std::set<std::string> s;
  // The ONNX domains the node suites test (INDEX.txt names ops without their domain): ai.onnx and the training
  // preview's optimizers; not the fused or vendor domains, whose op names may repeat an ai.onnx one.
  for (auto* d : registered_ops())
    if (d->domain.empty() || d->domain == "ai.onnx.preview.training") s.insert(d->type);
  return s;
}
// The conformance data: CLDL_CONFORMANCE_DIR when set, else ../shared/conformance beside the checkout.
fs::path conformance_dir() {
  const char* dir = std::getenv("CLDL_CONFORMANCE_DIR");
  return dir && *dir ? fs::path(dir) : fs::path(CLDL_CONFORMANCE_DIR);
}

// The suite folders, each with its INDEX.txt.
const char* const kSuites[] = {"onnx-node", "onnx-node-more", "onnx-legacy/pytorch-converted",
                               "onnx-legacy/pytorch-operator", "onnx-legacy/simple"};

// Tests of claimed ops that use what cldl does not model, with a tag (one word, which docs/ops.md shows beside
// the op's count) and the reason: one file per op family, tests/conformance_gaps/<family>.txt, each line
// "test_name  tag  reason" ('#' starts a comment).
struct Gap {
  std::string tag, reason;
};
std::map<std::string, Gap> load_known_gaps() {
  std::map<std::string, Gap> gaps;
  for (const auto& e : fs::directory_iterator(fs::path(CLDL_SOURCE_DIR) / "tests" / "conformance_gaps")) {
    std::ifstream f(e.path());
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      std::string name, tag, why;
      ls >> name >> tag >> std::ws;
      std::getline(ls, why);
      if (tag.empty() || why.empty())
        throw std::runtime_error("conformance gap without a tag and a reason in " + e.path().string() + ": " + line);
      gaps[name] = {tag, why};
    }
  }
  return gaps;
}
const std::map<std::string, Gap>& known_gaps() {
  static const std::map<std::string, Gap> gaps = load_known_gaps();
  return gaps;
}

// Tolerance per op family (fp32 kernels); folded host results and views are compared to 1e-6.
std::pair<double, double> tolerance(const std::string& op, DType out) {
  // The language-model ops compute f16 in fp32 and round once; the ONNX reference rounds to f16 after each
  // numpy step (SwiGLU: four roundings), so the two differ by a few f16 ulps (9.8e-4 relative each).
  if (op == "SwiGLU" || op == "CausalConvWithState" || op == "LinearAttention" || op == "FlexAttention") {
    if (out == DType::f16) return {4e-3, 1e-3};
    if (op == "LinearAttention" || op == "FlexAttention") return {1e-4, 1e-5};  // fp32 sums over steps / keys
  }
  if (op == "Gemm" || op == "MatMul") return {1e-4, 1e-5};
  if (op == "Conv" || op == "ConvTranspose" || op == "LSTM" || op == "GRU" || op == "RNN" || op == "Attention")
    return {1e-3, 1e-4};
  if (op == "Range") return {1e-3, 1e-3};  // covers f16
  // test_averagepool_2d_ceil_last_window_starts_on_pad stores its expected output rounded to 4 decimals
  // (0.1511 for 1.3595 / 9 = 0.151056).
  if (op == "AveragePool") return {5e-4, 1e-5};
  // test_roialign_aligned_* and test_gridsample_bicubic store theirs to 4 decimals as well (0.4664 for
  // 0.466421), from another implementation: the ONNX reference itself is up to 8.4e-5 off (0.972784 for 0.9727).
  if (op == "RoiAlign" || op == "GridSample") return {1e-5, 1e-4};
  return {1e-5, 1e-6};
}

// Ops whose outputs are random draws (the expected files hold numpy's): a test passes when dtype and
// shape match and every value is 0 or 1, 0 where the probability is 0 and 1 where it is 1. Their
// distributions are checked statistically in the ops' own suites (tests/test_random_ops.cpp).
bool random_output(const std::string& op) { return op == "Bernoulli"; }

enum class Outcome { pass, fail, unsupported };

struct Result {
  Outcome outcome;
  std::string message;
};

// Compares one output tensor with the expected one; "" when equal within the op's tolerance.
std::string compare(const std::string& name, const std::string& op, const HostTensor& got, const HostTensor& want,
                    const HostTensor* first_input) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return fmt::format("output '{}': got {} {}, want {} {}", name, to_string(got.dtype()), got.shape().str(),
                       to_string(want.dtype()), want.shape().str());
  auto a = to_doubles(got), b = to_doubles(want);
  if (random_output(op)) {
    auto p = to_doubles(*first_input);
    for (size_t k = 0; k < a.size(); ++k)
      if ((a[k] != 0 && a[k] != 1) || (p[k] == 0 && a[k] != 0) || (p[k] == 1 && a[k] != 1))
        return fmt::format("output '{}' element {}: got {} for probability {}", name, k, a[k], p[k]);
    return "";
  }
  auto [rtol, atol] = tolerance(op, want.dtype());
  for (size_t k = 0; k < a.size(); ++k) {
    bool same = a[k] == b[k] || (std::isnan(a[k]) && std::isnan(b[k]));  // also inf == inf
    if (!same && !(std::fabs(a[k] - b[k]) <= atol + rtol * std::fabs(b[k])))
      return fmt::format("output '{}' element {}: got {}, want {}", name, k, a[k], b[k]);
  }
  return "";
}

const char* kind_name(ModelValue::Kind k) {
  return k == ModelValue::Kind::tensor ? "a tensor" : k == ModelValue::Kind::sequence ? "a sequence" : "none";
}

Result run_one(const fs::path& dir, const std::string& op) {
  Graph g;
  std::map<std::string, ModelValue> feed;
  std::vector<ModelValue> expected;
  fs::path data = dir / "test_data_set_0";
  try {
    g = import_onnx_file((dir / "model.onnx").string());
    size_t count = 0;
    while (fs::exists(data / fmt::format("input_{}.pb", count))) ++count;
    if (count != g.inputs.size())
      return {Outcome::fail, fmt::format("{} input files for {} graph inputs", count, g.inputs.size())};
    for (size_t i = 0; i < count; ++i)
      feed[g.inputs[i].name] = read_value_pb((data / fmt::format("input_{}.pb", i)).string(), g.inputs[i]);
    for (size_t i = 0; fs::exists(data / fmt::format("output_{}.pb", i)); ++i) {
      if (i >= g.outputs.size()) return {Outcome::fail, "more output files than graph outputs"};
      expected.push_back(read_value_pb((data / fmt::format("output_{}.pb", i)).string(), g.outputs[i]));
    }
  } catch (const Error& e) {
    return {Outcome::unsupported, e.what()};
  }
  // As a user runs a model: loaded once, planned for the inputs' signature (inputs that decide shapes,
  // e.g. Reshape's shape, or an If's condition, join the signature by value).
  std::shared_ptr<Model> m;
  try {
    m = Model::create(test::shared_ctx(), std::move(g));
    m->plan(m->signature(feed));
  } catch (const Error& e) {
    return {Outcome::unsupported, e.what()};
  } catch (const std::exception& e) {  // anything but a cldl::Error at load is a bug: count it as a failure
    return {Outcome::fail, std::string("load threw a non-cldl exception: ") + e.what()};
  }
  try {
    auto out = m->session()->run_values(feed);
    const auto& outs = m->graph().outputs;
    if (outs.size() != expected.size()) return {Outcome::fail, "output count differs"};
    const HostTensor* first = feed.empty() ? nullptr : &feed.at(m->graph().inputs.at(0).name).tensor;
    for (size_t i = 0; i < outs.size(); ++i) {
      const ModelValue& got = out.at(outs[i].name);
      const ModelValue& want = expected[i];
      if (got.kind != want.kind)
        return {Outcome::fail, fmt::format("output '{}': got {}, want {}", outs[i].name, kind_name(got.kind),
                                           kind_name(want.kind))};
      std::string bad;
      if (got.kind == ModelValue::Kind::tensor) bad = compare(outs[i].name, op, got.tensor, want.tensor, first);
      if (got.kind == ModelValue::Kind::sequence) {
        if (got.items.size() != want.items.size())
          bad = fmt::format("output '{}': a sequence of {} tensors, want {}", outs[i].name, got.items.size(),
                            want.items.size());
        for (size_t k = 0; bad.empty() && k < got.items.size(); ++k)
          bad = compare(fmt::format("{}[{}]", outs[i].name, k), op, got.items[k], want.items[k], first);
      }
      if (!bad.empty()) return {Outcome::fail, bad};
    }
  } catch (const std::exception& e) {
    return {Outcome::fail, e.what()};
  }
  return {Outcome::pass, ""};
}

// One test of a suite folder as it ran.
struct TestRun {
  std::string name, op;  // op: as INDEX.txt names it ("Add+Gradient+Mul" for a model of several ops)
  Result result;
};

// Every test of one suite folder (INDEX.txt + test_x/ folders), run once per process: the suite's test case
// and the op table's read the same runs.
const std::vector<TestRun>& suite_runs(const fs::path& root) {
  static std::map<fs::path, std::vector<TestRun>> runs;
  if (auto it = runs.find(root); it != runs.end()) return it->second;
  REQUIRE_MESSAGE(fs::exists(root / "INDEX.txt"), "conformance data not found at " << root.string()
                  << " (../shared/conformance beside the checkout, or CLDL_CONFORMANCE_DIR)");
  std::map<std::string, std::string> op_of;  // folder -> op (from INDEX.txt)
  {
    std::ifstream idx(root / "INDEX.txt");
    std::string line;
    while (std::getline(idx, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      std::string folder, op;
      ls >> folder >> op;
      op_of[folder] = op;
    }
  }
  std::vector<fs::path> dirs;
  for (auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  std::vector<TestRun> r;
  for (auto& dir : dirs) {
    std::string name = dir.filename().string();
    std::string op = op_of.count(name) ? op_of[name] : "?";
    r.push_back({name, op, run_one(dir, op)});
  }
  return runs[root] = std::move(r);
}

// One suite folder's runs: prints the per-op table. With `all_must_pass` (the legacy model tests) every test
// must pass or be a listed gap; otherwise (the node suites) every test of a claimed op must.
void run_suite(const fs::path& root, bool all_must_pass) {
  struct Count { int pass = 0, fail = 0, unsupported = 0; };
  std::map<std::string, Count> by_op;
  std::vector<std::string> failures, claimed_unsupported, stale_gaps;
  const std::set<std::string> kClaimed = claimed_ops();
  const auto& runs = suite_runs(root);
  for (const TestRun& t : runs) {
    const Result& r = t.result;
    auto& c = by_op[t.op];
    if (r.outcome == Outcome::pass) {
      c.pass++;
      if (known_gaps().count(t.name)) stale_gaps.push_back(t.name);
    }
    else if (r.outcome == Outcome::fail) {
      c.fail++;
      failures.push_back(t.name + ": " + r.message);
    } else {
      c.unsupported++;
      if (std::getenv("CLDL_CONFORMANCE_VERBOSE")) MESSAGE("unsupported " << t.name << ": " << r.message);
      if ((all_must_pass || kClaimed.count(t.op)) && !known_gaps().count(t.name))
        claimed_unsupported.push_back(t.name + ": " + r.message);
    }
  }
  Count sum;
  std::string table = fmt::format("{}\n{:<24} {:>5} {:>5} {:>12}\n", root.string(), "op", "pass", "fail", "unsupported");
  for (auto& [op, c] : by_op) {
    table += fmt::format("{:<24} {:>5} {:>5} {:>12}{}\n", op, c.pass, c.fail, c.unsupported,
                         kClaimed.count(op) ? "  (claimed)" : "");
    sum.pass += c.pass, sum.fail += c.fail, sum.unsupported += c.unsupported;
  }
  table += fmt::format("{:<24} {:>5} {:>5} {:>12}   ({} tests)\n", "TOTAL", sum.pass, sum.fail, sum.unsupported,
                       runs.size());
  MESSAGE("\n" << table);
  for (auto& f : failures) MESSAGE("FAIL " << f);
  for (auto& f : claimed_unsupported) MESSAGE((all_must_pass ? "UNSUPPORTED " : "UNSUPPORTED (claimed op) ") << f);
  for (auto& f : stale_gaps) MESSAGE("PASSES, yet listed in tests/conformance_gaps: " << f);
  CHECK(failures.empty());
  CHECK(claimed_unsupported.empty());
  CHECK(stale_gaps.empty());
}

// Per op, the tests of every suite folder whose model uses it (each op of INDEX.txt's "A+B+C" once).
std::map<std::string, test::OpConformance> per_op_results() {
  std::map<std::string, test::OpConformance> r;
  for (const char* suite : kSuites)
    for (const TestRun& t : suite_runs(conformance_dir() / suite)) {
      std::set<std::string> ops;
      std::istringstream parts(t.op);
      for (std::string op; std::getline(parts, op, '+');) ops.insert(op);
      for (auto& op : ops) {
        auto& c = r[op];
        c.total++;
        if (t.result.outcome == Outcome::pass) {
          c.pass++;
          continue;
        }
        auto gap = known_gaps().find(t.name);
        c.not_passing[t.result.outcome == Outcome::fail ? "FAIL"
                      : gap != known_gaps().end()       ? gap->second.tag
                                                        : "unsupported"]++;
      }
    }
  return r;
}

// Whether the data is there; without it the op table's test is skipped, and says so (once per run).
bool conformance_absent() {
  for (const char* suite : kSuites)
    if (!fs::exists(conformance_dir() / suite / "INDEX.txt")) {
      std::fprintf(stderr,
                   "conformance data not found at %s: the test of docs/ops.md's conformance column is skipped\n",
                   (conformance_dir() / suite).string().c_str());
      return true;
    }
  return false;
}

}  // namespace

// CLDL_CONFORMANCE_DIR is ../shared/conformance: onnx-node and onnx-node-more (ONNX 1.23 node tests),
// onnx-legacy (model tests from older exporters, opsets 6-9). Each has its SOURCE.md.
TEST_SUITE("conformance") {
  TEST_CASE("ONNX backend node tests") { run_suite(conformance_dir() / "onnx-node", false); }
  TEST_CASE("ONNX backend node tests, more") { run_suite(conformance_dir() / "onnx-node-more", false); }
  TEST_CASE("ONNX legacy model tests") {
    for (const char* sub : {"pytorch-converted", "pytorch-operator", "simple"}) {
      CAPTURE(sub);
      run_suite(conformance_dir() / "onnx-legacy" / sub, true);
    }
  }
  // After the suites, whose runs it reads (run alone, it runs them).
  TEST_CASE("docs/ops.md is the op table with each op's conformance results" *
            doctest::description("skipped where the conformance data is absent") *
            doctest::skip(conformance_absent())) {
    const std::string table = test::ops_table(per_op_results());
    const fs::path file = fs::path(CLDL_SOURCE_DIR) / "docs" / "ops.md";
    if (const char* w = std::getenv("CLDL_WRITE_OPS_TABLE"); w && *w && std::string(w) != "0") {
      std::ofstream(file, std::ios::binary) << table;
      MESSAGE("wrote " << file.string());
    }
    std::ifstream f(file, std::ios::binary);
    std::stringstream committed;
    committed << f.rdbuf();
    INFO("regenerate it: " << std::string(test::kWriteOpsTable));
    std::istringstream want(table), have(committed.str());
    std::string w, h;
    for (int line = 1; std::getline(want, w); ++line)
      if (!std::getline(have, h) || h != w) {
        CHECK_MESSAGE(false, "docs/ops.md line " << line << " is '" << h << "', the table's is '" << w << "'");
        break;
      }
    CHECK(committed.str() == table);
    CHECK(table.find("| Softmax | ai.onnx | 1+ | softmax | ") != std::string::npos);
  }
}
