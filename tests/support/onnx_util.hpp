// Helpers for the models/ tests: a naive GEMM reference, running a graph through prepare + compile +
// one session, and writing graphs as .onnx files (through models/onnx_import's exporter, so the tests
// need no protobuf headers or Python).
#pragma once
#include <fstream>
#include <map>
#include <string>

#include "models/builder.hpp"
#include "models/executor.hpp"
#include "models/onnx_import.hpp"
#include "models/passes.hpp"
#include "tests/support/test_util.hpp"

namespace cldl::test {

// A graph value shape with symbolic dims: -1 where `symbols` names the dim.
inline graph::ValueShape sym_shape(std::vector<int64_t> dims, std::vector<std::string> symbols) {
  graph::ValueShape s;
  s.dims = std::move(dims);
  s.symbols = std::move(symbols);
  return s;
}

// Shared process context as a shared_ptr (CompiledModel keeps its context alive).
inline std::shared_ptr<Context> shared_ctx() {
  static std::shared_ptr<Context> c = Context::create();
  return c;
}

// y[M,N] = alpha * op(A) op(B), row-major, double accumulation.
inline std::vector<float> gemm_ref(const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool ta = false,
                                   bool tb = false, float alpha = 1.0f) {
  std::vector<float> y(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(ta ? a[k * M + m] : a[m * K + k]) * double(tb ? b[n * K + k] : b[k * N + n]);
      y[size_t(m * N + n)] = float(alpha * s);
    }
  return y;
}

inline std::shared_ptr<graph::CompiledModel> compile_graph(graph::Graph g, const graph::PrepareOptions& p = {},
                                                           graph::CompileOptions c = {}) {
  graph::prepare(g, p);
  return graph::CompiledModel::compile(shared_ctx(), std::move(g), c);
}

inline std::map<std::string, HostTensor> run_graph(graph::Graph g, const std::map<std::string, HostTensor>& inputs,
                                                   const graph::PrepareOptions& p = {}) {
  auto m = compile_graph(std::move(g), p);
  return m->session()->run(inputs);
}

// Host folding against the device: `build(true)` makes a graph whose ops read only constants (plus a
// runtime input "z" [1] f32 so the graph keeps a node), which prepare() must fold to Identity nodes;
// `build(false)` the same ops on graph inputs (`feed`). The outputs `names` must agree: f32 within
// rtol / atol, every other dtype bit for bit.
template <typename Build>
void check_folds_like_device(Build&& build, const std::map<std::string, HostTensor>& feed,
                             std::initializer_list<const char*> names, double rtol, double atol) {
  graph::Graph g = build(true);
  graph::prepare(g, {});
  for (const auto& n : g.nodes) CHECK_MESSAGE(n.op_type == "Identity", n.op_type << " was not folded");
  auto folded = run_graph(build(true), {{"z", random_tensor(Shape{1}, 1)}});
  auto device = run_graph(build(false), feed);
  for (const char* name : names) {
    CAPTURE(name);
    const HostTensor &f = folded.at(name), &d = device.at(name);
    REQUIRE(f.dtype() == d.dtype());
    REQUIRE(f.shape() == d.shape());
    if (f.dtype() == DType::f32) {
      CLDL_CHECK_CLOSE(f.as<float>(), d.as<float>(), size_t(f.numel()), rtol, atol);
    } else {
      CHECK(std::memcmp(f.data(), d.data(), f.bytes()) == 0);
    }
  }
}

// Message of the cldl::Error that `f` throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace cldl::test
