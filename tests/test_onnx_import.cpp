// ONNX import / export, external data, tensor files (.npy, .pb), the `cldl run` / `cldl profile` CLI and
// bad input: truncated or corrupted files, old opsets, unknown ops, wrong inputs. Models are built in
// C++ (builder + exporter), so no Python is needed.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/model.hpp"
#include "models/npy.hpp"
#include "tests/fuzz/fuzz_load.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;
using cldl::test::gemm_ref;
namespace fs = std::filesystem;

namespace {
HostTensor rnd(Shape s, uint32_t seed) { return test::random_tensor(std::move(s), seed); }

// x[3,13] -> Flatten(Unsqueeze) -> Gemm(w [6,13], transB, bias [6]) -> y [3,6]; w2 unused by default.
Graph small_model(const HostTensor& w, const HostTensor& bias, int64_t opset = 17) {
  GraphBuilder b("small", opset);
  auto x = b.input("x", DType::f32, Shape{3, 13});
  auto u = b.op1("Unsqueeze", {x, b.constant("axes", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{1}))});
  auto f = b.flatten(u, 1);
  b.output(b.dense(f, b.constant("w", w), b.constant("bias", bias)), "y");
  return b.build();
}

std::vector<float> small_ref(const HostTensor& x, const HostTensor& w, const HostTensor& bias) {
  auto y = gemm_ref(x.as<float>(), w.as<float>(), 3, 6, 13, false, true);
  for (int m = 0; m < 3; ++m)
    for (int n = 0; n < 6; ++n) y[size_t(m * 6 + n)] += bias.as<float>()[n];
  return y;
}

std::string cli() { return CLDL_CLI_PATH; }
}  // namespace

