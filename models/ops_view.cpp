// View-only ops: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout (inference), BitCast. Their output
// aliases the input's bytes, so no kernel runs; on constant inputs they fold at load.
#include <cstring>

#include "models/onnx_import.hpp"
#include "models/op_registry.hpp"

namespace cldl::graph {
namespace {

// Sets output 0 to `s` as a view of input 0, folding when the input is constant.
void view_as(InferCtx& c, Shape s) {
  const auto& x = c.input(0);
  if (c.value[0]) {
    HostTensor t = *c.value[0];
    t.reshape(s);
    c.fold(0, std::move(t));
  } else {
    c.set(0, x.dtype, s);
  }
}

// Axes from input 1 (opset >= 13) or the "axes" attribute (older opsets).
std::vector<int64_t> axes_of(const InferCtx& c, int64_t from_opset) {
  if (c.opset >= from_opset) return c.has_input(1) ? to_ints(c.constant(1, "axes")) : std::vector<int64_t>{};
  return c.node.attr_ints("axes");
}

void infer_reshape(InferCtx& c) {
  Shape in = c.shape(0);
  auto target = to_ints(c.constant(1, "shape"));
  bool allowzero = c.node.attr_i("allowzero", 0) != 0;
  Shape out(target);
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allowzero) {
      if (i >= in.rank()) c.error("shape[{}] = 0 copies a dimension the input (rank {}) does not have", i, in.rank());
      out[i] = in[i];
    } else if (target[i] == -1) {
      if (infer_at >= 0) c.error("shape {} has more than one -1", Shape(target).str());
      infer_at = int(i);
      continue;
    } else if (target[i] < 0) {
      c.error("shape[{}] = {} is invalid", i, target[i]);
    }
    known *= out[i];
  }
  if (infer_at >= 0) {
    if (known == 0 || in.numel() % known) c.error("cannot reshape {} to {}", in.str(), Shape(target).str());
    out[infer_at] = in.numel() / known;
  }
  if (out.numel() != in.numel()) c.error("cannot reshape {} ({} elements) to {}", in.str(), in.numel(), out.str());
  view_as(c, out);
}

void infer_flatten(InferCtx& c) {
  Shape in = c.shape(0);
  int64_t r = int64_t(in.rank());
  int64_t axis = c.node.attr_i("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) c.error("axis {} is out of range for rank {}", c.node.attr_i("axis", 1), r);
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? a : b) *= in[i];
  view_as(c, Shape{a, b});
}

void infer_squeeze(InferCtx& c) {
  Shape in = c.shape(0);
  int64_t r = int64_t(in.rank());
  auto axes = axes_of(c, 13);
  std::vector<bool> drop(in.rank(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < in.rank(); ++i) drop[i] = in[i] == 1;
  } else {
    for (auto a : axes) {
      a = norm_axis(c, a, r);
      if (in[a] != 1) c.error("cannot squeeze axis {} of size {} (input {})", a, in[a], in.str());
      drop[a] = true;
    }
  }
  Shape out;
  for (size_t i = 0; i < in.rank(); ++i)
    if (!drop[i]) out.dims.push_back(in[i]);
  view_as(c, out);
}

void infer_unsqueeze(InferCtx& c) {
  Shape in = c.shape(0);
  auto axes = axes_of(c, 13);
  if (axes.empty()) c.error("axes must not be empty");
  int64_t r = int64_t(in.rank() + axes.size());
  std::vector<bool> added(size_t(r), false);
  for (auto a : axes) {
    a = norm_axis(c, a, r);
    if (added[a]) c.error("axis {} appears twice", a);
    added[a] = true;
  }
  Shape out;
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) out.dims.push_back(added[i] ? 1 : in[j++]);
  view_as(c, out);
}

void infer_identity(InferCtx& c) { view_as(c, c.shape(0)); }

void infer_dropout(InferCtx& c) {
  // Inference only: output = input, mask = all true. training_mode must be a constant false.
  // Opset 6 states test mode as is_test (default 0: training); 7 to 11 always run in test mode here.
  if (c.has_input(2) && to_ints(c.constant(2, "training_mode"))[0] != 0)
    c.error("training_mode = true is not supported (cldl runs inference)");
  if (c.opset < 7 && c.node.attr_i("is_test", 0) == 0)
    c.error("attribute is_test = 0 (training mode, opset {}) is not supported (cldl runs inference)", c.opset);
  Shape s = c.shape(0);
  view_as(c, s);
  if (c.out.size() > 1 && !c.out[1].name.empty()) {
    if (c.opset < 10) {  // the mask has X's dtype before opset 10
      c.fold(1, from_doubles(c.input(0).dtype, s, std::vector<double>(size_t(s.numel()), 1.0)));
      return;
    }
    HostTensor mask(DType::boolean, s);
    std::fill_n(static_cast<uint8_t*>(mask.data()), mask.bytes(), uint8_t(1));
    c.fold(1, std::move(mask));
  }
}

// BitCast (opset 26): the input's bytes read as dtype `to` of the same width (a view: no kernel runs). The
// packed 4- and 2-bit types are refused (their element is not a byte multiple).
void infer_bitcast(InferCtx& c) {
  if (!c.node.has("to")) c.error("attribute to is required");
  const DType from = c.input(0).dtype,
              to = dtype_from_onnx(int(c.node.attr_i("to", 0)), c.node.describe() + " attribute to");
  for (DType t : {from, to})
    if (t == DType::i4 || t == DType::u4 || t == DType::f4e2m1 || t == DType::i2 || t == DType::u2)
      c.error("unsupported: {} (a packed sub-byte type) cannot be bit-cast; input '{}' is {}, to is {}", to_string(t),
              c.input(0).name, to_string(from), to_string(to));
  if (dtype_size(from) != dtype_size(to))
    c.error("attribute to = {} is {} bits wide, but input '{}' is {} ({} bits): BitCast needs types of one width",
            to_string(to), dtype_size(to) * 8, c.input(0).name, to_string(from), dtype_size(from) * 8);
  const Shape s = c.shape(0);
  if (c.value[0]) {
    HostTensor t(to, s);
    if (t.bytes()) std::memcpy(t.data(), c.value[0]->data(), t.bytes());
    c.fold(0, std::move(t));
  } else {
    c.set(0, to, s);
  }
}

const OpRegistration kViewOps{
    {.type = "Reshape", .since = 5, .family = "view", .const_inputs = {1}, .infer = infer_reshape, .view_of = 0},
    {.type = "Flatten", .since = 1, .family = "view", .infer = infer_flatten, .view_of = 0},
    {.type = "Squeeze", .since = 1, .family = "view", .const_inputs = {1}, .infer = infer_squeeze, .view_of = 0},
    {.type = "Unsqueeze", .since = 1, .family = "view", .const_inputs = {1}, .infer = infer_unsqueeze, .view_of = 0},
    {.type = "Identity", .since = 1, .family = "view", .infer = infer_identity, .view_of = 0},
    {.type = "Dropout", .since = 6, .family = "view", .const_inputs = {2}, .infer = infer_dropout, .view_of = 0},
    {.type = "BitCast", .since = 26, .family = "view", .infer = infer_bitcast, .view_of = 0},
};

}  // namespace
}  // namespace cldl::graph
