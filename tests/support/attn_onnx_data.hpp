// Reads the ONNX backend node tests used by the attention/transformer suites: model.onnx (the one
// node's op type, inputs, outputs and attributes) and test_data_set_0/{input,output}_N.pb tensors.
//
// Why a small protobuf wire-format reader instead of the onnx_pb.h classes: the test executable links
// only cldl, which links onnx_proto privately, and the linker does not resolve symbols of a shared
// library's private dependencies ("DSO missing from command line"). Header-only because
// tests/support/*.cpp is not part of the test target's source glob. Only the fields the tests need are
// decoded; unknown fields are skipped as the wire format allows.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/tensor.hpp"

namespace cldl::test::attn_onnx {

// One protobuf message being read: fields come as (number, wire type, payload).
class WireReader {
 public:
  explicit WireReader(std::string_view b) : p_(b.data()), end_(b.data() + b.size()) {}
  bool next(uint32_t& field, uint32_t& wire) {
    if (p_ >= end_) return false;
    uint64_t key = varint();
    field = uint32_t(key >> 3), wire = uint32_t(key & 7);
    return true;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail("onnx data: truncated varint");
      uint8_t c = uint8_t(*p_++);
      v |= uint64_t(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    fail("onnx data: bad varint");
  }
  std::string_view bytes() {
    uint64_t n = varint();
    if (uint64_t(end_ - p_) < n) fail("onnx data: truncated field");
    std::string_view s(p_, size_t(n));
    p_ += n;
    return s;
  }
  uint32_t fixed32() {
    uint32_t v;
    need(4);
    std::memcpy(&v, p_, 4);
    p_ += 4;
    return v;
  }
  uint64_t fixed64() {
    uint64_t v;
    need(8);
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: fixed64(); break;
      case 2: bytes(); break;
      case 5: fixed32(); break;
      default: fail("onnx data: unsupported wire type {}", wire);
    }
  }
  // Repeated scalar fields may be packed (wire type 2) or not.
  template <typename F>
  void repeated_varint(uint32_t wire, F&& add) {
    if (wire == 2) {
      WireReader r(bytes());
      while (r.p_ < r.end_) add(r.varint());
    } else {
      add(varint());
    }
  }
  template <typename F>
  void repeated_fixed32(uint32_t wire, F&& add) {
    if (wire == 2) {
      WireReader r(bytes());
      while (r.p_ < r.end_) add(r.fixed32());
    } else {
      add(fixed32());
    }
  }

 private:
  void need(size_t n) {
    if (size_t(end_ - p_) < n) fail("onnx data: truncated fixed field");
  }
  const char* p_;
  const char* end_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// onnx.TensorProto data types used here.
enum : int { kFloat = 1, kUint8 = 2, kInt32 = 6, kInt64 = 7, kBool = 9, kFloat16 = 10 };

struct Tensor {
  std::string name;
  int data_type = 0;
  std::vector<int64_t> dims;
  std::vector<float> f;    // FLOAT (FLOAT16 widened)
  std::vector<int64_t> i;  // INT32 / INT64 / BOOL / UINT8 widened
  Shape shape() const { return Shape(dims); }
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
  }
};

inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        man <<= 1;
        ++e;
      } while (!(man & 0x400));
      bits = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline Tensor parse_tensor(std::string_view bytes) {
  Tensor t;
  std::string_view raw;
  std::vector<uint32_t> f32;
  std::vector<int64_t> ints;
  WireReader r(bytes);
  uint32_t field, wire;
  while (r.next(field, wire)) {
    switch (field) {
      case 1: r.repeated_varint(wire, [&](uint64_t v) { t.dims.push_back(int64_t(v)); }); break;
      case 2: t.data_type = int(r.varint()); break;
      case 4: r.repeated_fixed32(wire, [&](uint32_t v) { f32.push_back(v); }); break;
      case 5:  // int32_data (also bool, uint8, float16 bits)
      case 7: r.repeated_varint(wire, [&](uint64_t v) { ints.push_back(int64_t(v)); }); break;
      case 8: t.name = std::string(r.bytes()); break;
      case 9: raw = r.bytes(); break;
      default: r.skip(wire);
    }
  }
  const size_t n = size_t(t.numel());
  auto raw_at = [&](size_t i, size_t w) {
    uint64_t v = 0;
    std::memcpy(&v, raw.data() + i * w, w);
    return v;
  };
  if (!raw.empty()) {
    size_t w = t.data_type == kFloat || t.data_type == kInt32 ? 4 : t.data_type == kInt64 ? 8 : t.data_type == kFloat16 ? 2 : 1;
    if (raw.size() != n * w) fail("onnx tensor {}: raw_data has {} bytes for {} elements", t.name, raw.size(), n);
    for (size_t k = 0; k < n; ++k) {
      uint64_t v = raw_at(k, w);
      if (t.data_type == kFloat) {
        float x;
        uint32_t u = uint32_t(v);
        std::memcpy(&x, &u, 4);
        t.f.push_back(x);
      } else if (t.data_type == kFloat16) {
        t.f.push_back(half_to_float(uint16_t(v)));
      } else if (t.data_type == kInt32) {
        t.i.push_back(int64_t(int32_t(uint32_t(v))));
      } else {
        t.i.push_back(int64_t(v));
      }
    }
  } else if (t.data_type == kFloat) {
    for (auto u : f32) {
      float x;
      std::memcpy(&x, &u, 4);
      t.f.push_back(x);
    }
  } else if (t.data_type == kFloat16) {
    for (auto v : ints) t.f.push_back(half_to_float(uint16_t(v)));
  } else {
    t.i = ints;
  }
  if (t.f.size() + t.i.size() != n) fail("onnx tensor {}: {} values for {} elements", t.name, t.f.size() + t.i.size(), n);
  return t;
}

