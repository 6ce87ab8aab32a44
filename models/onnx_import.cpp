// ONNX protobuf <-> graph IR and TensorProto files.
#include "models/onnx_import.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/onnx_proto.hpp"
#include <onnx/onnx-data_pb.h>

namespace cldl::graph {

namespace {

// ONNX TensorProto.DataType numbers (onnx.proto; Debian's generated headers stop at BFLOAT16 = 16).
struct OnnxType {
  int code;
  const char* name;
  DType dtype;
  bool supported;
};
const OnnxType kOnnxTypes[] = {
    {1, "FLOAT", DType::f32, true},           {2, "UINT8", DType::u8, true},
    {3, "INT8", DType::i8, true},             {4, "UINT16", DType::u16, true},
    {5, "INT16", DType::i16, true},           {6, "INT32", DType::i32, true},
    {7, "INT64", DType::i64, true},           {8, "STRING", DType::f32, false},
    {9, "BOOL", DType::boolean, true},        {10, "FLOAT16", DType::f16, true},
    {11, "DOUBLE", DType::f64, true},         {12, "UINT32", DType::u32, true},
    {13, "UINT64", DType::u64, true},         {14, "COMPLEX64", DType::f32, false},
    {15, "COMPLEX128", DType::f32, false},    {16, "BFLOAT16", DType::bf16, true},
    {17, "FLOAT8E4M3FN", DType::f8e4m3fn, true}, {18, "FLOAT8E4M3FNUZ", DType::f8e4m3fnuz, true},
    {19, "FLOAT8E5M2", DType::f8e5m2, true},  {20, "FLOAT8E5M2FNUZ", DType::f8e5m2fnuz, true},
    {21, "UINT4", DType::u4, true},           {22, "INT4", DType::i4, true},
    {23, "FLOAT4E2M1", DType::f4e2m1, true},  {24, "FLOAT8E8M0", DType::f8e8m0, true},
    {25, "UINT2", DType::u2, true},           {26, "INT2", DType::i2, true},
    {27, "FLOAT6E2M3", DType::f32, false},    {28, "FLOAT6E3M2", DType::f32, false},
};

const char* onnx_type_name(int t) {
  for (auto& o : kOnnxTypes)
    if (o.code == t) return o.name;
  return "UNKNOWN";
}

// Sub-byte types: ONNX packs 2 (4-bit) or 4 (2-bit) elements per byte, first element in the low bits;
// cldl keeps one element per byte, sign-extended for the signed integer types.
void unpack_subbyte(DType dt, const uint8_t* packed, uint8_t* dst, int64_t n) {
  int f = onnx_pack_factor(dt), bits = 8 / f;
  uint8_t mask = uint8_t((1u << bits) - 1);
  bool sign = dt == DType::i4 || dt == DType::i2;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t v = uint8_t(packed[i / f] >> ((i % f) * bits)) & mask;
    if (sign && (v >> (bits - 1))) v = uint8_t(v | ~mask);
    dst[i] = v;
  }
}

std::string pack_subbyte(DType dt, const uint8_t* src, int64_t n) {
  int f = onnx_pack_factor(dt), bits = 8 / f;
  uint8_t mask = uint8_t((1u << bits) - 1);
  std::string out(size_t((n + f - 1) / f), '\0');
  for (int64_t i = 0; i < n; ++i) out[size_t(i / f)] = char(uint8_t(out[size_t(i / f)]) | ((src[i] & mask) << ((i % f) * bits)));
  return out;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open {} '{}'", what, path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

int64_t parse_int(const std::string& s, const std::string& what) {
  try {
    size_t used = 0;
    int64_t v = std::stoll(s, &used);
    if (used == s.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  fail("{}: '{}' is not a valid non-negative integer", what, s);
}

HostTensor tensor_from_proto(const onnx::TensorProto& tp, const std::string& base_dir, const std::string& what) {
  std::string name = tp.name().empty() ? what : "tensor '" + tp.name() + "'";
  DType dt = dtype_from_onnx(tp.data_type(), name);
  Shape s;
  int64_t n = 1;
  for (auto d : tp.dims()) {
    if (d < 0 || d > (int64_t(1) << 40)) fail("{} has an invalid dimension {}", name, d);
    s.dims.push_back(d);
    n = d == 0 ? 0 : (n > (int64_t(1) << 40) / d ? (int64_t(1) << 41) : n * d);
  }
  if (n > (int64_t(1) << 40)) fail("{} claims too many elements ({})", name, s.str());
  const int pack = onnx_pack_factor(dt);
  size_t bytes = size_t((n + pack - 1) / pack) * dtype_size(dt);  // as stored in the file
  // Check the stored data's size before allocating, so a corrupted file cannot ask for terabytes.
  std::string ext_path;
  int64_t offset = 0;
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    int64_t length = -1;
    for (auto& kv : tp.external_data()) {
      if (kv.key() == "location") ext_path = kv.value();
      else if (kv.key() == "offset") offset = parse_int(kv.value(), name + " external data offset");
      else if (kv.key() == "length") length = parse_int(kv.value(), name + " external data length");
    }
    if (ext_path.empty()) fail("{}: external data without a location", name);
    // ONNX: a path relative to the model's folder; never outside it.
    std::filesystem::path loc(ext_path);
    bool escapes = loc.is_absolute();
    for (auto& part : loc) escapes = escapes || part == "..";
    if (escapes) fail("{}: external data location '{}' is not inside the model's folder", name, ext_path);
    ext_path = (std::filesystem::path(base_dir) / ext_path).string();
    if (length >= 0 && size_t(length) != bytes)
      fail("{}: external data length {} but shape {} {} needs {} bytes", name, length, to_string(dt), s.str(), bytes);
    std::error_code ec;
    auto fsize = std::filesystem::file_size(ext_path, ec);
    if (ec) fail("{}: cannot open external data file '{}'", name, ext_path);
    if (fsize < size_t(offset) + bytes)
      fail("{}: external data file '{}' has {} bytes, needs {} at offset {}", name, ext_path, fsize, bytes, offset);
  } else if (tp.has_raw_data()) {
    if (tp.raw_data().size() != bytes)
      fail("{}: raw data has {} bytes, shape {} {} needs {}", name, tp.raw_data().size(), to_string(dt), s.str(), bytes);
  } else {
    size_t have = dt == DType::f32 ? size_t(tp.float_data_size())
                  : dt == DType::i64 ? size_t(tp.int64_data_size())
                  : dt == DType::f64 ? size_t(tp.double_data_size())
                  : dt == DType::u32 || dt == DType::u64 ? size_t(tp.uint64_data_size())
                                                         : size_t(tp.int32_data_size()) * size_t(pack);
    if (pack > 1 ? have < size_t(n) || have >= size_t(n) + size_t(pack) : have != size_t(n)) fail("{}: {} values stored for shape {} ({} elements)", name, have, s.str(), n);
  }
  HostTensor t(dt, s);
  auto* dst = static_cast<std::byte*>(t.data());
  std::string packed;  // sub-byte types: the file's bytes, unpacked below
  std::byte* read_to = dst;
  if (pack > 1) {
    packed.resize(bytes);
    read_to = reinterpret_cast<std::byte*>(packed.data());
  }
  if (!ext_path.empty()) {
    std::ifstream f(ext_path, std::ios::binary);
    f.seekg(offset);
    f.read(reinterpret_cast<char*>(read_to), std::streamsize(bytes));
    if (size_t(f.gcount()) != bytes) fail("{}: cannot read {} bytes from '{}'", name, bytes, ext_path);
  } else if (tp.has_raw_data()) {
    if (bytes) std::memcpy(read_to, tp.raw_data().data(), bytes);
  } else if (pack > 1) {
    for (size_t i = 0; i < bytes; ++i) packed[i] = char(uint8_t(tp.int32_data(int(i))));
  } else {
    size_t es = dtype_size(dt);
    for (int64_t i = 0; i < n; ++i) {
      switch (dt) {
        case DType::f32: reinterpret_cast<float*>(dst)[i] = tp.float_data(int(i)); break;
        case DType::i64: reinterpret_cast<int64_t*>(dst)[i] = tp.int64_data(int(i)); break;
        case DType::f64: reinterpret_cast<double*>(dst)[i] = tp.double_data(int(i)); break;
        case DType::u64: reinterpret_cast<uint64_t*>(dst)[i] = tp.uint64_data(int(i)); break;
        case DType::u32: reinterpret_cast<uint32_t*>(dst)[i] = uint32_t(tp.uint64_data(int(i))); break;
        default: {  // int32_data holds every other type's value (or bit pattern), low bytes first
          uint32_t v = uint32_t(tp.int32_data(int(i)));
          std::memcpy(dst + size_t(i) * es, &v, es);
        }
      }
    }
  }
  if (pack > 1) unpack_subbyte(dt, reinterpret_cast<const uint8_t*>(packed.data()), reinterpret_cast<uint8_t*>(dst), n);
  return t;
}

void tensor_to_proto(const HostTensor& t, const std::string& name, onnx::TensorProto& tp) {
  tp.set_name(name);
  tp.set_data_type(onnx_type_of(t.dtype()));
  for (auto d : t.shape().dims) tp.add_dims(d);
  if (onnx_pack_factor(t.dtype()) > 1)
    tp.set_raw_data(pack_subbyte(t.dtype(), static_cast<const uint8_t*>(t.data()), t.numel()));
  else
    tp.set_raw_data(std::string(static_cast<const char*>(t.data()), t.bytes()));
}

// A type as text: "float", "sequence(int64)", "optional(sequence(float))"; "?" for what cldl has no name of.
std::string type_text(const onnx::TypeProto& t) {
  if (t.has_tensor_type()) return onnx_type_name(t.tensor_type().elem_type());
  if (t.has_sequence_type()) return "sequence(" + type_text(t.sequence_type().elem_type()) + ")";
  if (t.has_optional_type()) return "optional(" + type_text(t.optional_type().elem_type()) + ")";
  return "?";
}

// A graph input or output: a tensor, a sequence of tensors, or an optional of either.
ValueInfo value_info(const onnx::ValueInfoProto& v, const char* role) {
  ValueInfo vi;
  vi.name = v.name();
  const onnx::TypeProto* type = &v.type();
  if (type->has_optional_type()) {
    vi.optional = true;
    type = &type->optional_type().elem_type();
  }
  if (type->has_sequence_type() && type->sequence_type().elem_type().has_tensor_type()) {
    vi.sequence = true;
    vi.shape.known = false;
    vi.dtype = dtype_from_onnx(type->sequence_type().elem_type().tensor_type().elem_type(),
                               fmt::format("graph {} '{}'", role, v.name()));
    return vi;
  }
  if (!type->has_tensor_type())
    fail("graph {} '{}': unsupported type (a {}; cldl takes and returns tensors, sequences of tensors and optionals "
         "of those)",
         role, v.name(), type->has_map_type() ? "map" : type->has_sequence_type() ? "sequence of non-tensors" : "sparse tensor or opaque value");
  auto& tt = type->tensor_type();
  vi.dtype = dtype_from_onnx(tt.elem_type(), fmt::format("graph {} '{}'", role, v.name()));
  if (!tt.has_shape()) {
    vi.shape.known = false;
    return vi;
  }
  for (auto& d : tt.shape().dim()) {
    vi.shape.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    vi.shape.symbols.push_back(d.has_dim_param() ? d.dim_param() : "");
  }
  return vi;
}

void set_value_info(onnx::ValueInfoProto& p, const ValueInfo& v) {
  p.set_name(v.name);
  onnx::TypeProto* type = p.mutable_type();
  if (v.optional) type = type->mutable_optional_type()->mutable_elem_type();
  if (v.sequence) {
    type->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(onnx_type_of(v.dtype));
    return;
  }
  auto* tt = type->mutable_tensor_type();
  tt->set_elem_type(onnx_type_of(v.dtype));
  if (!v.shape.known) return;
  auto* sh = tt->mutable_shape();
  for (size_t i = 0; i < v.shape.dims.size(); ++i) {
    auto* d = sh->add_dim();
    if (v.shape.dims[i] >= 0) d->set_dim_value(v.shape.dims[i]);
    else if (i < v.shape.symbols.size() && !v.shape.symbols[i].empty()) d->set_dim_param(v.shape.symbols[i]);
  }
}

}  // namespace

int onnx_type_of(DType t) {
  for (auto& o : kOnnxTypes)
    if (o.supported && o.dtype == t) return o.code;
  return 0;
}

DType dtype_from_onnx(int t, const std::string& what) {
  for (auto& o : kOnnxTypes)
    if (o.code == t && o.supported) return o.dtype;
  fail("{}: unsupported data type {} ({}); cldl has no {} tensors", what, onnx_type_name(t), t, onnx_type_name(t));
}

namespace {

// The body of a GraphProto (initializers, inputs, outputs, nodes) into `g`; subgraph attributes become
// Graphs of their own with the parent's opsets. `sub`: a subgraph, whose inputs may also be initializers.
void read_graph(const onnx::GraphProto& gp, Graph& g, const std::string& base_dir, const std::string& what, int depth) {
  if (depth > 64) fail("{}: subgraphs nested more than 64 deep", what);
  for (auto& t : gp.initializer()) {
    if (t.name().empty()) fail("{}: an initializer has no name", what);
    g.initializers[t.name()] = tensor_from_proto(t, base_dir, what);
  }
  if (gp.sparse_initializer_size()) fail("{}: unsupported sparse initializers", what);
  for (auto& v : gp.input())
    if (!g.initializers.count(v.name())) g.inputs.push_back(value_info(v, "input"));
  for (auto& v : gp.output()) g.outputs.push_back(value_info(v, "output"));
  for (auto& np : gp.node()) {
    Node n;
    n.name = np.name();
    n.op_type = np.op_type();
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    if (n.name.empty()) n.name = fmt::format("{}_{}", n.op_type, g.nodes.size());
    for (auto& a : np.attribute()) {
      if (!a.ref_attr_name().empty()) fail("{}: attribute '{}' refers to a function attribute", n.describe(), a.name());
      switch (a.type()) {
        case onnx::AttributeProto::INT: n.attrs[a.name()] = int64_t(a.i()); break;
        case onnx::AttributeProto::FLOAT: n.attrs[a.name()] = a.f(); break;
        case onnx::AttributeProto::STRING: n.attrs[a.name()] = a.s(); break;
        case onnx::AttributeProto::INTS: n.attrs[a.name()] = std::vector<int64_t>(a.ints().begin(), a.ints().end()); break;
        case onnx::AttributeProto::FLOATS: n.attrs[a.name()] = std::vector<float>(a.floats().begin(), a.floats().end()); break;
        case onnx::AttributeProto::STRINGS:
          n.attrs[a.name()] = std::vector<std::string>(a.strings().begin(), a.strings().end());
          break;
        case onnx::AttributeProto::TENSOR:
          n.attrs[a.name()] = tensor_from_proto(a.t(), base_dir, fmt::format("{} attribute '{}'", n.describe(), a.name()));
          break;
        case onnx::AttributeProto::TYPE_PROTO:  // Optional's `type`: kept as text ("sequence(float)")
          n.attrs[a.name()] = type_text(a.tp());
          break;
        case onnx::AttributeProto::GRAPH: {
          auto sub = std::make_shared<Graph>();
          sub->name = a.g().name().empty() ? n.name + "/" + a.name() : a.g().name();
          sub->opsets = g.opsets;
          read_graph(a.g(), *sub, base_dir, fmt::format("{} attribute '{}'", n.describe(), a.name()), depth + 1);
          n.attrs[a.name()] = SubGraph(std::move(sub));
          break;
        }
        default:
          fail("{}: unsupported attribute '{}' of type {} (lists of graphs and sparse tensors are not supported)",
               n.describe(), a.name(), int(a.type()));
      }
    }
    g.nodes.push_back(std::move(n));
  }
}

}  // namespace

Graph import_onnx_bytes(const std::string& bytes, const std::string& base_dir, const std::string& what) {
  onnx::ModelProto m;
  if (bytes.empty()) fail("{}: empty file", what);
  if (!m.ParseFromString(bytes)) fail("{}: not a valid ONNX model (truncated or corrupted protobuf)", what);
  if (!m.has_graph()) fail("{}: ONNX model without a graph (truncated or not a model?)", what);
  if (m.ir_version() < 3) fail("{}: ONNX IR version {} is too old (need 3 or later)", what, m.ir_version());
  Graph g;
  const auto& gp = m.graph();
  g.name = gp.name().empty() ? "graph" : gp.name();
  for (auto& o : m.opset_import()) g.opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = o.version();
  for (auto& p : m.metadata_props()) g.metadata[p.key()] = p.value();
  read_graph(gp, g, base_dir, what, 0);
  // A model of ops of other domains only (an optimizer step of ai.onnx.preview.training) needs no ai.onnx import.
  if (!g.opsets.count(""))
    for (auto& n : g.nodes)
      if (n.domain.empty()) fail("{}: no ai.onnx opset import, but node {} is an ai.onnx op", what, n.describe());
  return g;
}

Graph import_onnx_file(const std::string& path) {
  std::string bytes = read_file(path, "model");
  return import_onnx_bytes(bytes, std::filesystem::path(path).parent_path().string(), "model '" + path + "'");
}

namespace {
// The nodes of `g` into `gp`, subgraph attributes included.
void export_nodes(const Graph& g, onnx::GraphProto& gp) {
  for (auto& n : g.nodes) {
    auto* np = gp.add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    np->set_domain(n.domain);
    for (auto& i : n.inputs) np->add_input(i);
    for (auto& o : n.outputs) np->add_output(o);
    for (auto& attr : n.attrs) {  // not a structured binding: clang before 16 cannot capture one in a lambda
      const std::string& k = attr.first;
      const AttrValue& v = attr.second;
      auto* a = np->add_attribute();
      a->set_name(k);
      std::visit(
          [&](auto&& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, int64_t>) { a->set_type(onnx::AttributeProto::INT); a->set_i(x); }
            else if constexpr (std::is_same_v<T, float>) { a->set_type(onnx::AttributeProto::FLOAT); a->set_f(x); }
            else if constexpr (std::is_same_v<T, std::string>) { a->set_type(onnx::AttributeProto::STRING); a->set_s(x); }
            else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
              a->set_type(onnx::AttributeProto::INTS);
              for (auto e : x) a->add_ints(e);
            } else if constexpr (std::is_same_v<T, std::vector<float>>) {
              a->set_type(onnx::AttributeProto::FLOATS);
              for (auto e : x) a->add_floats(e);
            } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
              a->set_type(onnx::AttributeProto::STRINGS);
              for (auto& e : x) a->add_strings(e);
            } else if constexpr (std::is_same_v<T, HostTensor>) {
              a->set_type(onnx::AttributeProto::TENSOR);
              tensor_to_proto(x, "", *a->mutable_t());
            } else {  // a subgraph (If, Loop, Scan): its values, initializers and nodes inline
              static_assert(std::is_same_v<T, SubGraph>);
              a->set_type(onnx::AttributeProto::GRAPH);
              onnx::GraphProto& sp = *a->mutable_g();
              sp.set_name(x->name);
              for (auto& v : x->inputs) set_value_info(*sp.add_input(), v);
              for (auto& v : x->outputs) set_value_info(*sp.add_output(), v);
              for (auto& [name, t] : x->initializers) tensor_to_proto(t, name, *sp.add_initializer());
              export_nodes(*x, sp);
            }
          },
          v);
    }
  }
}

}  // namespace

