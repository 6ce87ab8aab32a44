// ONNX audio front-end ops on layers/audio.hpp: DFT (17: axis attribute; 20: axis an optional input),
// STFT (17), HannWindow / HammingWindow / BlackmanWindow (17) and MelWeightMatrix (17). The lengths, axes
// and frame steps decide output shapes, so they must be known when planning (a staged plan reads them back
// when computed). The windows fold on the host then (their size is their only input), unless past the
// host folding limit; MelWeightMatrix folds when its sample rate and edges are constant too (within that
// limit). Otherwise their kernels run. DFT and STFT on constants fold through the general device folding
// (models/const_fold.hpp).
#include <cmath>

#include "layers/audio.hpp"
#include "models/onnx_import.hpp"
#include "models/ops_cnn_common.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

void require_f32(const InferCtx& c, size_t i, const char* what) {
  if (c.input(i).dtype != DType::f32)
    c.error("input '{}' ({}) has dtype {}, expected float32", c.input(i).name, what, to_string(c.input(i).dtype));
}

// A scalar (or one-element) integer input that decides a shape: dft_length, axis, frame_step, sizes.
int64_t int_scalar(const InferCtx& c, size_t i, const char* what) {
  const HostTensor& t = c.constant(i, what);
  if (t.dtype() != DType::i64 && t.dtype() != DType::i32)
    c.error("input '{}' ({}) must be int32 or int64, got {}", c.input(i).name, what, to_string(t.dtype()));
  if (t.numel() != 1)
    c.error("input '{}' ({}) must hold one value, got shape {}", c.input(i).name, what, t.shape().str());
  return to_ints(t)[0];
}

// ---------------------------------------------------------------- DFT
DftConfig dft_config(const Node& n, int64_t opset, const Shape& x, std::optional<int64_t> length,
                     std::optional<int64_t> axis_in, const std::function<void(const std::string&)>& error) {
  DftConfig cfg;
  cfg.input = x;
  const int64_t r = int64_t(x.rank());
  // Opset 17 to 19: attribute axis, default 1; 20: input axis, default -2. Either way in [-r, -2] or
  // [0, r - 2]: the last dim holds the real / imaginary parts.
  if (opset >= 20 && n.has("axis")) error("attribute axis is an input from opset 20");
  int64_t axis = opset >= 20 ? axis_in.value_or(-2) : n.attr_i("axis", 1);
  if (axis < -r || axis > r - 2 || axis == -1)
    error(fmt::format("axis {} is out of range for input of shape {}: expected [{}, -2] or [0, {}]", axis, x.str(), -r,
                      r - 2));
  cfg.axis = axis < 0 ? axis + r : axis;
  for (const char* a : {"inverse", "onesided"}) {
    const int64_t v = n.attr_i(a, 0);
    if (v != 0 && v != 1) error(fmt::format("attribute {} must be 0 or 1, got {}", a, v));
  }
  cfg.inverse = n.attr_i("inverse", 0) == 1;
  cfg.onesided = n.attr_i("onesided", 0) == 1;
  if (length) {
    if (*length < 1) error(fmt::format("input dft_length must be >= 1, got {}", *length));
    cfg.length = *length;
  }
  if (cfg.onesided && !cfg.inverse && r >= 1 && x[size_t(r - 1)] == 2)
    log::debug("{}: onesided forward DFT of a complex input keeps the first N / 2 + 1 bins, as ONNX's reference does",
               n.describe());
  return cfg;
}

