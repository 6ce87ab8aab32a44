// Op registry storage and the host-tensor helpers that shape inference and folding share.
#include "models/op_registry.hpp"
#include "models/passes.hpp"

#include <cmath>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace cldl::graph {

namespace {
std::deque<OpDef>& table() {  // a deque: pointers handed out stay valid as ops register
  static std::deque<OpDef> t;
  return t;
}
std::mutex& table_mutex() {
  static std::mutex m;
  return m;
}
// (domain, type) -> the first op registered under it: find_op runs for every node several times per plan,
// and a scan of the table was 4% of a MiniLM plan's instructions.
std::string op_key(const std::string& type, const std::string& domain) { return domain + '\x1f' + type; }
std::unordered_map<std::string, const OpDef*>& table_index() {
  static std::unordered_map<std::string, const OpDef*> m;
  return m;
}
}  // namespace

void register_op(OpDef def) {
  std::lock_guard lock(table_mutex());
  table().push_back(std::move(def));
  table_index().emplace(op_key(table().back().type, table().back().domain), &table().back());
}

const OpDef* find_op(const std::string& type, const std::string& domain) {
  std::lock_guard lock(table_mutex());
  // Fusion-made nodes (passes.hpp kFusedDomain) run as the ai.onnx op of the same name, unless the op
  // exists only as a fusion product (FusedElementwise).
  const auto& index = table_index();
  if (auto it = index.find(op_key(type, domain)); it != index.end()) return it->second;
  std::string d = domain == "ai.onnx" || domain == kFusedDomain ? "" : domain;
  if (auto it = index.find(op_key(type, d)); it != index.end()) return it->second;
  return nullptr;
}

std::string OpDef::opset_range() const {
  if (until == 0) return fmt::format("opsets {} and later", since);
  if (until == since) return fmt::format("opset {} only", since);
  return fmt::format("opsets {} to {}", since, until);
}

int64_t node_opset(const Graph& g, const Node& n) {
  return n.domain == kFusedDomain ? kLatestOpset : g.opset(n.domain);
}

void check_opset(const OpDef& def, const Node& n, int64_t opset) {
  if (def.implements(opset)) return;
  std::string domain = n.domain.empty() ? "ai.onnx" : n.domain;
  fail("{}: unsupported opset {} of op '{}' (domain {}): cldl implements {} of it", n.describe(), opset, n.op_type,
       domain, def.opset_range());
}

int64_t bounded_numel(const std::vector<int64_t>& dims, int64_t limit) {
  int64_t n = 1;
  for (auto d : dims) {
    if (d < 0) return -1;
    if (d == 0) return 0;
  }
  for (auto d : dims) {
    if (n > limit / d) return -1;
    n *= d;
  }
  return n;
}

int64_t check_host_fold_size(const InferCtx& c, const std::vector<int64_t>& dims) {
  int64_t n = bounded_numel(dims, kMaxHostFoldElements);
  if (n < 0)
    c.error("folding at load would make a tensor of shape {}: more than {} elements (or a negative dimension)",
            Shape(dims).str(), kMaxHostFoldElements);
  return n;
}

std::vector<const OpDef*> registered_ops() {
  std::lock_guard lock(table_mutex());
  std::vector<const OpDef*> r;
  for (auto& o : table()) r.push_back(&o);
  return r;
}

namespace {
std::map<std::string, HostFold>& folders() {
  static std::map<std::string, HostFold> f;
  return f;
}
}  // namespace

void register_folder(const std::string& type, HostFold f) {
  std::lock_guard lock(table_mutex());
  folders()[type] = std::move(f);
}

const HostFold* find_folder(const std::string& type, const std::string& domain) {
  if (!domain.empty() && domain != "ai.onnx") return nullptr;
  std::lock_guard lock(table_mutex());
  auto it = folders().find(type);
  return it == folders().end() ? nullptr : &it->second;
}

const ValueInfo& InferCtx::input(size_t i) const {
  if (!has_input(i)) error("input {} is required", i);
  return *in[i];
}

Shape InferCtx::shape(size_t i) const {
  const auto& v = input(i);
  if (!v.shape.is_static()) error("input '{}' needs a static shape, got {}", v.name, v.shape.str());
  return v.shape.to_shape();
}

const HostTensor& InferCtx::constant(size_t i, const char* what) const {
  if (!has_input(i)) error("input {} ({}) is required", i, what);
  if (!value[i])
    error("input '{}' ({}) must be known at load time (an initializer, Constant or bound input)", in[i]->name, what);
  return *value[i];
}