std::string export_onnx(const Graph& g, const std::string& external_data_path) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("cldl");
  if (g.opsets.empty()) {
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(17);
  }
  for (auto& [d, v] : g.opsets) {
    auto* o = m.add_opset_import();
    o->set_domain(d);
    o->set_version(v);
  }
  for (auto& [k, v] : g.metadata) {
    auto* p = m.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }
  auto* gp = m.mutable_graph();
  gp->set_name(g.name);
  for (auto& v : g.inputs) set_value_info(*gp->add_input(), v);
  for (auto& v : g.outputs) set_value_info(*gp->add_output(), v);
  std::ofstream ext;
  if (!external_data_path.empty()) {
    ext.open(external_data_path, std::ios::binary);
    if (!ext) fail("cannot write '{}'", external_data_path);
  }
  int64_t offset = 0;
  for (auto& [name, t] : g.initializers) {
    auto* tp = gp->add_initializer();
    tensor_to_proto(t, name, *tp);
    if (!ext.is_open()) continue;
    ext.write(static_cast<const char*>(t.data()), std::streamsize(t.bytes()));
    tp->clear_raw_data();
    tp->set_data_location(onnx::TensorProto::EXTERNAL);
    auto kv = [&](const char* k, const std::string& v) {
      auto* e = tp->add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    kv("location", std::filesystem::path(external_data_path).filename().string());
    kv("offset", std::to_string(offset));
    kv("length", std::to_string(t.bytes()));
    offset += int64_t(t.bytes());
  }
  export_nodes(g, *gp);
  return m.SerializeAsString();
}

