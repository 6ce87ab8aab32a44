// Loader for the ONNX backend node tests (shared/conformance/onnx-node/test_x/): the node of model.onnx
// and test_data_set_0/input_N.pb / output_N.pb as HostTensors at the node's input / output positions
// (skipped optional inputs stay empty). The protobuf decoding lives in the library
// (layers/rnn_onnx.cpp): the test binary does not link onnx_proto, and tests/CMakeLists.txt compiles
// only tests/test_*.cpp and tests/reference/*.cpp, hence header-only.
#pragma once
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "layers/rnn.hpp"
#include "runtime/error.hpp"

namespace cldl::test {

inline std::string read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open {}", path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct OnnxNodeTest {
  OnnxNodeInfo node;
  std::vector<std::optional<HostTensor>> inputs, outputs;  // by node input / output position
};

inline OnnxNodeTest load_onnx_node_test(const std::string& dir) {
  OnnxNodeTest r;
  r.node = onnx_single_node_from_bytes(read_file_bytes(dir + "/model.onnx"));
  std::map<std::string, HostTensor> by_name = r.node.initializers;
  for (size_t i = 0; i < r.node.graph_inputs.size(); ++i)
    by_name[r.node.graph_inputs[i]] =
        onnx_tensor_from_bytes(read_file_bytes(dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb"));
  for (const auto& name : r.node.inputs) {
    auto it = by_name.find(name);
    r.inputs.push_back(name.empty() || it == by_name.end() ? std::nullopt : std::optional<HostTensor>(it->second));
  }
  std::map<std::string, HostTensor> outs;
  for (size_t i = 0; i < r.node.graph_outputs.size(); ++i)
    outs[r.node.graph_outputs[i]] =
        onnx_tensor_from_bytes(read_file_bytes(dir + "/test_data_set_0/output_" + std::to_string(i) + ".pb"));
  for (const auto& name : r.node.outputs) {
    auto it = outs.find(name);
    r.outputs.push_back(name.empty() || it == outs.end() ? std::nullopt : std::optional<HostTensor>(it->second));
  }
  return r;
}

}  // namespace cldl::test