TEST_SUITE("onnx_import") {
  TEST_CASE("export -> import round trip, also with external data") {
    auto w = rnd({6, 13}, 1), bias = rnd({6}, 2), x = rnd({3, 13}, 3);
    std::string dir = test::temp_dir("onnx");
    for (bool external : {false, true}) {
      CAPTURE(external);
      std::string path = dir + (external ? "/ext.onnx" : "/plain.onnx");
      export_onnx_file(small_model(w, bias), path, external);
      CHECK(fs::exists(path + ".data") == external);
      Graph g = import_onnx_file(path);
      CHECK(g.opset() == 17);
      CHECK(g.initializers.size() == 3);
      CHECK(g.nodes.size() == 4);
      auto m = load_onnx_model(test::shared_ctx(), path);
      auto out = m->session()->run({{"x", x}});
      auto want = small_ref(x, w, bias);
      CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), 1e-4, 1e-5);
    }
    // External data file shorter than the tensors: a clear error naming the tensor.
    fs::resize_file(dir + "/ext.onnx.data", 100);
    auto msg = test::error_of([&] { import_onnx_file(dir + "/ext.onnx"); });
    CHECK(msg.find("external data") != std::string::npos);
    fs::remove(dir + "/ext.onnx.data");
    msg = test::error_of([&] { import_onnx_file(dir + "/ext.onnx"); });
    CHECK(msg.find("cannot open external data file") != std::string::npos);
    fs::remove_all(dir);
  }

  TEST_CASE(".npy and .pb tensor files round trip every dtype") {
    std::string dir = test::temp_dir("npy");
    for (DType t : {DType::f32, DType::f16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
      for (Shape s : {Shape{}, Shape{5}, Shape{2, 3, 7}}) {
        CAPTURE(to_string(t));
        std::vector<double> v(size_t(s.numel()));
        for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 7) % (t == DType::boolean ? 2 : 5));
        HostTensor h = from_doubles(t, s, v);
        write_npy(h, dir + "/a.npy");
        write_tensor_pb(h, dir + "/a.pb", "a");
        for (auto& f : {dir + "/a.npy", dir + "/a.pb"}) {
          HostTensor r = read_tensor_file(f);
          CHECK(r.dtype() == t);
          CHECK(r.shape() == s);
          CHECK(to_doubles(r) == v);
        }
      }
    }
    test::write_bytes(dir + "/bad.npy", "\x93NUMPY\x01\x00\x10\x00{'descr': '<c8'");
    CHECK(test::error_of([&] { read_npy(dir + "/bad.npy"); }).find("bad.npy") != std::string::npos);
    fs::remove_all(dir);
  }

  TEST_CASE("truncated and corrupted model files give clear errors, never a crash") {
    std::string bytes = export_onnx(small_model(rnd({6, 13}, 1), rnd({6}, 2)));
    auto msg = test::error_of([&] { import_onnx_bytes(bytes.substr(0, bytes.size() / 2), ".", "model"); });
    CHECK(msg.find("model: ") == 0);
    CHECK(test::error_of([&] { import_onnx_bytes("", ".", "model"); }).find("empty") != std::string::npos);
    CHECK(test::error_of([&] { import_onnx_bytes("hello, not onnx", ".", "model"); }).find("model") == 0);
    // Bounded mutation run: every result is a loaded graph or a cldl::Error.
    std::mt19937 rng(7);
    int errors = 0;
    for (int i = 0; i < 300; ++i) {
      std::string m = bytes;
      for (int k = 0; k < 1 + int(rng() % 4); ++k) m[rng() % m.size()] = char(rng());
      if (rng() % 4 == 0) m.resize(rng() % m.size());
      try {
        Graph g = import_onnx_bytes(m, ".", "model");
        prepare(g);
      } catch (const Error&) {
        ++errors;
      }
    }
    CHECK(errors > 0);
  }

  TEST_CASE("old opsets, unknown ops and unknown inputs are named") {
    auto w = rnd({6, 13}, 1), bias = rnd({6}, 2);
    Graph g = small_model(w, bias, 9);
    g = import_onnx_bytes(export_onnx(g), ".", "model");
    auto msg = test::error_of([&] { prepare(g); });
    // Unsqueeze from opset 9 takes axes as an attribute: the importer follows the old form.
    CHECK(msg.find("axes") != std::string::npos);
    GraphBuilder b("old", 17);
    b.output(b.op1("Gelu", {b.input("x", DType::f32, Shape{2, 2})}), "z");
    Graph g2 = import_onnx_bytes(export_onnx(b.build()), ".", "model");
    msg = test::error_of([&] { prepare(g2); });
    CHECK(msg.find("unsupported opset 17 of op 'Gelu'") != std::string::npos);
    CHECK(msg.find("Gelu_0") != std::string::npos);
    // MatMul's versions differ only in dtypes: opset 9 loads.
    GraphBuilder b9("old9", 9);
    b9.output(b9.matmul(b9.input("x", DType::f32, Shape{2, 2}), b9.input("y", DType::f32, Shape{2, 2})), "z");
    Graph g3 = import_onnx_bytes(export_onnx(b9.build()), ".", "model");
    CHECK(test::error_of([&] { prepare(g3); }).empty());
  }

  TEST_CASE("cldl run / profile: outputs, bench JSON, trace, and non-zero exit on bad input") {
    std::string dir = test::temp_dir("cli");
    auto w = rnd({6, 13}, 1), bias = rnd({6}, 2), x = rnd({3, 13}, 3);
    export_onnx_file(small_model(w, bias), dir + "/m.onnx");
    write_npy(x, dir + "/x.npy");
    std::string out;
    int rc = test::run_command(cli() + " run " + dir + "/m.onnx --input x=" + dir + "/x.npy --output " + dir +
                                   "/out --stats --runs 3",
                               out);
    INFO(out);
    REQUIRE(rc == 0);
    CHECK(out.find("output y") != std::string::npos);
    CHECK(out.find("[3, 6]") != std::string::npos);
    CHECK(out.find("steady state") != std::string::npos);
    CHECK(out.find("memory plan: peak") != std::string::npos);
    HostTensor y = read_npy(dir + "/out/y.npy");
    auto want = small_ref(x, w, bias);
    CLDL_CHECK_CLOSE(y.as<float>(), want.data(), want.size(), 1e-4, 1e-5);

    rc = test::run_command(cli() + " run " + dir + "/m.onnx --random --bench --json --runs 4", out);
    REQUIRE(rc == 0);
    auto j = nlohmann::json::parse(out.substr(out.find('{')));
    CHECK(j["runs"] == 4);
    CHECK(j["min_ms"].get<double>() <= j["median_ms"].get<double>());
    CHECK(j["median_ms"].get<double>() <= j["max_ms"].get<double>());
    CHECK(j.contains("device"));

    rc = test::run_command(cli() + " profile " + dir + "/m.onnx --random --trace " + dir + "/t.json", out);
    REQUIRE(rc == 0);
    auto trace = nlohmann::json::parse(std::ifstream(dir + "/t.json"));
    std::string names;
    for (auto& e : trace["traceEvents"]) names += e.value("name", "") + ";";
    CHECK(names.find("Gemm_2/gemm") != std::string::npos);
    rc = test::run_command(cli() + " profile " + dir + "/m.onnx --random --runs 3", out);
    REQUIRE(rc == 0);
    CHECK(out.find("(minimum of 3 runs each)") != std::string::npos);
    CHECK(out.find("Gemm_2/gemm") != std::string::npos);

    // Bad inputs: non-zero exit and a one-line reason.
    write_npy(rnd({13, 3}, 4), dir + "/wrong.npy");
    rc = test::run_command(cli() + " run " + dir + "/m.onnx --input x=" + dir + "/wrong.npy", out);
    CHECK(rc != 0);
    CHECK(out.find("input 'x' dimension 0: expected 3 (shape [3, 13]), got 13 (shape [13, 3])") != std::string::npos);
    rc = test::run_command(cli() + " run " + dir + "/m.onnx", out);
    CHECK(rc != 0);
    CHECK(out.find("inputs not given") != std::string::npos);
    std::string bytes = export_onnx(small_model(w, bias));
    test::write_bytes(dir + "/trunc.onnx", bytes.substr(0, bytes.size() / 3));
    rc = test::run_command(cli() + " run " + dir + "/trunc.onnx --random", out);
    CHECK(rc != 0);
    CHECK(out.find("trunc.onnx") != std::string::npos);
    GraphBuilder b;
    b.output(b.op1("Frobnicate", {b.input("x", DType::f32, Shape{2})}), "y");
    export_onnx_file(b.build(), dir + "/unknown.onnx");
    rc = test::run_command(cli() + " run " + dir + "/unknown.onnx --random", out);
    CHECK(rc != 0);
    CHECK(out.find("unsupported op 'Frobnicate' (domain ai.onnx, opset 17)") != std::string::npos);
    fs::remove_all(dir);
  }

  TEST_CASE("cldl bench model.onnx: JSON latency; --random binds open symbolic dims to 1, a file's shape binds them too") {
    std::string dir = test::temp_dir("benchmodel");
    auto w = rnd({6, 13}, 1), bias = rnd({6}, 2), x = rnd({3, 13}, 3);
    export_onnx_file(small_model(w, bias), dir + "/m.onnx");
    write_npy(x, dir + "/x.npy");
    std::string out;
    int rc = test::run_command(cli() + " bench " + dir + "/m.onnx --input x=" + dir + "/x.npy --runs 5 --warmup 1 --json",
                               out);
    INFO(out);
    REQUIRE(rc == 0);
    auto j = nlohmann::json::parse(out.substr(out.find('{')));
    CHECK(j["runs"] == 5);
    CHECK(j["warmup"] == 1);
    CHECK(j["min_ms"].get<double>() > 0);
    CHECK(j["min_ms"].get<double>() <= j["median_ms"].get<double>());
    CHECK(j["median_ms"].get<double>() <= j["max_ms"].get<double>());
    CHECK(!j["device"].get<std::string>().empty());
    rc = test::run_command(cli() + " bench " + dir + "/m.onnx --random --runs 3", out);
    CHECK(rc == 0);
    CHECK(out.find("latency min") != std::string::npos);
    rc = test::run_command(cli() + " bench " + dir + "/m.onnx " + dir + "/m.onnx --random", out);
    CHECK(rc != 0);
    CHECK(out.find("one model at a time") != std::string::npos);
    // A folder named like a bench family: the bare name runs the family, ./NAME benches the folder's models.
    std::filesystem::create_directories(dir + "/fam/gemm");
    rc = test::run_command("cd " + dir + "/fam && " + cli() + " bench gemm --set shape=8x8x8 --set clblast=0 --runs 1 "
                           "--warmup 0 --no-compare --device " + test::device_spec(), out);
    CHECK(rc == 0);
    CHECK(out.find("8x8x8") != std::string::npos);
    rc = test::run_command("cd " + dir + "/fam && " + cli() + " bench ./gemm --device " + test::device_spec(), out);
    CHECK(rc != 0);
    CHECK(out.find("no .onnx file in the folder") != std::string::npos);

    // x [T, 13] with T symbolic: unbound without --random (named), 1 with it, a file's size with --input.
    GraphBuilder b("sym", 17);
    ValueShape vs;
    vs.dims = {-1, 13};
    vs.symbols = {"T", ""};
    auto xs = b.input("x", DType::f32, vs);
    b.output(b.dense(xs, b.constant("w", w), b.constant("bias", bias)), "y");
    export_onnx_file(b.build(), dir + "/sym.onnx");
    rc = test::run_command(cli() + " run " + dir + "/sym.onnx", out);
    CHECK(rc != 0);
    CHECK(out.find("--dim T=N") != std::string::npos);
    rc = test::run_command(cli() + " run " + dir + "/sym.onnx --random", out);
    CHECK(rc == 0);
    CHECK(out.find("T=1 (unbound, --random)") != std::string::npos);
    CHECK(out.find("[1, 6]") != std::string::npos);
    rc = test::run_command(cli() + " run " + dir + "/sym.onnx --random --dim T=4", out);
    CHECK(rc == 0);
    CHECK(out.find("unbound") == std::string::npos);
    CHECK(out.find("[4, 6]") != std::string::npos);
    rc = test::run_command(cli() + " run " + dir + "/sym.onnx --input x=" + dir + "/x.npy --output " + dir + "/o", out);
    CHECK(rc == 0);
    HostTensor y = read_npy(dir + "/o/y.npy");
    auto want = small_ref(x, w, bias);
    CLDL_CHECK_CLOSE(y.as<float>(), want.data(), want.size(), 1e-4, 1e-5);
    rc = test::run_command(cli() + " profile " + dir + "/sym.onnx --random", out);
    CHECK(rc == 0);
    CHECK(out.find("T=1 (unbound, --random)") != std::string::npos);
    rc = test::run_command(cli() + " bench " + dir + "/sym.onnx --random --json --runs 2", out);
    CHECK(rc == 0);
    CHECK(out.find("T=1 (unbound, --random)") != std::string::npos);

    // A folder: sym.onnx takes its shape from sym.json ([7, 13], so no "--random" binding), m.onnx (fixed
    // shapes, no spec) runs on random inputs, a truncated model and a malformed spec are listed with their
    // errors while the others still run, and the command fails at the end.
    std::string folder = dir + "/set";
    fs::create_directories(folder);
    fs::copy_file(dir + "/sym.onnx", folder + "/sym.onnx");
    fs::copy_file(dir + "/m.onnx", folder + "/m.onnx");
    fs::copy_file(dir + "/m.onnx", folder + "/spec_bad.onnx");
    test::write_bytes(folder + "/sym.json", R"({"inputs": {"x": ["float32", [7, 13]]}})");
    test::write_bytes(folder + "/spec_bad.json", R"({"inputs": {"x": "float32"}})");
    const std::string bytes = export_onnx(small_model(w, bias));
    test::write_bytes(folder + "/trunc.onnx", bytes.substr(0, bytes.size() / 3));
    rc = test::run_command(cli() + " bench " + folder + " --no-compare --json --runs 2 --warmup 0", out);
    CHECK(rc != 0);
    CHECK(out.find("unbound") == std::string::npos);
    std::map<std::string, nlohmann::json> rows;
    nlohmann::json summary;
    for (size_t at = 0; at < out.size();) {
      size_t end = out.find('\n', at);
      if (end == std::string::npos) end = out.size();
      const std::string line = out.substr(at, end - at);
      at = end + 1;
      if (line.empty() || line[0] != '{') continue;
      auto j = nlohmann::json::parse(line);
      if (j.contains("summary")) summary = j["summary"];
      else rows[fs::path(j["model"].get<std::string>()).filename().string()] = j;
    }
    REQUIRE(rows.size() == 4);
    CHECK(rows["m.onnx"]["median_ms"].get<double>() > 0);
    CHECK(rows["sym.onnx"]["median_ms"].get<double>() > 0);
    CHECK(rows["trunc.onnx"]["error"].get<std::string>().find("trunc.onnx") != std::string::npos);
    CHECK(rows["spec_bad.onnx"]["error"].get<std::string>().find("spec_bad.json: input 'x' should be [DTYPE, SHAPE]") !=
          std::string::npos);
    CHECK(summary["models"] == 4);
    CHECK(summary["failed"] == 2);
    CHECK(out.find("2 of 4 models failed") != std::string::npos);
    fs::remove_all(dir);
  }
}

