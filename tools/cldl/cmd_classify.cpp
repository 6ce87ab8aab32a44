// `cldl classify model.onnx --input x.npy [--labels y.npy]`: runs a one-input classifier over a batch of
// samples (first axis), prints the predicted classes (argmax of the first output's last axis) or, with
// labels, the accuracy; then the time per sample and the device.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {
namespace {

// The model compiled for batch `b`, with a session.
struct BatchModel {
  std::shared_ptr<graph::CompiledModel> model;
  std::unique_ptr<graph::Session> session;
};

BatchModel compile_for_batch(std::shared_ptr<Context> ctx, const graph::Graph& imported, int64_t b) {
  graph::Graph g = imported;
  const auto& in = g.inputs[0];
  graph::PrepareOptions po;
  if (in.shape.dims.empty()) fail("classify: input '{}' is a scalar; expected [N, ...]", in.name);
  if (in.shape.dims[0] < 0) {
    if (in.shape.symbols[0].empty()) fail("classify: input '{}' has an unnamed batch dimension", in.name);
    po.dims[in.shape.symbols[0]] = b;
  } else if (in.shape.dims[0] != b) {
    fail("classify: input '{}' has a fixed batch {}; use --batch {}", in.name, in.shape.dims[0], in.shape.dims[0]);
  }
  graph::prepare(g, po);
  BatchModel m;
  m.model = graph::CompiledModel::compile(std::move(ctx), std::move(g));
  m.session = m.model->session();
  return m;
}

}  // namespace

void add_classify_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("classify", "Classify samples with an ONNX model (accuracy with --labels)");
  static std::string model, input, labels, device;
  static int64_t batch = 0;
  static int runs = 3;
  static bool json = false;
  cmd->add_option("model", model, "ONNX classifier with one input [N, ...]")->required();
  cmd->add_option("-i,--input", input, "Samples, .npy or .pb, first axis = sample")->required();
  cmd->add_option("-l,--labels", labels, "Class of each sample (.npy, integers): prints the accuracy");
  cmd->add_option("-b,--batch", batch, "Samples per call (default: all in one call)")->check(CLI::PositiveNumber);
  cmd->add_option("--runs", runs, "Timed passes over all samples after one warm-up")->check(CLI::PositiveNumber);
  cmd->add_option("-d,--device", device, "Device spec (cpu, gpu, P:D, name)")->envname("CLDL_DEVICE");
  cmd->add_flag("--json", json, "One JSON object on stdout");
  cmd->callback([] {
    HostTensor x = graph::read_tensor_file(input);
    if (x.shape().rank() < 1 || x.numel() == 0) fail("classify: --input '{}' has shape {}; expected [N, ...]", input, x.shape().str());
    const int64_t n = x.shape()[0];
    const int64_t b = batch > 0 ? std::min(batch, n) : n;
    graph::Graph g = graph::import_onnx_file(model);
    if (g.inputs.size() != 1) fail("classify: model '{}' has {} inputs; expected one", model, g.inputs.size());
    if (g.inputs[0].dtype != x.dtype())
      fail("classify: input '{}' of the model is {}, --input '{}' is {}", g.inputs[0].name, to_string(g.inputs[0].dtype),
           input, to_string(x.dtype()));
    std::vector<int64_t> truth;
    if (!labels.empty()) {
      HostTensor y = graph::read_tensor_file(labels);
      if (y.dtype() == DType::f32 || y.dtype() == DType::f16) fail("classify: --labels '{}' is {}; expected integers", labels, to_string(y.dtype()));
      if (y.numel() != n) fail("classify: --labels '{}' has {} values for {} samples", labels, y.numel(), n);
      for (double v : graph::to_doubles(y)) truth.push_back(int64_t(v));
    }
    auto ctx = Context::create(device);
    auto t0 = std::chrono::steady_clock::now();
    BatchModel full = compile_for_batch(ctx, g, b), rest;
    if (n % b) rest = compile_for_batch(ctx, g, n % b);
    double load_ms = elapsed_ms(t0);
    const std::string in_name = g.inputs[0].name, out_name = full.model->graph().outputs[0].name;
    const size_t sample_bytes = x.bytes() / size_t(n);
    std::vector<int64_t> pred(static_cast<size_t>(n));
    auto pass = [&] {  // every sample once; fills pred
      for (int64_t s = 0; s < n; s += b) {
        const int64_t m = std::min(b, n - s);
        Shape shape = x.shape();
        shape[0] = m;
        HostTensor part(x.dtype(), shape);
        std::memcpy(part.data(), static_cast<const std::byte*>(x.data()) + size_t(s) * sample_bytes, part.bytes());
        auto& bm = m == b ? full : rest;
        auto out = bm.session->run({{in_name, part}});
        const HostTensor& y = out.at(out_name);
        if (y.numel() % m) fail("classify: output '{}' {} does not split into {} samples", out_name, y.shape().str(), m);
        const auto v = graph::to_doubles(y);
        const size_t classes = v.size() / size_t(m);
        for (int64_t i = 0; i < m; ++i)
          pred[size_t(s + i)] = std::max_element(v.begin() + i * classes, v.begin() + (i + 1) * classes) - (v.begin() + i * classes);
      }
    };
    pass();  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < runs; ++r) {
      auto t = std::chrono::steady_clock::now();
      pass();
      ms.push_back(elapsed_ms(t));
    }
    std::sort(ms.begin(), ms.end());
    const double per_sample = ms[ms.size() / 2] / double(n);
    int64_t correct = 0;
    for (size_t i = 0; i < truth.size(); ++i) correct += pred[i] == truth[i];
    const std::string dev = ctx->device().info.name;
    if (json) {
      nlohmann::json j{{"model", model}, {"device", dev}, {"samples", n}, {"batch", b}, {"ms_per_sample", per_sample}, {"load_ms", load_ms}};
      if (truth.empty()) j["predictions"] = pred;
      else j["accuracy"] = double(correct) / double(n), j["correct"] = correct;
      fmt::print("{}\n", j.dump());
      return;
    }
    if (truth.empty()) fmt::print("predictions {}\n", fmt::join(pred, " "));
    else fmt::print("accuracy {:.4f} ({}/{})\n", double(correct) / double(n), correct, n);
    fmt::print("{} samples on {}: {:.4f} ms/sample (batch {}, median of {} passes), load {:.0f} ms\n", n, dev,
               per_sample, b, runs, load_ms);
  });
}

}  // namespace cldl::cli
