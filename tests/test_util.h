#pragma once
// Shared test helpers: random tensors written element by element (never all
// zeros), reading any tensor back as float64 in logical order (independent
// of the library's cast kernels), relative error ||out - ref|| / ||ref|| with
// a tolerance per dtype, and small float64 reference building blocks
// (broadcasting, reductions, matrix products).
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <numeric>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <halfgrad/core/alias.h>
#include <halfgrad/autograd/gradcheck.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/core/dtype.h>
#include <halfgrad/core/error.h>
#include <halfgrad/core/format.h>
#include <halfgrad/core/half.h>
#include <halfgrad/core/random.h>
#include <halfgrad/core/tensor.h>
#include <halfgrad/ops/ops.h>

#include "require_cuda.h"

namespace hgtest {

using halfgrad::BFloat16;
using halfgrad::DType;
using halfgrad::Half;
using halfgrad::Shape;
using halfgrad::Tensor;
using halfgrad::TensorOptions;

inline const std::vector<DType> kFloatDTypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
inline const std::vector<DType> kAllDTypes = {DType::Float32, DType::Float64, DType::Float16,
                                              DType::BFloat16, DType::Int64,   DType::Bool};

// Tolerance on ||out - ref|| / ||ref|| per output dtype (docs/numerics.md, "Tolerances used by the tests").
inline double tol(DType t) {
  switch (t) {
    case DType::Float64: return 1e-12;
    case DType::Float32: return 1e-5;
    case DType::BFloat16: return 1e-2;
    case DType::Float16: return 2e-3;
    default: return 0.0;  // int64 and bool: exact
  }
}

// The unit roundoff of a dtype, half its epsilon: a value rounded to the dtype
// is within this fraction of itself (normal range).
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::Float64: return 0x1p-53;
    case DType::Float32: return 0x1p-24;
    case DType::Float16: return 0x1p-11;
    case DType::BFloat16: return 0x1p-8;
    default: return 0.0;
  }
}

inline std::string dname(DType t) { return std::string(halfgrad::dtype_name(t)); }

// The tests' own random stream (separate from the library's generator).
inline std::mt19937_64& rng() {
  static std::mt19937_64 g(20240601);
  return g;
}

// Shape arithmetic: the library's own (core/tensor.h, autograd/gradcheck.h).
inline int64_t numel(const Shape& s) { return halfgrad::shape_numel(s); }
using halfgrad::contiguous_strides;
using halfgrad::autograd::gradcheck_detail::unravel;

inline int64_t ravel(const Shape& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// ---- raw element access (no library kernels involved) ---------------------------------------
// A CUDA tensor's storage holds a device pointer: reading it here would crash
// (SIGSEGV). The helpers below read host copies; a raw read of a device tensor
// is a test failure that says so.
inline void require_host(const Tensor& t, const char* what) {
  if (!t.device().is_cpu()) FAIL(what << ": " << t.describe() << " lives on the device; read a host copy (.cpu())");
}

// `t` itself on the CPU, else a host copy of it (the device's bytes, moved: no cast).
inline Tensor host(const Tensor& t) { return t.device().is_cpu() ? t : t.detach().cpu(); }

inline double read_raw(const Tensor& t, int64_t off) {
  require_host(t, "read_raw");
  const void* base = t.storage()->data;
  switch (t.dtype()) {
    case DType::Float32: return static_cast<const float*>(base)[off];
    case DType::Float64: return static_cast<const double*>(base)[off];
    case DType::Float16: return halfgrad::half_bits_to_float(static_cast<const uint16_t*>(base)[off]);
    case DType::BFloat16: return halfgrad::bfloat16_bits_to_float(static_cast<const uint16_t*>(base)[off]);
    case DType::Int64: return static_cast<double>(static_cast<const int64_t*>(base)[off]);
    case DType::Bool: return static_cast<const bool*>(base)[off] ? 1.0 : 0.0;
  }
  return 0;
}

// Round v to the dtype (float64 -> float32 first for the half types, then
// round to nearest even) and store it.
inline void write_raw(const Tensor& t, int64_t off, double v) {
  require_host(t, "write_raw");
  void* base = t.storage()->data;
  switch (t.dtype()) {
    case DType::Float32: static_cast<float*>(base)[off] = static_cast<float>(v); break;
    case DType::Float64: static_cast<double*>(base)[off] = v; break;
    case DType::Float16:
      static_cast<uint16_t*>(base)[off] = halfgrad::float_to_half_bits(static_cast<float>(v));
      break;
    case DType::BFloat16:
      static_cast<uint16_t*>(base)[off] = halfgrad::float_to_bfloat16_bits(static_cast<float>(v));
      break;
    case DType::Int64: static_cast<int64_t*>(base)[off] = static_cast<int64_t>(v); break;
    case DType::Bool: static_cast<bool*>(base)[off] = v != 0; break;
  }
}

inline std::vector<int64_t> offsets(const Tensor& t) { return halfgrad::autograd::gradcheck_detail::element_offsets(t); }

// A tensor's values in row-major logical order, as float64 (any strides; a
// CUDA tensor is read through a host copy).
inline std::vector<double> values(const Tensor& t) {
  REQUIRE(t.defined());
  const Tensor h = host(t);
  std::vector<double> out;
  out.reserve(static_cast<size_t>(h.numel()));
  for (int64_t off : offsets(h)) out.push_back(read_raw(h, off));
  return out;
}

inline std::vector<int64_t> ivalues(const Tensor& t) {
  REQUIRE(t.dtype() == DType::Int64);
  const Tensor h = host(t);
  const auto* base = static_cast<const int64_t*>(h.storage()->data);
  std::vector<int64_t> out;
  for (int64_t off : offsets(h)) out.push_back(base[off]);
  return out;
}

// Bitwise equality wherever the tensors live (CUDA ones are brought over);
// both undefined counts as equal.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  const Tensor x = a.detach().cpu().contiguous(), y = b.detach().cpu().contiguous();
  // An empty tensor may have no storage: memcmp must not see its null pointer.
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         (x.numel() == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * halfgrad::itemsize(x.dtype())) == 0);
}