bool InferCtx::all_constant() const {
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] && !value[i]) return false;
  return true;
}

void InferCtx::set(size_t i, DType t, ValueShape s) {
  if (i >= out.size()) return;
  out[i].dtype = t;
  out[i].shape = std::move(s);
}

void InferCtx::fold(size_t i, HostTensor t) {
  if (i >= out.size()) return;
  set(i, t.dtype(), t.shape());
  folded[i] = std::move(t);
}

int64_t norm_axis(const InferCtx& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) c.error("axis {} is out of range for rank {}", axis, rank);
  return axis < 0 ? axis + rank : axis;
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else {  // subnormal: normalise
      int e = -1;
      do { ++e; man <<= 1; } while (!(man & 0x400));
      bits = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) bits = sign | 0x7f800000u | man << 13;
  else bits = sign | (exp + 112) << 23 | man << 13;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (man ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    man |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = uint32_t(exp) << 10 | man >> 13, rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // round to nearest even
  return uint16_t(sign | h);
}

std::vector<double> to_doubles(const HostTensor& t) {
  std::vector<double> v(size_t(t.numel()));
  const void* p = t.data();
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case DType::f32: v[i] = static_cast<const float*>(p)[i]; break;
      case DType::f16: v[i] = half_to_float(static_cast<const uint16_t*>(p)[i]); break;
      case DType::i32: v[i] = static_cast<const int32_t*>(p)[i]; break;
      case DType::i64: v[i] = double(static_cast<const int64_t*>(p)[i]); break;
      case DType::u8:
      case DType::boolean: v[i] = static_cast<const uint8_t*>(p)[i]; break;
      case DType::i8: case DType::i4: case DType::i2: v[i] = static_cast<const int8_t*>(p)[i]; break;
      case DType::u4: case DType::u2: v[i] = static_cast<const uint8_t*>(p)[i]; break;
      case DType::i16: v[i] = static_cast<const int16_t*>(p)[i]; break;
      case DType::u16: v[i] = static_cast<const uint16_t*>(p)[i]; break;
      case DType::u32: v[i] = static_cast<const uint32_t*>(p)[i]; break;
      case DType::u64: v[i] = double(static_cast<const uint64_t*>(p)[i]); break;
      case DType::f64: v[i] = static_cast<const double*>(p)[i]; break;
      case DType::bf16: v[i] = bf16_to_float(static_cast<const uint16_t*>(p)[i]); break;
      case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
      case DType::f8e8m0: case DType::f4e2m1:
        v[i] = minifloat_to_float(t.dtype(), static_cast<const uint8_t*>(p)[i]);
        break;
    }
  }
  return v;
}

std::vector<int64_t> to_ints(const HostTensor& t) {
  if (t.dtype() == DType::i64) {
    auto s = t.span<int64_t>();
    return {s.begin(), s.end()};
  }
  auto d = to_doubles(t);
  return {d.begin(), d.end()};
}

HostTensor from_doubles(DType dt, Shape s, const std::vector<double>& v) {
  HostTensor t(dt, std::move(s));
  if (size_t(t.numel()) != v.size()) fail("from_doubles: {} values for shape {}", v.size(), t.shape().str());
  void* p = t.data();
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dt) {
      case DType::f32: static_cast<float*>(p)[i] = float(v[i]); break;
      case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_half(double_to_float_odd(v[i])); break;
      case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v[i]); break;
      case DType::i64: static_cast<int64_t*>(p)[i] = int64_t(v[i]); break;
      case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v[i]); break;
      case DType::boolean: static_cast<uint8_t*>(p)[i] = v[i] != 0; break;
      case DType::i8: case DType::i4: case DType::i2: static_cast<int8_t*>(p)[i] = int8_t(v[i]); break;
      case DType::u4: case DType::u2: static_cast<uint8_t*>(p)[i] = uint8_t(v[i]); break;
      case DType::i16: static_cast<int16_t*>(p)[i] = int16_t(v[i]); break;
      case DType::u16: static_cast<uint16_t*>(p)[i] = uint16_t(v[i]); break;
      case DType::u32: static_cast<uint32_t*>(p)[i] = uint32_t(v[i]); break;
      case DType::u64: static_cast<uint64_t*>(p)[i] = uint64_t(v[i]); break;
      case DType::f64: static_cast<double*>(p)[i] = v[i]; break;
      case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(double_to_float_odd(v[i])); break;
      case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
      case DType::f8e8m0: case DType::f4e2m1:
        static_cast<uint8_t*>(p)[i] = float_to_minifloat(dt, double_to_float_odd(v[i]), true);
        break;
    }
  }
  return t;
}

