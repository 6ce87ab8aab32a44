// Plain C++ references for the index ops; see index_ref.hpp.
#include "index_ref.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace cldl::ref {

namespace {
double combine(const std::string& r, double a, double b) {
  if (r == "add") return a + b;
  if (r == "mul") return a * b;
  if (r == "max") return std::max(a, b);
  if (r == "min") return std::min(a, b);
  return b;
}
int64_t ravel(const Dims& c, const Dims& d) {
  int64_t off = 0;
  for (size_t k = 0; k < d.size(); ++k) off = off * d[k] + c[k];
  return off;
}
}  // namespace

std::vector<double> scatter_elements(std::vector<double> data, const Dims& d, const std::vector<int64_t>& idx,
                                     const Dims& id, const std::vector<double>& upd, int axis,
                                     const std::string& reduction) {
  for (int64_t p = 0; p < numel(id); ++p) {
    Dims c = unravel(p, id);
    int64_t j = idx[size_t(p)] < 0 ? idx[size_t(p)] + d[size_t(axis)] : idx[size_t(p)];
    if (j < 0 || j >= d[size_t(axis)]) continue;
    c[size_t(axis)] = j;
    double& o = data[size_t(ravel(c, d))];
    o = combine(reduction, o, upd[size_t(p)]);
  }
  return data;
}

std::vector<double> scatter_nd(std::vector<double> data, const Dims& d, const std::vector<int64_t>& idx, const Dims& id,
                               const std::vector<double>& upd, const std::string& reduction) {
  const size_t k = size_t(id.back());
  const int64_t n = numel(id) / int64_t(k);
  int64_t slice = 1;
  for (size_t a = k; a < d.size(); ++a) slice *= d[a];
  for (int64_t i = 0; i < n; ++i) {
    Dims c(d.size(), 0);
    bool ok = true;
    for (size_t j = 0; j < k; ++j) {
      int64_t v = idx[size_t(i) * k + j];
      if (v < 0) v += d[j];
      ok = ok && v >= 0 && v < d[j];
      c[j] = v;
    }
    if (!ok) continue;
    const int64_t base = ravel(c, d);
    for (int64_t e = 0; e < slice; ++e) {
      double& o = data[size_t(base + e)];
      o = combine(reduction, o, upd[size_t(i * slice + e)]);
    }
  }
  return data;
}

std::vector<double> gather_nd(const std::vector<double>& data, const Dims& d, const std::vector<int64_t>& idx,
                              const Dims& id, int batch_dims, Dims& od) {
  const size_t b = size_t(batch_dims), k = size_t(id.back());
  od.assign(id.begin(), id.end() - 1);
  od.insert(od.end(), d.begin() + int64_t(b + k), d.end());
  std::vector<double> out;
  const Dims tuples(id.begin(), id.end() - 1);
  for (int64_t q = 0; q < numel(tuples); ++q) {
    Dims tc = unravel(q, tuples);
    Dims c(d.size(), 0);
    for (size_t a = 0; a < b; ++a) c[a] = tc[a];
    bool ok = true;
    for (size_t j = 0; j < k; ++j) {
      int64_t v = idx[size_t(q) * k + j];
      if (v < 0) v += d[b + j];
      ok = ok && v >= 0 && v < d[b + j];
      c[b + j] = v;
    }
    const Dims rest(d.begin() + int64_t(b + k), d.end());
    for (int64_t e = 0; e < numel(rest); ++e) {
      Dims rc = unravel(e, rest);
      std::copy(rc.begin(), rc.end(), c.begin() + int64_t(b + k));
      out.push_back(ok ? data[size_t(ravel(c, d))] : 0.0);
    }
  }
  return out;
}

std::vector<double> one_hot(const std::vector<double>& idx, const Dims& id, int64_t depth, int axis, double off,
                            double on, Dims& od) {
  od = id;
  od.insert(od.begin() + axis, depth);
  std::vector<double> out(size_t(numel(od)), off);
  for (int64_t p = 0; p < numel(id); ++p) {
    int64_t v = int64_t(idx[size_t(p)]);
    if (v < 0) v += depth;
    if (v < 0 || v >= depth) continue;
    Dims c = unravel(p, id);
    c.insert(c.begin() + axis, v);
    out[size_t(ravel(c, od))] = on;
  }
  return out;
}

std::vector<double> trilu(const std::vector<double>& x, const Dims& d, int64_t k, bool upper) {
  std::vector<double> out(x.size(), 0.0);
  const int64_t rows = d[d.size() - 2], cols = d[d.size() - 1];
  for (int64_t p = 0; p < numel(d); ++p) {
    const int64_t row = (p / cols) % rows, col = p % cols;
    if (upper ? col - row >= k : col - row <= k) out[size_t(p)] = x[size_t(p)];
  }
  return out;
}