void infer_dft(InferCtx& c) {
  require_f32(c, 0, "input");
  std::optional<int64_t> length, axis;
  if (c.has_input(1)) length = int_scalar(c, 1, "dft_length: it decides the output shape");
  if (c.has_input(2)) {
    if (c.opset < 20)
      c.error("input '{}': DFT takes axis as an input from opset 20 (opset {}: attribute axis)", c.input(2).name,
              c.opset);
    axis = int_scalar(c, 2, "axis: it decides the output shape");
  }
  auto cfg = dft_config(c.node, c.opset, c.shape(0), length, axis, [&](const std::string& m) { c.error("{}", m); });
  c.set(0, DType::f32, checked(c, [&] { return Dft::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_dft(LowerCtx& c) {
  std::optional<int64_t> length, axis;
  if (c.value.size() > 1 && c.value[1]) length = to_ints(*c.value[1])[0];
  if (c.node.opset >= 20 && c.value.size() > 2 && c.value[2]) axis = to_ints(*c.value[2])[0];
  auto cfg = dft_config(c.node, c.node.opset, c.in[0].shape.to_shape(), length, axis,
                        [&](const std::string& m) { c.error("{}", m); });
  return wrap(Dft::create(c.ctx, c.device, cfg), c, {0});
}

// ---------------------------------------------------------------- STFT
StftConfig stft_config(const Node& n, const Shape& signal, int64_t step, std::optional<int64_t> frame_length,
                       int64_t window, const std::function<void(const std::string&)>& error) {
  const int64_t onesided = n.attr_i("onesided", 1);  // STFT defaults to one-sided
  if (onesided != 0 && onesided != 1) error(fmt::format("attribute onesided must be 0 or 1, got {}", onesided));
  if (frame_length && *frame_length < 1) error(fmt::format("input frame_length must be >= 1, got {}", *frame_length));
  return {signal, step, frame_length.value_or(0), window, onesided == 1};
}

void infer_stft(InferCtx& c) {
  require_f32(c, 0, "signal");
  const int64_t step = int_scalar(c, 1, "frame_step: it decides the output shape");
  int64_t window = -1;
  if (c.has_input(2)) {
    require_f32(c, 2, "window");
    const Shape w = c.shape(2);
    if (w.rank() != 1) c.error("input '{}' (window) must be 1-D, got shape {}", c.input(2).name, w.str());
    window = w[0];
  }
  std::optional<int64_t> frame_length;
  if (c.has_input(3)) frame_length = int_scalar(c, 3, "frame_length: it decides the output shape");
  auto cfg =
      stft_config(c.node, c.shape(0), step, frame_length, window, [&](const std::string& m) { c.error("{}", m); });
  c.set(0, DType::f32, checked(c, [&] { return Stft::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_stft(LowerCtx& c) {
  if (!c.value[1]) c.error("input frame_step must be known when planning");
  const bool has_window = c.in.size() > 2 && !c.in[2].name.empty();
  std::optional<int64_t> frame_length;
  if (c.in.size() > 3 && !c.in[3].name.empty()) {
    if (!c.value[3]) c.error("input frame_length must be known when planning");
    frame_length = to_ints(*c.value[3])[0];
  }
  auto cfg =
      stft_config(c.node, c.in[0].shape.to_shape(), to_ints(*c.value[1])[0], frame_length,
                  has_window ? c.in[2].shape.to_shape()[0] : -1, [&](const std::string& m) { c.error("{}", m); });
  return wrap(Stft::create(c.ctx, c.device, cfg), c, has_window ? std::vector<int>{0, 2} : std::vector<int>{0});
}

// ---------------------------------------------------------------- HannWindow, HammingWindow, BlackmanWindow
// output_datatype: a TensorProto data type (default FLOAT); the device kernel makes f32.
DType output_datatype(const InferCtx& c) {
  try {
    return dtype_from_onnx(int(c.node.attr_i("output_datatype", 1)), "attribute output_datatype");
  } catch (const Error& e) {
    c.error("{}", e.what());
  }
}

WindowConfig window_config(const InferCtx& c, WindowKind kind) {
  const int64_t periodic = c.node.attr_i("periodic", 1);
  if (periodic != 0 && periodic != 1) c.error("attribute periodic must be 0 or 1, got {}", periodic);
  const int64_t size = int_scalar(c, 0, "size: it decides the output shape");
  if (size < 0) c.error("input '{}' (size) must be >= 0, got {}", c.input(0).name, size);
  return {kind, size, periodic == 1};
}

std::function<void(InferCtx&)> infer_window(WindowKind kind) {
  return [kind](InferCtx& c) {
    const WindowConfig cfg = window_config(c, kind);
    const DType dt = output_datatype(c);
    if (cfg.size > kMaxHostFoldElements) {  // past what host folding makes: the kernel writes it at run time
      c.set(0, dt, Shape{cfg.size});
      return;
    }
    std::vector<double> v(size_t(cfg.size));
    for (int64_t i = 0; i < cfg.size; ++i) v[size_t(i)] = window_value(kind, cfg.size, i, cfg.periodic);
    c.fold(0, from_doubles(dt, Shape{cfg.size}, v));
  };
}

// Windows past kMaxHostFoldElements points, and any window when load-time folding is off
// (PrepareOptions::fold_constants = false).
std::function<std::unique_ptr<NodeKernel>(LowerCtx&)> lower_window(WindowKind kind) {
  return [kind](LowerCtx& c) -> std::unique_ptr<NodeKernel> {
    if (c.out[0].dtype != DType::f32)
      c.error("output_datatype {} runs on the host only (load-time folding); the kernel makes float32",
              to_string(c.out[0].dtype));
    const int64_t periodic = c.node.attr_i("periodic", 1);
    WindowConfig cfg{kind, to_ints(*c.value[0])[0], periodic == 1};
    return wrap(WindowOp::create(c.ctx, c.device, cfg), c, std::vector<int>{});
  };
}

// ---------------------------------------------------------------- MelWeightMatrix
void infer_mel(InferCtx& c) {
  const int64_t mel = int_scalar(c, 0, "num_mel_bins: it decides the output shape");
  const int64_t len = int_scalar(c, 1, "dft_length: it decides the output shape");
  const DType dt = output_datatype(c);
  const char* names[] = {"", "", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"};
  for (size_t i = 2; i < 5; ++i) {
    const DType t = c.input(i).dtype;
    const bool ok = i == 2 ? (t == DType::i32 || t == DType::i64)
                           : (t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16);
    if (!ok)
      c.error("input '{}' ({}) has dtype {}, expected {}", c.input(i).name, names[i], to_string(t),
              i == 2 ? "int32 or int64" : "a float type");
    if (c.shape(i).numel() != 1)
      c.error("input '{}' ({}) must hold one value, got shape {}", c.input(i).name, names[i], c.shape(i).str());
  }
  const MelWeightMatrixConfig cfg{mel, len, c.input(2).dtype};
  const Shape out = checked(c, [&] { return MelWeightMatrix::validate(cfg); });
  if (c.value[2] && c.value[3] && c.value[4] && bounded_numel(out.dims, kMaxHostFoldElements) >= 0) {
    auto w = checked(c, [&] {
      return mel_weight_matrix(mel, len, to_doubles(*c.value[2])[0], to_doubles(*c.value[3])[0],
                               to_doubles(*c.value[4])[0]);
    });
    c.fold(0, from_doubles(dt, out, w));
    return;
  }
  c.set(0, dt, out);
}

std::unique_ptr<NodeKernel> lower_mel(LowerCtx& c) {
  if (c.out[0].dtype != DType::f32)
    c.error("output_datatype {} needs constant sample_rate and edges (host folding); the kernel makes float32",
            to_string(c.out[0].dtype));
  for (size_t i : {size_t(3), size_t(4)})
    if (c.in[i].dtype != DType::f32)
      c.error("input '{}' has dtype {}: on the device the edges must be float32", c.in[i].name,
              to_string(c.in[i].dtype));
  const MelWeightMatrixConfig cfg{to_ints(*c.value[0])[0], to_ints(*c.value[1])[0], c.in[2].dtype};
  return wrap(MelWeightMatrix::create(c.ctx, c.device, cfg), c, {2, 3, 4});
}

OpDef window_def(const char* type, WindowKind kind) {
  return {.type = type,
          .since = 17,
          .family = "audio",
          .const_inputs = {0},
          .infer = infer_window(kind),
          .lower = lower_window(kind)};
}

const OpRegistration kAudioOps{
    // DFT-20 moved axis from an attribute to an optional input (default -2).
    {.type = "DFT", .since = 17, .family = "audio", .const_inputs = {1, 2}, .infer = infer_dft, .lower = lower_dft},
    {.type = "STFT", .since = 17, .family = "audio", .const_inputs = {1, 3}, .infer = infer_stft, .lower = lower_stft},
    window_def("HannWindow", WindowKind::hann),
    window_def("HammingWindow", WindowKind::hamming),
    window_def("BlackmanWindow", WindowKind::blackman),
    {.type = "MelWeightMatrix",
     .since = 17,
     .family = "audio",
     .const_inputs = {0, 1},
     .infer = infer_mel,
     .lower = lower_mel},
};

}  // namespace
}  // namespace cldl::graph
