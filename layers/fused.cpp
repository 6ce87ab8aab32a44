// Generated element-wise kernels (layers/fused.hpp).
#include "layers/fused.hpp"

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>

#include "layers/elementwise.hpp"
#include "layers/launch.hpp"
#include "layers/strided.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/log.hpp"
#include "runtime/program_cache.hpp"

namespace cldl {
namespace {

constexpr std::string_view kOp = "FusedElementwise";

enum class Kind { f, b, i };  // float, bool, integer input (read through a Cast step only)

Kind input_kind(DType t) {
  if (t == DType::f32) return Kind::f;
  if (t == DType::boolean) return Kind::b;
  switch (t) {
    case DType::i8: case DType::i16: case DType::i32: case DType::i64:
    case DType::u8: case DType::u16: case DType::u32: case DType::u64:
      return Kind::i;
    default:
      invalid(kOp, "input dtype {} is not supported (f32, bool, or an integer type read by a Cast)", to_string(t));
  }
}

const char* c_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::i8: return "char";
    case DType::i16: return "short";
    case DType::i32: return "int";
    case DType::i64: return "long";
    case DType::u16: return "ushort";
    case DType::u32: return "uint";
    case DType::u64: return "ulong";
    default: return "uchar";  // bool, u8
  }
}

size_t arity(FusedKind k) {
  switch (k) {
    case FusedKind::constant: return 0;
    case FusedKind::unary: case FusedKind::to_float: case FusedKind::to_bool: case FusedKind::not_: return 1;
    case FusedKind::where: return 3;
    default: return 2;
  }
}

// Kinds of every value (inputs, then steps); throws on a malformed program.
std::vector<Kind> value_kinds(const FusedConfig& c) {
  if (c.in_dtypes.size() != c.in_shapes.size())
    invalid(kOp, "{} input dtypes for {} input shapes", c.in_dtypes.size(), c.in_shapes.size());
  std::vector<Kind> k;
  for (DType t : c.in_dtypes) k.push_back(input_kind(t));
  for (size_t s = 0; s < c.steps.size(); ++s) {
    const FusedStep& st = c.steps[s];
    if (st.args.size() != arity(st.kind))
      invalid(kOp, "step {} has {} arguments, its kind takes {}", s, st.args.size(), arity(st.kind));
    std::vector<Kind> a;
    for (int v : st.args) {
      if (v < 0 || size_t(v) >= k.size()) invalid(kOp, "step {} reads value {}, which is not defined before it", s, v);
      a.push_back(k[size_t(v)]);
    }
    auto need = [&](bool ok, const char* what) {
      if (!ok) invalid(kOp, "step {}: {}", s, what);
    };
    switch (st.kind) {
      case FusedKind::unary: need(a[0] == Kind::f, "a unary step reads a float value"); k.push_back(Kind::f); break;
      case FusedKind::binary:
        need(a[0] == Kind::f && a[1] == Kind::f, "a binary step reads float values");
        need(!is_comparison(BinaryOp(st.op)) && !is_logical(BinaryOp(st.op)) && !is_bitwise(BinaryOp(st.op)),
             "a binary step is arithmetic");
        k.push_back(Kind::f);
        break;
      case FusedKind::compare:
        need(is_comparison(BinaryOp(st.op)) || is_logical(BinaryOp(st.op)), "a compare step is a comparison or logic op");
        need(is_logical(BinaryOp(st.op)) ? a[0] == Kind::b && a[1] == Kind::b : a[0] == Kind::f && a[1] == Kind::f,
             "a comparison reads float values, And / Or / Xor bool ones");
        k.push_back(Kind::b);
        break;
      case FusedKind::where:
        need(a[0] == Kind::b && a[1] == Kind::f && a[2] == Kind::f, "Where reads a bool and two float values");
        k.push_back(Kind::f);
        break;
      case FusedKind::to_float: k.push_back(Kind::f); break;
      case FusedKind::to_bool: k.push_back(Kind::b); break;
      case FusedKind::not_: need(a[0] == Kind::b, "Not reads a bool value"); k.push_back(Kind::b); break;
      case FusedKind::constant: k.push_back(Kind::f); break;
    }
    if (st.kind != FusedKind::to_float && st.kind != FusedKind::to_bool)
      for (Kind x : a) need(x != Kind::i, "an integer input is read by a Cast step only");
  }
  return k;
}

// A float literal that reads back to exactly `x`.
std::string literal(float x) {
  if (std::isnan(x)) return "NAN";
  if (std::isinf(x)) return x > 0 ? "INFINITY" : "(-INFINITY)";
  return fmt::format("({:a}f)", x);
}

