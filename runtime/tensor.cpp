// DType helpers, Shape and HostTensor.
#include "runtime/tensor.hpp"

#include <fmt/ranges.h>

namespace cldl {

namespace {
struct DTypeInfo {
  DType t;
  size_t size;
  const char* name;
  std::initializer_list<const char*> aliases;
};
const DTypeInfo kDTypes[] = {
    {DType::f32, 4, "f32", {"float32", "float"}},
    {DType::f16, 2, "f16", {"float16", "half"}},
    {DType::i32, 4, "i32", {"int32"}},
    {DType::i64, 8, "i64", {"int64"}},
    {DType::u8, 1, "u8", {"uint8"}},
    {DType::boolean, 1, "bool", {"boolean"}},
    {DType::i8, 1, "i8", {"int8"}},
    {DType::i16, 2, "i16", {"int16"}},
    {DType::u16, 2, "u16", {"uint16"}},
    {DType::u32, 4, "u32", {"uint32"}},
    {DType::u64, 8, "u64", {"uint64"}},
    {DType::f64, 8, "f64", {"float64", "double"}},
    {DType::bf16, 2, "bf16", {"bfloat16"}},
    {DType::f8e4m3fn, 1, "f8e4m3fn", {"float8e4m3fn"}},
    {DType::f8e4m3fnuz, 1, "f8e4m3fnuz", {"float8e4m3fnuz"}},
    {DType::f8e5m2, 1, "f8e5m2", {"float8e5m2"}},
    {DType::f8e5m2fnuz, 1, "f8e5m2fnuz", {"float8e5m2fnuz"}},
    {DType::f8e8m0, 1, "f8e8m0", {"float8e8m0"}},
    {DType::i4, 1, "i4", {"int4"}},
    {DType::u4, 1, "u4", {"uint4"}},
    {DType::f4e2m1, 1, "f4e2m1", {"float4e2m1"}},
    {DType::i2, 1, "i2", {"int2"}},
    {DType::u2, 1, "u2", {"uint2"}},
};
static_assert(std::size(kDTypes) == size_t(kDTypeCount));

const DTypeInfo* info(DType t) {
  size_t i = size_t(t);
  return i < std::size(kDTypes) && kDTypes[i].t == t ? &kDTypes[i] : nullptr;
}
}  // namespace

size_t dtype_size(DType t) {
  auto* d = info(t);
  return d ? d->size : 0;
}

std::string_view to_string(DType t) {
  auto* d = info(t);
  return d ? d->name : "?";
}

DType parse_dtype(std::string_view s) {
  for (auto& d : kDTypes) {
    if (s == d.name) return d.t;
    for (auto* a : d.aliases)
      if (s == a) return d.t;
  }
  std::string all;
  for (auto& d : kDTypes) all += std::string(all.empty() ? "" : ", ") + d.name;
  fail("unknown dtype '{}' (expected one of {})", s, all);
}

int onnx_pack_factor(DType t) {
  switch (t) {
    case DType::i4: case DType::u4: case DType::f4e2m1: return 2;
    case DType::i2: case DType::u2: return 4;
    default: return 1;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(dims, ", ")); }

void Shape::index_error(size_t i) const {
  fail("Shape {}: dimension index {} is out of range (rank {})", str(), int64_t(i), dims.size());
}

HostTensor::HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (auto d : shape_.dims)
    if (d < 0) fail("HostTensor: negative dimension in shape {}", shape_.str());
  bytes_ = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(shape_.numel()) * dtype_size(dtype));
}

std::byte* HostTensor::mutable_bytes() {
  if (!bytes_) return nullptr;
  if (bytes_.use_count() > 1) bytes_ = std::make_shared<std::vector<std::byte>>(*bytes_);
  return bytes_->data();
}

void HostTensor::reshape(Shape s) {
  if (s.numel() != shape_.numel()) fail("HostTensor::reshape: {} to {} changes the element count", shape_.str(), s.str());
  shape_ = std::move(s);
}

Tensor Tensor::reshaped(Shape s) const {
  if (s.numel() != numel()) fail("Tensor::reshaped: {} to {} changes the element count", shape.str(), s.str());
  Tensor t = *this;
  t.shape = std::move(s);
  return t;
}

Tensor Tensor::slice_elems(int64_t start, int64_t count, Shape s) const {
  if (start < 0 || count < 0 || start + count > numel() || s.numel() != count)
    fail("Tensor::slice_elems: [{}, {}) with shape {} out of {}", start, start + count, s.str(), shape.str());
  Tensor t = *this;
  t.offset_bytes += static_cast<size_t>(start) * dtype_size(dtype);
  t.shape = std::move(s);
  return t;
}

}  // namespace cldl