TEST_SUITE("onnx_import") {
  TEST_CASE("inputs the fuzzer once broke the loader with load or fail cleanly (tests/fuzz/regressions)") {
    size_t seen = 0;
    for (auto& e : fs::directory_iterator(std::string(CLDL_SOURCE_DIR) + "/tests/fuzz/regressions")) {
      if (!e.is_regular_file() || e.path().filename() == "README.md") continue;
      CAPTURE(e.path().string());
      ++seen;
      std::ifstream f(e.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      try {
        fuzz::import_and_prepare(bytes);
      } catch (const Error& err) {
        CHECK(std::string(err.what()).size() > 0);  // a clean, explained rejection
      }
    }
    CHECK(seen > 0);
  }

  TEST_CASE("external data outside the model's folder is refused") {
    std::string dir = test::temp_dir("extpath");
    auto w = rnd({6, 13}, 1), bias = rnd({6}, 2);
    export_onnx_file(small_model(w, bias), dir + "/ext.onnx", true);
    std::string bytes;
    {
      std::ifstream f(dir + "/ext.onnx", std::ios::binary);
      bytes.assign((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    }
    const std::string loc = "ext.onnx.data";
    for (std::string bad : {"/etc/passw", "../x/ext.onnx"}) {  // same length: the protobuf stays valid
      std::string b = bytes;
      bad.resize(loc.size(), 'a');
      for (size_t p = b.find(loc); p != std::string::npos; p = b.find(loc, p + 1)) b.replace(p, loc.size(), bad);
      auto msg = test::error_of([&] { import_onnx_bytes(b, dir, "m"); });
      CHECK(msg.find("is not inside the model's folder") != std::string::npos);
    }
    fs::remove_all(dir);
  }
}
