// ONNX interop for the RNN family: decoding serialized TensorProto / single-node ModelProto bytes with
// Debian's ONNX protobuf classes, and mapping an RNN / LSTM / GRU node to an RnnConfig. The protobuf
// types stay inside the library (callers, tests included, need no protobuf headers or libraries);
// the graph importer may later take the generic part over.
#include <cstring>

#include <onnx/onnx_pb.h>

#include "layers/rnn.hpp"

namespace cldl {

namespace {
HostTensor tensor_from_proto(const onnx::TensorProto& t) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  DType dt;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: dt = DType::f32; break;
    case onnx::TensorProto::INT32: dt = DType::i32; break;
    case onnx::TensorProto::INT64: dt = DType::i64; break;
    default: fail("ONNX tensor '{}': data type {} is not supported here (float, int32, int64)", t.name(), t.data_type());
  }
  HostTensor h(dt, Shape(dims));
  if (t.has_raw_data()) {
    if (t.raw_data().size() != h.bytes())
      fail("ONNX tensor '{}': {} raw bytes, expected {}", t.name(), t.raw_data().size(), h.bytes());
    std::memcpy(h.data(), t.raw_data().data(), h.bytes());
    return h;
  }
  auto check = [&](int n) {
    if (n != h.numel()) fail("ONNX tensor '{}': {} values, expected {}", t.name(), n, h.numel());
  };
  if (dt == DType::f32) {
    check(t.float_data_size());
    std::copy(t.float_data().begin(), t.float_data().end(), h.as<float>());
  } else if (dt == DType::i32) {
    check(t.int32_data_size());
    std::copy(t.int32_data().begin(), t.int32_data().end(), h.as<int32_t>());
  } else {
    check(t.int64_data_size());
    std::copy(t.int64_data().begin(), t.int64_data().end(), h.as<int64_t>());
  }
  return h;
}
}  // namespace

HostTensor onnx_tensor_from_bytes(const std::string& serialized) {
  onnx::TensorProto t;
  if (!t.ParseFromString(serialized)) fail("not a serialized onnx.TensorProto ({} bytes)", serialized.size());
  return tensor_from_proto(t);
}

OnnxNodeInfo onnx_single_node_from_bytes(const std::string& serialized_model) {
  onnx::ModelProto m;
  if (!m.ParseFromString(serialized_model)) fail("not a serialized onnx.ModelProto ({} bytes)", serialized_model.size());
  const auto& g = m.graph();
  if (g.node_size() != 1) fail("ONNX model: expected a one-node graph, got {} nodes", g.node_size());
  const auto& n = g.node(0);
  OnnxNodeInfo r;
  r.op_type = n.op_type();
  r.inputs.assign(n.input().begin(), n.input().end());
  r.outputs.assign(n.output().begin(), n.output().end());
  for (const auto& v : g.input()) r.graph_inputs.push_back(v.name());
  for (const auto& v : g.output()) r.graph_outputs.push_back(v.name());
  for (const auto& t : g.initializer()) r.initializers.emplace(t.name(), tensor_from_proto(t));
  for (const auto& a : n.attribute()) {
    switch (a.type()) {
      case onnx::AttributeProto::INT: r.ints[a.name()] = a.i(); break;
      case onnx::AttributeProto::FLOAT: r.floats[a.name()] = a.f(); break;
      case onnx::AttributeProto::STRING: r.strings[a.name()] = a.s(); break;
      case onnx::AttributeProto::FLOATS: r.float_lists[a.name()].assign(a.floats().begin(), a.floats().end()); break;
      case onnx::AttributeProto::STRINGS: r.string_lists[a.name()].assign(a.strings().begin(), a.strings().end()); break;
      case onnx::AttributeProto::INTS: r.int_lists[a.name()].assign(a.ints().begin(), a.ints().end()); break;
      default: break;  // tensors / graphs: not used by the RNN family
    }
  }
  return r;
}

RnnConfig rnn_config_from_onnx(const OnnxNodeInfo& n, const Shape& x_shape) {
  RnnConfig c;
  if (n.op_type == "LSTM") c.cell = RnnCell::lstm;
  else if (n.op_type == "GRU") c.cell = RnnCell::gru;
  else if (n.op_type == "RNN") c.cell = RnnCell::rnn;
  else fail("rnn_config_from_onnx: op type '{}' is not RNN, LSTM or GRU", n.op_type);
  auto geti = [&](const char* k, int64_t d) { auto it = n.ints.find(k); return it == n.ints.end() ? d : it->second; };
  c.hidden_size = geti("hidden_size", 0);
  c.layout = int(geti("layout", 0));
  c.input_forget = geti("input_forget", 0) != 0;
  c.linear_before_reset = geti("linear_before_reset", 0) != 0;
  if (auto it = n.floats.find("clip"); it != n.floats.end()) c.clip = it->second;
  if (auto it = n.strings.find("direction"); it != n.strings.end()) {
    if (it->second == "forward") c.direction = RnnDirection::forward;
    else if (it->second == "reverse") c.direction = RnnDirection::reverse;
    else if (it->second == "bidirectional") c.direction = RnnDirection::bidirectional;
    else invalid(n.op_type, "direction must be forward, reverse or bidirectional, got '{}'", it->second);
  }
  if (auto it = n.string_lists.find("activations"); it != n.string_lists.end()) {
    auto list = [&](const char* k) { auto f = n.float_lists.find(k); return f == n.float_lists.end() ? std::vector<float>{} : f->second; };
    c.activations = rnn_activations_from_onnx(it->second, list("activation_alpha"), list("activation_beta"));
  }
  if (x_shape.rank() != 3) invalid(n.op_type, "X must have rank 3, got shape {}", x_shape.str());
  c.seq_length = x_shape[c.layout == 0 ? 0 : 1];
  c.batch = x_shape[c.layout == 0 ? 1 : 0];
  c.input_size = x_shape[2];
  return c;
}

}  // namespace cldl