// A reduction's expected shape: dims (non-negative) removed, or kept as 1.
inline Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    const bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!r) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Dims as the ops see them: negative ones wrapped for `nd` dims, sorted.
inline std::vector<int64_t> wrap_dims(const Shape& dims, int64_t nd) {
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(d < 0 ? d + nd : d);
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<uint16_t> bits16(const Tensor& t) {
  REQUIRE((t.dtype() == DType::Float16 || t.dtype() == DType::BFloat16));
  const Tensor h = host(t);
  const auto* base = static_cast<const uint16_t*>(h.storage()->data);
  std::vector<uint16_t> out;
  for (int64_t off : offsets(h)) out.push_back(base[off]);
  return out;
}

// A new contiguous CPU tensor holding `v` (rounded to dtype by write_raw).
inline Tensor make(const std::vector<double>& v, const Shape& shape, DType dt) {
  REQUIRE(numel(shape) == static_cast<int64_t>(v.size()));
  Tensor t = halfgrad::make_tensor(shape, TensorOptions(dt));
  for (size_t i = 0; i < v.size(); ++i) write_raw(t, static_cast<int64_t>(i), v[i]);
  return t;
}

// 0, 1, ..., n-1 in the given shape and dtype.
inline Tensor iota(const Shape& shape, DType dt = DType::Float32) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  std::iota(v.begin(), v.end(), 0.0);
  return make(v, shape, dt);
}
// Two tensors that are views of one storage.
inline bool same_storage(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

// Uniform values in [lo, hi) rounded to dtype; int64: integers in [lo, hi].
// Regenerated until not all zeros.
inline Tensor uniform(const Shape& shape, DType dt, double lo = -2.0, double hi = 2.0) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  bool nonzero = v.empty();
  while (!nonzero) {
    if (dt == DType::Int64 || dt == DType::Bool) {
      std::uniform_int_distribution<int64_t> d(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
      for (auto& x : v) x = static_cast<double>(d(rng()));
    } else {
      std::uniform_real_distribution<double> d(lo, hi);
      for (auto& x : v) x = d(rng());
    }
    Tensor t = make(v, shape, dt);
    for (double x : values(t)) nonzero = nonzero || x != 0;
    if (nonzero) return t;
  }
  return make(v, shape, dt);
}

// Values with magnitude in [lo, hi] and a random sign: away from 0 (kinks, poles).
inline Tensor away_from_zero(const Shape& shape, DType dt, double lo = 0.25, double hi = 2.0) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  std::uniform_real_distribution<double> d(lo, hi);
  std::bernoulli_distribution sign(0.5);
  for (auto& x : v) x = sign(rng()) ? d(rng()) : -d(rng());
  return make(v, shape, dt);
}

// Random bool tensor with both values present.
inline Tensor random_bool(const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  std::bernoulli_distribution b(0.5);
  for (auto& x : v) x = b(rng()) ? 1 : 0;
  if (v.size() >= 2) {
    v[0] = 1;
    v[1] = 0;
  }
  return make(v, shape, DType::Bool);
}