void export_onnx_file(const Graph& g, const std::string& path, bool external_data) {
  std::string s = export_onnx(g, external_data ? path + ".data" : std::string());
  std::ofstream f(path, std::ios::binary);
  if (!f.write(s.data(), std::streamsize(s.size()))) fail("cannot write '{}'", path);
}

HostTensor read_tensor_pb(const std::string& path) {
  std::string bytes = read_file(path, "tensor file");
  onnx::TensorProto tp;
  if (!tp.ParseFromString(bytes)) fail("tensor file '{}' is not a valid ONNX TensorProto", path);
  return tensor_from_proto(tp, std::filesystem::path(path).parent_path().string(), "tensor file '" + path + "'");
}

namespace {
ModelValue sequence_from_proto(const onnx::SequenceProto& sp, const std::string& base_dir, const std::string& what) {
  if (sp.elem_type() != onnx::SequenceProto::TENSOR && sp.tensor_values_size() == 0 &&
      sp.elem_type() != onnx::SequenceProto::UNDEFINED)
    fail("{}: a sequence of elem_type {}; cldl models sequences of tensors", what, sp.elem_type());
  std::vector<HostTensor> items;
  for (auto& t : sp.tensor_values()) items.push_back(tensor_from_proto(t, base_dir, what));
  return ModelValue::sequence_of(std::move(items));
}
}  // namespace