inline Tensor load_tensor(const std::string& path) { return parse_tensor(read_file(path)); }

struct Attribute {
  float f = 0;
  int64_t i = 0;
  bool has_f = false, has_i = false;
};

struct Node {
  std::string op_type;
  std::vector<std::string> inputs, outputs;  // "" = optional input left out
  std::map<std::string, Attribute> attrs;
  int64_t opset = 0;
  bool has(const std::string& a) const { return attrs.count(a) != 0; }
  int64_t get_i(const std::string& a, int64_t def) const {
    auto it = attrs.find(a);
    return it != attrs.end() && it->second.has_i ? it->second.i : def;
  }
  float get_f(const std::string& a, float def) const {
    auto it = attrs.find(a);
    return it != attrs.end() && it->second.has_f ? it->second.f : def;
  }
};

// The first node of model.onnx's graph.
inline Node load_node(const std::string& model_path) {
  std::string bytes = read_file(model_path);
  Node node;
  bool found = false;
  WireReader m(bytes);
  uint32_t field, wire;
  while (m.next(field, wire)) {
    if (field == 8 && wire == 2) {  // opset_import
      WireReader o(m.bytes());
      std::string domain;
      int64_t version = 0;
      while (o.next(field, wire)) {
        if (field == 1) domain = std::string(o.bytes());
        else if (field == 2) version = int64_t(o.varint());
        else o.skip(wire);
      }
      if (domain.empty() || domain == "ai.onnx") node.opset = version;
    } else if (field == 7 && wire == 2) {  // graph
      WireReader g(m.bytes());
      while (g.next(field, wire)) {
        if (field != 1 || wire != 2 || found) {
          g.skip(wire);
          continue;
        }
        found = true;
        WireReader n(g.bytes());
        while (n.next(field, wire)) {
          if (field == 1) node.inputs.emplace_back(n.bytes());
          else if (field == 2) node.outputs.emplace_back(n.bytes());
          else if (field == 4) node.op_type = std::string(n.bytes());
          else if (field == 5) {
            WireReader a(n.bytes());
            std::string name;
            Attribute at;
            while (a.next(field, wire)) {
              if (field == 1) name = std::string(a.bytes());
              else if (field == 2 && wire == 5) {
                uint32_t u = a.fixed32();
                std::memcpy(&at.f, &u, 4);
                at.has_f = true;
              } else if (field == 3 && wire == 0) {
                at.i = int64_t(a.varint());
                at.has_i = true;
              } else {
                a.skip(wire);
              }
            }
            node.attrs[name] = at;
          } else {
            n.skip(wire);
          }
        }
      }
    } else {
      m.skip(wire);
    }
  }
  if (!found) fail("{}: no node in the graph", model_path);
  return node;
}

// A node test folder: the node and its data set 0, inputs keyed by the node's input names.
struct NodeTest {
  Node node;
  std::map<std::string, Tensor> inputs;  // by name
  std::vector<Tensor> outputs;           // in node output order (as output_N.pb)
};

inline NodeTest load_node_test(const std::string& dir) {
  NodeTest t;
  t.node = load_node(dir + "/model.onnx");
  for (int k = 0;; ++k) {
    std::string p = dir + "/test_data_set_0/input_" + std::to_string(k) + ".pb";
    if (!std::ifstream(p)) break;
    Tensor x = load_tensor(p);
    if (x.name.empty()) {  // unnamed: the k-th input the node uses
      int seen = 0;
      for (const auto& in : t.node.inputs)
        if (!in.empty() && seen++ == k) x.name = in;
    }
    t.inputs[x.name] = std::move(x);
  }
  for (int k = 0;; ++k) {
    std::string p = dir + "/test_data_set_0/output_" + std::to_string(k) + ".pb";
    if (!std::ifstream(p)) break;
    t.outputs.push_back(load_tensor(p));
    if (t.outputs.back().name.empty() && size_t(k) < t.node.outputs.size()) t.outputs.back().name = t.node.outputs[size_t(k)];
  }
  return t;
}

}  // namespace cldl::test::attn_onnx