std::vector<double> hardmax(const std::vector<double>& x, const Dims& d, int axis) {
  std::vector<double> out(x.size(), 0.0);
  Dims lines = d;
  lines[size_t(axis)] = 1;
  for (int64_t l = 0; l < numel(lines); ++l) {
    Dims c = unravel(l, lines);
    int64_t best = 0;
    double bv = x[size_t(ravel(c, d))];
    for (int64_t a = 1; a < d[size_t(axis)]; ++a) {
      c[size_t(axis)] = a;
      if (x[size_t(ravel(c, d))] > bv) bv = x[size_t(ravel(c, d))], best = a;
    }
    c[size_t(axis)] = best;
    out[size_t(ravel(c, d))] = 1.0;
  }
  return out;
}

std::vector<double> einsum(const std::string& equation, const std::vector<std::vector<double>>& xs,
                           const std::vector<Dims>& ds, Dims& od) {
  // Labels as ints: letters by code, ellipsis dims as 1000 + j (right-aligned over the inputs).
  auto parse = [](const std::string& t) {
    std::vector<int> l;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] == ' ') continue;
      if (t[i] == '.')
        l.push_back(-1), i += 2;
      else
        l.push_back(t[i]);
    }
    return l;
  };
  const size_t arrow = equation.find("->");
  std::string lhs = equation.substr(0, arrow);
  std::vector<std::vector<int>> terms;
  for (size_t s = 0;;) {
    size_t comma = lhs.find(',', s);
    terms.push_back(parse(lhs.substr(s, comma == std::string::npos ? std::string::npos : comma - s)));
    if (comma == std::string::npos) break;
    s = comma + 1;
  }
  size_t ell = 0;
  std::vector<std::vector<int>> full(terms.size());  // per input dim: its label
  for (size_t t = 0; t < terms.size(); ++t) {
    size_t letters = size_t(std::count_if(terms[t].begin(), terms[t].end(), [](int l) { return l >= 0; }));
    ell = std::max(ell, ds[t].size() - letters);
  }
  std::map<int, int64_t> size;
  std::map<int, int> count;
  for (size_t t = 0; t < terms.size(); ++t) {
    size_t letters = size_t(std::count_if(terms[t].begin(), terms[t].end(), [](int l) { return l >= 0; }));
    size_t e = ds[t].size() - letters;
    for (int l : terms[t]) {
      if (l < 0)
        for (size_t j = 0; j < e; ++j) full[t].push_back(int(1000 + ell - e + j));
      else
        full[t].push_back(l), count[l]++;
    }
    for (size_t a = 0; a < full[t].size(); ++a) size[full[t][a]] = std::max(size[full[t][a]], ds[t][a]);
  }
  std::vector<int> out;
  for (size_t j = 0; j < ell; ++j) out.push_back(int(1000 + j));
  if (arrow == std::string::npos) {
    for (auto [l, n] : count)
      if (n == 1) out.push_back(l);
  } else {
    out.clear();
    for (int l : parse(equation.substr(arrow + 2))) {
      if (l < 0)
        for (size_t j = 0; j < ell; ++j) out.push_back(int(1000 + j));
      else
        out.push_back(l);
    }
  }
  od.clear();
  for (int l : out) od.push_back(size[l]);
  std::vector<int> all;
  Dims extent;
  for (auto [l, n] : size) all.push_back(l), extent.push_back(n);
  std::vector<double> y(size_t(numel(od)), 0.0);
  for (int64_t p = 0; p < numel(extent); ++p) {
    Dims c = unravel(p, extent);
    std::map<int, int64_t> at;
    for (size_t a = 0; a < all.size(); ++a) at[all[a]] = c[a];
    double prod = 1.0;
    for (size_t t = 0; t < terms.size(); ++t) {
      Dims ic;
      for (size_t a = 0; a < full[t].size(); ++a) ic.push_back(ds[t][a] == 1 ? 0 : at[full[t][a]]);
      prod *= xs[t][size_t(ravel(ic, ds[t]))];
    }
    Dims oc;
    for (int l : out) oc.push_back(at[l]);
    y[size_t(ravel(oc, od))] += prod;
  }
  return y;
}

std::vector<double> max_unpool(const std::vector<double>& x, const std::vector<int64_t>& idx, const Dims& unpooled,
                               const Dims& out) {
  std::vector<double> y(size_t(numel(out)), 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= numel(unpooled)) continue;
    y[size_t(ravel(unravel(idx[i], unpooled), out))] = x[i];
  }
  return y;
}

std::vector<int64_t> non_zero(const std::vector<double>& x, const Dims& d, Dims& od) {
  std::vector<Dims> hits;
  for (int64_t p = 0; p < numel(d); ++p)
    if (x[size_t(p)] != 0.0) hits.push_back(unravel(p, d));
  od = {int64_t(d.size()), int64_t(hits.size())};
  std::vector<int64_t> out;
  for (size_t a = 0; a < d.size(); ++a)
    for (auto& h : hits) out.push_back(h[a]);
  return out;
}

}  // namespace cldl::ref