ModelValue read_value_pb(const std::string& path, const ValueInfo& as) {
  const std::string what = "value file '" + path + "'";
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!as.composite()) return ModelValue::of(read_tensor_pb(path));
  std::string bytes = read_file(path, "value file");
  if (as.optional) {
    onnx::OptionalProto op;
    if (!op.ParseFromString(bytes)) fail("{} is not a valid ONNX OptionalProto", what);
    if (op.has_tensor_value()) return ModelValue::of(tensor_from_proto(op.tensor_value(), dir, what));
    if (op.has_sequence_value()) return sequence_from_proto(op.sequence_value(), dir, what);
    if (op.elem_type() == onnx::OptionalProto::UNDEFINED) return ModelValue::none();
    fail("{}: an optional of elem_type {}; cldl models optionals of tensors and sequences", what, op.elem_type());
  }
  onnx::SequenceProto sp;
  if (!sp.ParseFromString(bytes)) fail("{} is not a valid ONNX SequenceProto", what);
  return sequence_from_proto(sp, dir, what);
}

void write_tensor_pb(const HostTensor& t, const std::string& path, const std::string& name) {
  onnx::TensorProto tp;
  tensor_to_proto(t, name, tp);
  std::ofstream f(path, std::ios::binary);
  std::string s = tp.SerializeAsString();
  if (!f.write(s.data(), std::streamsize(s.size()))) fail("cannot write '{}'", path);
}

}  // namespace cldl::graph