std::string step_name(const FusedStep& s) {
  switch (s.kind) {
    case FusedKind::unary:
      return s.op < 32 ? std::string(to_string(Act(s.op))) : std::string(to_string(UnaryOp(s.op)));
    case FusedKind::binary: case FusedKind::compare: return std::string(to_string(BinaryOp(s.op)));
    case FusedKind::where: return "Where";
    case FusedKind::to_float: return "CastFloat";
    case FusedKind::to_bool: return "CastBool";
    case FusedKind::not_: return "Not";
    case FusedKind::constant: return literal(s.alpha);
  }
  return "?";
}

// The collapsed iteration space: dims (innermost last) and, per input, which dims it walks.
struct Pattern {
  std::vector<int64_t> dims;
  std::vector<std::vector<bool>> walks;  // [input][dim]
};

Pattern pattern_of(const FusedConfig& c) {
  std::vector<int64_t> dims = c.shape.dims;
  if (dims.empty()) dims.push_back(1);
  Shape o(dims);
  std::vector<std::vector<int64_t>> strides;
  for (const Shape& s : c.in_shapes) strides.push_back(broadcast_strides(s, o));
  strides.push_back(contiguous_strides(o));
  Iteration it = collapse(kOp, dims, strides);
  Pattern p;
  p.dims.assign(it.dims.begin(), it.dims.begin() + it.rank);
  for (size_t k = 0; k < c.in_shapes.size(); ++k) {
    std::vector<bool> w;
    int64_t expect = 1;
    for (int j = it.rank - 1; j >= 0; --j) {
      const int64_t s = it.strides[k][size_t(j)];
      w.insert(w.begin(), s != 0);
      if (s != 0 && s != expect)  // inputs are contiguous: a walked dim's stride is the walked dims' product
        invalid(kOp, "input {} of shape {} has stride {} on a collapsed dim (expected {})", k, c.in_shapes[k].str(),
                s, expect);
      if (s != 0) expect *= it.dims[size_t(j)];
    }
    p.walks.push_back(std::move(w));
  }
  return p;
}

std::string generate(const FusedConfig& c, const Pattern& p, const std::vector<Kind>& kinds) {
  const int r = int(p.dims.size());
  std::string s = "// Generated by layers/fused.cpp:\n";
  // The expression as comments: describe()'s lines, each prefixed.
  const std::string d = FusedElementwise::describe(c);
  for (size_t at = 0, nl; at < d.size(); at = nl + 1) {
    nl = d.find('\n', at);
    if (nl == std::string::npos) nl = d.size();
    s += "//   " + d.substr(at, nl - at) + "\n";
  }
  s += "__kernel void fused_elementwise(";
  std::vector<std::string> params;
  for (int j = 0; j < r; ++j) params.push_back(fmt::format("long d{}", j));
  for (size_t k = 0; k < c.in_dtypes.size(); ++k)
    params.push_back(fmt::format("__global const {}* restrict in{}, long o{}", c_type(c.in_dtypes[k]), k, k));
  for (size_t k = 0; k < c.outputs.size(); ++k)
    params.push_back(fmt::format("__global {}* restrict out{}, long q{}",
                                 kinds[size_t(c.outputs[k])] == Kind::b ? "uchar" : "float", k, k));
  for (size_t i = 0; i < params.size(); ++i) s += (i ? ",\n    " : "") + params[i];
  s += ") {\n";
  // Coordinates: the innermost dim from id 0, the next from id 1, the rest from id 2 (split by div / mod
  // only at rank 4 and above).
  std::vector<std::string> idx(static_cast<size_t>(r));
  idx[size_t(r - 1)] = "x";
  s += "  const long x = get_global_id(0);\n";
  if (r >= 2) {
    s += fmt::format("  const long i{} = get_global_id(1);\n", r - 2);
    idx[size_t(r - 2)] = fmt::format("i{}", r - 2);
  }
  std::string lin = "x";
  if (r == 2) lin = fmt::format("i0 * d1 + x");
  if (r >= 3) {
    s += "  const long rest = get_global_id(2);\n";
    lin = fmt::format("(rest * d{} + i{}) * d{} + x", r - 2, r - 2, r - 1);
    if (r == 3) {
      s += "  const long i0 = rest;\n";
    } else {
      s += "  long t = rest;\n";
      for (int j = r - 3; j >= 1; --j) s += fmt::format("  const long i{} = t % d{};\n  t /= d{};\n", j, j, j);
      s += "  const long i0 = t;\n";
    }
    for (int j = 0; j <= r - 3; ++j) idx[size_t(j)] = fmt::format("i{}", j);
  }
  // The launch is padded to a work-group size that does not follow the shape (launch.hpp): items past
  // the innermost dim or the next one return.
  if (r == 1)
    s += "  if (x >= d0) return;\n";
  else
    s += fmt::format("  if (x >= d{} || i{} >= d{}) return;\n", r - 1, r - 2, r - 2);
  s += fmt::format("  const long lin = {};\n", lin);
  for (size_t k = 0; k < c.in_dtypes.size(); ++k) {
    const auto& w = p.walks[k];
    std::string off;
    if (std::all_of(w.begin(), w.end(), [](bool b) { return b; })) {
      off = "lin";
    } else {
      for (int j = 0; j < r; ++j)
        if (w[size_t(j)]) off = off.empty() ? idx[size_t(j)] : fmt::format("({}) * d{} + {}", off, j, idx[size_t(j)]);
      if (off.empty()) off = "0";
    }
    const char* t = kinds[k] == Kind::b ? "uchar" : "float";
    if (kinds[k] == Kind::i)
      s += fmt::format("  const float v{} = convert_float(in{}[o{} + {}]);\n", k, k, k, off);
    else
      s += fmt::format("  const {} v{} = in{}[o{} + {}];\n", t, k, k, k, off);
  }
  const size_t n_in = c.in_dtypes.size();
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const FusedStep& st = c.steps[i];
    auto a = [&](size_t j) { return fmt::format("v{}", st.args[j]); };
    std::string e;
    switch (st.kind) {
      case FusedKind::unary:
        e = fmt::format("unary_apply({}, {}, {}, {})", st.op, a(0), literal(st.alpha), literal(st.beta));
        break;
      case FusedKind::binary: e = fmt::format("binary_apply({}, {}, {})", st.op, a(0), a(1)); break;
      case FusedKind::compare: e = fmt::format("compare_apply({}, (float){}, (float){})", st.op, a(0), a(1)); break;
      case FusedKind::where: e = fmt::format("{} ? {} : {}", a(0), a(1), a(2)); break;
      case FusedKind::to_float: e = fmt::format("(float){}", a(0)); break;
      case FusedKind::to_bool: e = fmt::format("(uchar)({} != 0)", a(0)); break;
      case FusedKind::not_: e = fmt::format("(uchar)!{}", a(0)); break;
      case FusedKind::constant: e = literal(st.alpha); break;
    }
    s += fmt::format("  const {} v{} = {};\n", kinds[n_in + i] == Kind::b ? "uchar" : "float", n_in + i, e);
  }
  for (size_t k = 0; k < c.outputs.size(); ++k) s += fmt::format("  out{}[q{} + lin] = v{};\n", k, k, c.outputs[k]);
  s += "}\n";
  return s;
}