// A float64 leaf that requires grad, for gradcheck.
inline Tensor leaf(const Shape& shape, double lo = -2.0, double hi = 2.0) {
  Tensor t = uniform(shape, DType::Float64, lo, hi);
  t.requires_grad_(true);
  return t;
}
inline Tensor leaf_away(const Shape& shape, double lo = 0.25, double hi = 2.0) {
  Tensor t = away_from_zero(shape, DType::Float64, lo, hi);
  t.requires_grad_(true);
  return t;
}
// A float64 leaf holding exactly `v`.
inline Tensor leaf_from(const std::vector<double>& v, const Shape& shape) {
  Tensor t = make(v, shape, DType::Float64);
  t.requires_grad_(true);
  return t;
}
// A non-contiguous float64 leaf: logical `shape` (2-d or more), stored with
// its last two dims swapped (like a transposed tensor, but without a grad_fn).
inline Tensor strided_leaf(const Shape& shape, double lo = -2.0, double hi = 2.0) {
  REQUIRE(shape.size() >= 2);
  Shape stored = shape;
  std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
  const Tensor base = uniform(stored, DType::Float64, lo, hi);
  Shape strides = base.strides();
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  Tensor t = halfgrad::alias_with(base, shape, strides, 0);
  t.requires_grad_(true);
  return t;
}
// float64 leaf of distinct values (no ties for max/maximum), |x| >= 0.1 apart.
// `shift` moves the grid: leaves with shifts 0 and 0.05 never tie with each other.
inline Tensor leaf_distinct(const Shape& shape, double shift = 0.0) {
  const int64_t n = numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.1 * static_cast<double>(i - n / 2) + 0.025 + shift;
  std::shuffle(v.begin(), v.end(), rng());
  Tensor t = make(v, shape, DType::Float64);
  t.requires_grad_(true);
  return t;
}

// ---- comparison ---------------------------------------------------------------------------------
struct Compare {
  bool ok = false;
  double err = 0;
  std::string msg;
};