namespace {
bool is_integer(DType t) {
  switch (t) {
    case DType::f32: case DType::f16: case DType::f64: case DType::bf16: return false;
    default: return !is_minifloat(t);
  }
}
int64_t trunc_i64(double v) {
  return v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? int64_t(v) : INT64_MIN;
}
}  // namespace

HostTensor cast_host(const HostTensor& x, DType to, bool saturate, E8M0Rounding rounding) {
  HostTensor y(to, x.shape());
  const DType from = x.dtype();
  const void* p = x.data();
  void* q = y.data();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double d = 0;   // the exact value (floats, f64) or the integer as double
    float f = 0;    // rounded to nearest float
    float fo = 0;   // rounded to odd float, for float targets narrower than f32
    int64_t l = 0;  // truncated toward zero
    bool nz = false;
    if (is_integer(from)) {
      switch (from) {
        case DType::i32: l = static_cast<const int32_t*>(p)[i]; break;
        case DType::i64: case DType::u64: l = static_cast<const int64_t*>(p)[i]; break;
        case DType::u32: l = static_cast<const uint32_t*>(p)[i]; break;
        case DType::i16: l = static_cast<const int16_t*>(p)[i]; break;
        case DType::u16: l = static_cast<const uint16_t*>(p)[i]; break;
        case DType::i8: case DType::i4: case DType::i2: l = static_cast<const int8_t*>(p)[i]; break;
        default: l = static_cast<const uint8_t*>(p)[i]; break;  // u8, bool, u4, u2
      }
      const bool u64 = from == DType::u64;
      f = fo = u64 ? float(uint64_t(l)) : float(l);
      d = u64 ? double(uint64_t(l)) : double(l);
      nz = l != 0;
    } else {
      switch (from) {
        case DType::f32: f = static_cast<const float*>(p)[i]; break;
        case DType::f16: f = half_to_float(static_cast<const uint16_t*>(p)[i]); break;
        case DType::bf16: f = bf16_to_float(static_cast<const uint16_t*>(p)[i]); break;
        case DType::f64: d = static_cast<const double*>(p)[i]; break;
        default: f = minifloat_to_float(from, static_cast<const uint8_t*>(p)[i]); break;
      }
      if (from == DType::f64) {
        f = float(d);
        fo = double_to_float_odd(d);
      } else {
        d = f;
        fo = f;
      }
      l = trunc_i64(d);
      nz = d != 0;  // NaN is nonzero
    }
    switch (to) {
      case DType::f32: static_cast<float*>(q)[i] = f; break;
      case DType::f64: static_cast<double*>(q)[i] = d; break;
      case DType::f16: static_cast<uint16_t*>(q)[i] = float_to_half(fo); break;
      case DType::bf16: static_cast<uint16_t*>(q)[i] = float_to_bf16(fo); break;
      case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
      case DType::f8e8m0: case DType::f4e2m1:
        static_cast<uint8_t*>(q)[i] = float_to_minifloat(to, fo, saturate, rounding);
        break;
      case DType::boolean: static_cast<uint8_t*>(q)[i] = nz ? 1 : 0; break;
      case DType::i32: case DType::u32: static_cast<int32_t*>(q)[i] = int32_t(l); break;
      case DType::i64: case DType::u64: static_cast<int64_t*>(q)[i] = l; break;
      case DType::i16: case DType::u16: static_cast<int16_t*>(q)[i] = int16_t(l); break;
      case DType::i4: static_cast<int8_t*>(q)[i] = int8_t(int64_t(uint64_t(l) << 60) >> 60); break;
      case DType::u4: static_cast<uint8_t*>(q)[i] = uint8_t(l & 15); break;
      case DType::i2: static_cast<int8_t*>(q)[i] = int8_t(int64_t(uint64_t(l) << 62) >> 62); break;
      case DType::u2: static_cast<uint8_t*>(q)[i] = uint8_t(l & 3); break;
      default: static_cast<uint8_t*>(q)[i] = uint8_t(l); break;  // u8, i8
    }
  }
  return y;
}

HostTensor from_ints(Shape s, const std::vector<int64_t>& v) {
  return HostTensor::from<int64_t>(std::move(s), std::span<const int64_t>(v));
}

}  // namespace cldl::graph
