// .npy reader / writer: a magic string, a Python-dict header, raw little-endian data.
#include "models/npy.hpp"

#include <fstream>
#include <regex>

#include "models/onnx_import.hpp"

namespace cldl::graph {

namespace {
const std::pair<DType, const char*> kDescr[] = {
    {DType::f32, "<f4"}, {DType::f16, "<f2"}, {DType::i32, "<i4"}, {DType::i64, "<i8"}, {DType::u8, "|u1"},
    {DType::boolean, "|b1"}, {DType::i8, "|i1"}, {DType::i16, "<i2"}, {DType::u16, "<u2"}, {DType::u32, "<u4"},
    {DType::u64, "<u8"}, {DType::f64, "<f8"},
};
const char* descr(DType t) {
  for (auto& [d, s] : kDescr)
    if (d == t) return s;
  fail(".npy has no dtype for cldl {} tensors", to_string(t));
}
}  // namespace

bool npy_supports(DType t) {
  for (auto& [d, s] : kDescr)
    if (d == t) return true;
  return false;
}

HostTensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open .npy file '{}'", path);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) fail("'{}' is not a .npy file", path);
  uint32_t hlen = 0;
  unsigned char b[4] = {0, 0, 0, 0};
  if (magic[6] == 1) {
    f.read(reinterpret_cast<char*>(b), 2);
    hlen = b[0] | b[1] << 8;
  } else {
    f.read(reinterpret_cast<char*>(b), 4);
    hlen = b[0] | b[1] << 8 | b[2] << 16 | uint32_t(b[3]) << 24;
  }
  if (!f || hlen > (1u << 20)) fail("'{}': bad .npy header", path);
  std::string h(hlen, '\0');
  if (!f.read(h.data(), hlen)) fail("'{}': truncated .npy header", path);
  std::smatch m;
  if (!std::regex_search(h, m, std::regex("'descr':\\s*'([^']*)'"))) fail("'{}': .npy header without descr", path);
  std::string d = m[1];
  DType dt{};
  bool found = false;
  for (auto& [t, ds] : kDescr)
    if (d == ds) dt = t, found = true;
  if (!found) {
    std::string all;
    for (auto& kv : kDescr) all += std::string(all.empty() ? "" : " ") + kv.second;
    fail("'{}': unsupported .npy dtype '{}' (cldl reads {})", path, d, all);
  }
  if (std::regex_search(h, std::regex("'fortran_order':\\s*True"))) fail("'{}': Fortran-order .npy is not supported", path);
  if (!std::regex_search(h, m, std::regex("'shape':\\s*\\(([^)]*)\\)"))) fail("'{}': .npy header without shape", path);
  Shape s;
  std::string dims = m[1];
  std::regex num("\\d+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it)
    s.dims.push_back(std::stoll(it->str()));
  HostTensor t(dt, s);
  if (!f.read(static_cast<char*>(t.data()), std::streamsize(t.bytes())))
    fail("'{}': .npy data is shorter than {} {} needs", path, to_string(dt), s.str());
  return t;
}

void write_npy(const HostTensor& t, const std::string& path) {
  std::string shape;
  for (size_t i = 0; i < t.shape().rank(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape()[i]);
  if (t.shape().rank() == 1) shape += ",";  // a Python 1-tuple
  std::string h = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr(t.dtype()), shape);
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("cannot write '{}'", path);
  f.write("\x93NUMPY\x01\x00", 8);
  char len[2] = {char(h.size() & 0xff), char(h.size() >> 8)};
  f.write(len, 2);
  f.write(h.data(), std::streamsize(h.size()));
  f.write(static_cast<const char*>(t.data()), std::streamsize(t.bytes()));
  if (!f) fail("cannot write '{}'", path);
}

HostTensor read_tensor_file(const std::string& path) {
  if (path.size() > 3 && path.substr(path.size() - 3) == ".pb") return read_tensor_pb(path);
  return read_npy(path);
}

}  // namespace cldl::graph