// hash_hex of a generated program's source, remembered per generated part: the library sources before it
// are the same for every expression, and hashing them again for each fused node of each plan was 4% of a
// MiniLM plan's instructions. With CLDL_KERNEL_DIR the library sources may change between calls: no memo.
std::string source_hash(const std::string& gen, const std::string& source) {
  if (const char* dir = std::getenv("CLDL_KERNEL_DIR"); dir && *dir) return hash_hex(source);
  static std::mutex m;
  static std::map<std::string, std::string> memo;  // generated part -> hash; a few hundred bytes each
  {
    std::lock_guard lock(m);
    if (auto it = memo.find(gen); it != memo.end()) return it->second;
  }
  std::string h = hash_hex(source);
  std::lock_guard lock(m);
  return memo.emplace(gen, std::move(h)).first->second;
}

}  // namespace

std::vector<DType> FusedElementwise::validate(const FusedConfig& cfg) {
  std::vector<Kind> kinds = value_kinds(cfg);
  std::vector<Shape> all = cfg.in_shapes;
  all.push_back(cfg.shape);
  Shape b = broadcast_shapes(kOp, all);
  if (b != cfg.shape) invalid(kOp, "the inputs broadcast to {}, not to the output shape {}", b.str(), cfg.shape.str());
  if (cfg.outputs.empty()) invalid(kOp, "the expression has no output");
  std::vector<DType> out;
  for (int v : cfg.outputs) {
    if (v < 0 || size_t(v) >= kinds.size()) invalid(kOp, "output value {} is not defined", v);
    if (kinds[size_t(v)] == Kind::i) invalid(kOp, "output value {} is an integer input (no step computes it)", v);
    out.push_back(kinds[size_t(v)] == Kind::b ? DType::boolean : DType::f32);
  }
  return out;
}

std::string FusedElementwise::describe(const FusedConfig& cfg) {
  std::string s;
  const size_t n_in = cfg.in_dtypes.size();
  for (size_t i = 0; i < cfg.steps.size(); ++i) {
    const FusedStep& st = cfg.steps[i];
    std::string args;
    for (int a : st.args) args += fmt::format("{}v{}", args.empty() ? "" : ", ", a);
    s += fmt::format("v{} = {}", n_in + i, step_name(st));
    if (st.kind != FusedKind::constant) s += "(" + args + ")";
    if (st.kind == FusedKind::unary && (st.alpha != 0.0f || st.beta != 0.0f))
      s += fmt::format(" [{}, {}]", st.alpha, st.beta);
    s += "\n";
  }
  for (size_t k = 0; k < cfg.outputs.size(); ++k) s += fmt::format("out{} = v{}\n", k, cfg.outputs[k]);
  return s;
}