// ||out - ref|| / ||ref|| (plain ||out - ref|| when ref is all zeros) against
// tol; a NaN or inf in out where ref is finite never passes.
inline Compare compare(const Tensor& out, const std::vector<double>& ref, double tolerance) {
  Compare c;
  if (!out.defined()) {
    c.msg = "output is undefined";
    return c;
  }
  const std::vector<double> o = values(out);
  if (o.size() != ref.size()) {
    c.msg = fmt::format("output {} has {} elements, reference {}", out.describe(), o.size(), ref.size());
    return c;
  }
  double num = 0, den = 0;
  bool finite = true;
  size_t worst = 0;
  double worst_d = -1;
  for (size_t i = 0; i < o.size(); ++i) {
    if (std::isnan(ref[i]) && std::isnan(o[i])) continue;
    if (std::isinf(ref[i]) && o[i] == ref[i]) continue;
    if (!std::isfinite(o[i]) || !std::isfinite(ref[i])) finite = false;
    const double d = o[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    if (std::fabs(d) > worst_d || !std::isfinite(d)) {
      worst_d = std::fabs(d);
      worst = i;
    }
  }
  c.err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (!finite) c.err = std::numeric_limits<double>::infinity();
  c.ok = c.err <= tolerance;
  c.msg = fmt::format("{}: rel err {:.3g} (tol {:.1g})", out.describe(), c.err, tolerance);
  if (!o.empty())
    c.msg += fmt::format("; worst at flat index {}: got {:.9g}, expected {:.9g}", worst, o[worst], ref[worst]);
  return c;
}

inline Compare compare(const Tensor& out, const std::vector<double>& ref) {
  return compare(out, ref, tol(out.defined() ? out.dtype() : DType::Float64));
}

// Element-by-element equality (bool/int64 outputs, exact cases).
inline Compare compare_exact(const Tensor& out, const std::vector<double>& ref) {
  Compare c;
  const std::vector<double> o = values(out);
  if (o.size() != ref.size()) {
    c.msg = fmt::format("output {} has {} elements, reference {}", out.describe(), o.size(), ref.size());
    return c;
  }
  c.ok = true;
  for (size_t i = 0; i < o.size(); ++i) {
    const bool same = o[i] == ref[i] || (std::isnan(o[i]) && std::isnan(ref[i]));
    if (!same) {
      c.ok = false;
      c.msg = fmt::format("{}: element {} is {}, expected {}", out.describe(), i, o[i], ref[i]);
      return c;
    }
  }
  c.msg = fmt::format("{}: exact", out.describe());
  return c;
}

// ---- float64 references ----------------------------------------------------------------------
inline Shape broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    REQUIRE((da == db || da == 1 || db == 1));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Values of `from`-shaped v, broadcast to `to`.
inline std::vector<double> expand(const std::vector<double>& v, const Shape& from, const Shape& to) {
  std::vector<double> out(static_cast<size_t>(numel(to)));
  const size_t lead = to.size() - from.size();
  for (int64_t i = 0; i < numel(to); ++i) {
    const Shape idx = unravel(i, to);
    Shape src(from.size());
    for (size_t d = 0; d < from.size(); ++d) src[d] = from[d] == 1 ? 0 : idx[lead + d];
    out[static_cast<size_t>(i)] = v[static_cast<size_t>(ravel(src, from))];
  }
  return out;
}

inline std::vector<double> map1(const std::vector<double>& a, const std::function<double(double)>& f) {
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = f(a[i]);
  return out;
}

// f applied elementwise with broadcasting: the reference of a binary op.
inline std::vector<double> map2(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape s = broadcast(a.shape(), b.shape());
  const auto va = expand(values(a), a.shape(), s), vb = expand(values(b), b.shape(), s);
  std::vector<double> out(va.size());
  for (size_t i = 0; i < va.size(); ++i) out[i] = f(va[i], vb[i]);
  return out;
}

enum class RefReduce { Sum, Mean, Max, ArgMax };

// Reduce v (shape s) over dims (non-negative); the result in keepdim layout order
// (same element order with or without keepdim).
inline std::vector<double> reduce(const std::vector<double>& v, const Shape& s, std::vector<int64_t> dims,
                                  RefReduce op) {
  Shape out_shape = s;
  for (int64_t d : dims) out_shape[static_cast<size_t>(d)] = 1;
  const int64_t n_out = numel(out_shape);
  std::vector<double> acc(static_cast<size_t>(n_out), op == RefReduce::Max || op == RefReduce::ArgMax
                                                          ? -std::numeric_limits<double>::infinity()
                                                          : 0.0);
  std::vector<double> arg(static_cast<size_t>(n_out), -1);
  std::vector<int64_t> count(static_cast<size_t>(n_out), 0);
  for (int64_t i = 0; i < numel(s); ++i) {
    Shape idx = unravel(i, s);
    int64_t pos = 0;
    for (int64_t d : dims) pos = idx[static_cast<size_t>(d)];  // only meaningful for one dim (argmax)
    for (int64_t d : dims) idx[static_cast<size_t>(d)] = 0;
    const auto o = static_cast<size_t>(ravel(idx, out_shape));
    const double x = v[static_cast<size_t>(i)];
    if (op == RefReduce::Sum || op == RefReduce::Mean) acc[o] += x;
    else if (x > acc[o] || arg[o] < 0) {  // strictly greater: the first of ties wins
      acc[o] = x;
      arg[o] = static_cast<double>(pos);
    }
    ++count[o];
  }
  if (op == RefReduce::Mean)
    for (size_t o = 0; o < acc.size(); ++o) acc[o] /= static_cast<double>(count[o]);
  return op == RefReduce::ArgMax ? arg : acc;
}

// [m,k] @ [k,n] in float64.
inline std::vector<double> matmul2d(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                                    int64_t n) {
  std::vector<double> out(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[static_cast<size_t>(i * k + p)] * b[static_cast<size_t>(p * n + j)];
      out[static_cast<size_t>(i * n + j)] = s;
    }
  return out;
}

// The IEEE rounding of a float64 value to dtype, as a float64 (via write_raw/read_raw).
inline double round_to(double v, DType dt) {
  Tensor t = halfgrad::make_tensor({1}, TensorOptions(dt));
  write_raw(t, 0, v);
  return read_raw(t, 0);
}

inline std::vector<double> round_all(std::vector<double> v, DType dt) {
  for (auto& x : v) x = round_to(x, dt);
  return v;
}

// ---- running code that may crash ------------------------------------------------------------
// Runs f in a forked child so that a crash (a known bug) fails one test
// instead of killing the whole test executable. The child's output is
// discarded; what f threw comes back through a pipe. Use only for small,
// single-threaded work (no OpenMP regions after fork).
//
// CUDA cannot be used in a forked child (the runtime's state does not survive
// fork: "initialization error"), so in the CUDA suites (runners started with
// --require-cuda, require_cuda.h) f runs in this process instead: a crash then
// ends the executable, which the GPU check sees, as it runs each CUDA case in
// its own process. The CPU suites keep the child.
struct ChildResult {
  bool crashed = false;      // killed by a signal (e.g. SIGSEGV)
  int signal = 0;
  bool returned = false;     // f returned normally
  bool threw_error = false;  // f threw halfgrad::Error
  bool threw_other = false;  // f threw something else
  std::string message;       // what() of the exception
  std::string describe() const {
    if (crashed) return fmt::format("crashed with signal {} ({})", signal, strsignal(signal));
    if (threw_error) return "threw halfgrad::Error: " + message;
    if (threw_other) return "threw another exception (not halfgrad::Error): " + message;
    return returned ? "returned normally" : "exited abnormally";
  }
};

// f in this process: what it threw, as run_in_child reports it.
inline ChildResult run_in_process(const std::function<void()>& f) {
  ChildResult r;
  try {
    f();
    r.returned = true;
  } catch (const halfgrad::Error& e) {
    r.threw_error = true;
    r.message = e.what();
  } catch (const std::exception& e) {
    r.threw_other = true;
    r.message = e.what();
  } catch (...) {
    r.threw_other = true;
  }
  return r;
}

inline ChildResult run_in_child(const std::function<void()>& f) {
  if (cuda_suite()) return run_in_process(f);
  ChildResult r;
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(s, SIG_DFL);  // not Catch's handlers
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    char code = 'R';
    std::string msg;
    try {
      f();
    } catch (const halfgrad::Error& e) {
      code = 'E';
      msg = e.what();
    } catch (const std::exception& e) {
      code = 'X';
      msg = e.what();
    } catch (...) {
      code = 'X';
    }
    [[maybe_unused]] auto w1 = write(fds[1], &code, 1);
    [[maybe_unused]] auto w2 = write(fds[1], msg.data(), msg.size());
    _exit(0);
  }
  close(fds[1]);
  std::string buf;
  char tmp[4096];
  ssize_t n;
  while ((n = read(fds[0], tmp, sizeof tmp)) > 0) buf.append(tmp, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    r.crashed = true;
    r.signal = WTERMSIG(status);
    return r;
  }
  if (!buf.empty()) {
    r.returned = buf[0] == 'R';
    r.threw_error = buf[0] == 'E';
    r.threw_other = buf[0] == 'X';
    r.message = buf.substr(1);
  }
  return r;
}

