// ONNX import (Debian's libonnx protobuf classes) into the graph IR, ONNX export of the IR (tests build
// .onnx files with it), and ONNX TensorProto files (.pb) to host tensors. No protobuf type leaks out.
#pragma once
#include <string>

#include "models/graph.hpp"

namespace cldl::graph {

// Parses a model: graph, opsets, initializers (also from external data files next to the model, resolved
// against `base_dir`), attributes. Shapes are as declared; run prepare() (passes.hpp) next. Errors name
// the file and what is wrong (truncated, not an ONNX model, a tensor of an unsupported type...).
Graph import_onnx_file(const std::string& path);
Graph import_onnx_bytes(const std::string& bytes, const std::string& base_dir, const std::string& what = "model");

// Serialises a graph as an ONNX ModelProto (IR version 8, the graph's opsets; ai.onnx 17 when unset).
// With `external_data` set, initializers go to that file (next to the model) as ONNX external data.
std::string export_onnx(const Graph& g, const std::string& external_data_path = {});
void export_onnx_file(const Graph& g, const std::string& path, bool external_data = false);

// ONNX TensorProto (.pb) <-> host tensor.
HostTensor read_tensor_pb(const std::string& path);
// A value file of an input or output typed `as`: a TensorProto, or a SequenceProto / OptionalProto (ONNX's
// onnx-data.proto, as the node tests store sequence and optional values).
ModelValue read_value_pb(const std::string& path, const ValueInfo& as);
void write_tensor_pb(const HostTensor& t, const std::string& path, const std::string& name = {});
// ONNX data type number of a cldl dtype, and back (errors on the types cldl has none for).
int onnx_type_of(DType t);
DType dtype_from_onnx(int onnx_type, const std::string& what);

}  // namespace cldl::graph