std::string FusedElementwise::generated_source(const FusedConfig& cfg) {
  std::vector<Kind> kinds = value_kinds(cfg);
  return generate(cfg, pattern_of(cfg), kinds);
}

std::unique_ptr<FusedElementwise> FusedElementwise::create(Context& ctx, int device, const FusedConfig& cfg) {
  std::unique_ptr<FusedElementwise> f(new FusedElementwise());
  f->cfg_ = cfg;
  f->out_dtypes_ = validate(cfg);
  Pattern p = pattern_of(cfg);
  f->dims_ = p.dims;
  std::string gen = generate(cfg, p, value_kinds(cfg));
  std::string source = kernel_source("common.cl") + "\n#line 1\n" + kernel_source("elementwise.cl") + "\n" + gen;
  const Device& dev = ctx.device(device);
  check_dtype_support(dev, DType::f32, kOp);
  ProgramCache& cache = ProgramCache::global();
  // Recording for a bundle (or loading from a strict one) goes through get_source, which records.
  cl::Program prog = cache.binaries_only()
                         ? cache.get_source(ctx.cl(), dev, "fused_elementwise", source, elementwise_options(DType::f32))
                         : cache.get_hashed(ctx.cl(), dev, "fused_elementwise", source, source_hash(gen, source),
                                            elementwise_options(DType::f32));
  f->kernel_ = make_kernel(prog, "fused_elementwise");
  f->items_ = fixed_group_items(f->kernel_, dev);
  f->algorithm_ = fmt::format("generated kernel, {} steps, {} inputs, {} outputs, rank {} after collapsing",
                              cfg.steps.size(), cfg.in_dtypes.size(), cfg.outputs.size(), p.dims.size());
  log::debug("FusedElementwise {}: {}\n{}", cfg.shape.str(), f->algorithm_, gen);
  return f;
}

void FusedElementwise::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                               ExecutionContext& ec) {
  if (in.size() != cfg_.in_dtypes.size() || out.size() != cfg_.outputs.size())
    invalid(kOp, "expects {} inputs and {} outputs, got {} and {}", cfg_.in_dtypes.size(), cfg_.outputs.size(),
            in.size(), out.size());
  for (size_t k = 0; k < in.size(); ++k)
    if (in[k].shape != cfg_.in_shapes[k] || in[k].dtype != cfg_.in_dtypes[k])
      invalid(kOp, "input {} is {} {}, expected {} {}", k, to_string(in[k].dtype), in[k].shape.str(),
              to_string(cfg_.in_dtypes[k]), cfg_.in_shapes[k].str());
  for (size_t k = 0; k < out.size(); ++k)
    if (out[k].shape != cfg_.shape || out[k].dtype != out_dtypes_[k])
      invalid(kOp, "output {} is {} {}, expected {} {}", k, to_string(out[k].dtype), out[k].shape.str(),
              to_string(out_dtypes_[k]), cfg_.shape.str());
  if (cfg_.shape.numel() == 0) return;
  const int r = int(dims_.size());
  std::lock_guard lock(launch_mutex_);
  unsigned a = 0;
  auto arg = [&](const auto& v) {
    detail::check_arg(kernel_.setArg(a, v), kernel_, a);
    ++a;
  };
  for (int64_t d : dims_) arg(cl_long(d));
  for (const Tensor& t : in) arg(t.buffer), arg(cl_long(t.offset_elems()));
  for (const Tensor& t : out) arg(t.buffer), arg(cl_long(t.offset_elems()));
  if (r == 1) {
    ec.enqueue_kernel(kernel_, cl::NDRange(round_up(size_t(dims_[0]), items_)), cl::NDRange(items_),
                      "fused_elementwise");
    return;
  }
  size_t rest = 1;
  for (int j = 0; j < r - 2; ++j) rest *= size_t(dims_[size_t(j)]);
  // Rows of up to 64 items along the innermost dim, the rest of the group along the next dim; each covers
  // its dim up to a power of two, so a short dim is not padded far (launch.hpp: a few local sizes per
  // kernel, whatever the shapes).
  const int64_t inner = dims_[size_t(r - 1)], mid = dims_[size_t(r - 2)];
  const size_t lx = pow2_cover(inner, 64);
  const FixedLaunch l = fixed_launch(inner, mid, int64_t(rest), lx, pow2_cover(mid, items_ / lx));
  ec.enqueue_kernel(kernel_, l.global, l.local, "fused_elementwise");
}

}  // namespace cldl