// f, killed by SIGALRM after `seconds`: a hang fails the case instead of
// blocking the suite. Meant for run_in_child's child process, which the alarm
// ends (in-process, in the CUDA suites, it would end the runner: a failure too).
inline std::function<void()> within(unsigned seconds, std::function<void()> f) {
  return [seconds, f = std::move(f)] {
    ::alarm(seconds);
    f();
  };
}

// Each case, run through run_in_child (a child process; in-process in the
// CUDA suites), must throw a halfgrad::Error (not crash,
// not return) whose message contains each of `says`.
struct ErrorCase {
  const char* what;
  std::function<void()> f;
  std::vector<const char*> says;
};
inline void expect_errors(const std::vector<ErrorCase>& cases) {
  for (const auto& c : cases) {
    const auto r = run_in_child(c.f);
    INFO(c.what << ": " << r.describe());
    CHECK(r.threw_error);
    for (const char* s : c.says) CHECK_THAT(r.message, Catch::Matchers::Contains(s));
  }
}

}  // namespace hgtest

// CHECK that out matches the float64 reference within the dtype's tolerance
// (or an explicit one), printing the error and the worst element on failure.
#define HG_CHECK_CLOSE(out, ref)                 \
  do {                                           \
    const auto hg_c_ = ::hgtest::compare(out, ref); \
    INFO(hg_c_.msg);                             \
    CHECK(hg_c_.ok);                             \
  } while (0)

#define HG_CHECK_CLOSE_TOL(out, ref, tolerance)              \
  do {                                                       \
    const auto hg_c_ = ::hgtest::compare(out, ref, tolerance); \
    INFO(hg_c_.msg);                                         \
    CHECK(hg_c_.ok);                                         \
  } while (0)

#define HG_CHECK_EXACT(out, ref)                       \
  do {                                                 \
    const auto hg_c_ = ::hgtest::compare_exact(out, ref); \
    INFO(hg_c_.msg);                                   \
    CHECK(hg_c_.ok);                                   \
  } while (0)

// Run gradcheck without throwing; CHECK it passed and show its report.
#define HG_GRADCHECK(fn, ...)                                                      \
  do {                                                                             \
    ::halfgrad::autograd::GradcheckOptions hg_o_;                                  \
    hg_o_.raise = false;                                                           \
    const auto hg_r_ = ::halfgrad::autograd::gradcheck(fn, __VA_ARGS__, hg_o_);    \
    INFO(hg_r_.message);                                                           \
    CHECK(hg_r_.ok);                                                               \
  } while (0)
