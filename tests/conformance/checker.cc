#include "checker.h"

#include <cstdint>
#include <functional>
#include <memory>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

namespace accl {
namespace conformance {

namespace {

// ---- element access, written independently of the library's kernels:
// float16 through the compiler's _Float16, bfloat16 by bit rounding here.

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t rounding = 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
float fromBf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void putFloat(void* p, size_t i, DataType t, long double v) {
  switch (t) {
    case DataType::Float16: {
      _Float16 h = static_cast<_Float16>(static_cast<float>(v));
      std::memcpy(static_cast<char*>(p) + 2 * i, &h, 2);
      return;
    }
    case DataType::BFloat16: {
      uint16_t b = toBf16(static_cast<float>(v));
      std::memcpy(static_cast<char*>(p) + 2 * i, &b, 2);
      return;
    }
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DataType::Float64: static_cast<double*>(p)[i] = static_cast<double>(v); return;
    default: break;
  }
}

long double getFloat(const void* p, size_t i, DataType t) {
  switch (t) {
    case DataType::Float16: {
      _Float16 h;
      std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2);
      return static_cast<long double>(static_cast<float>(h));
    }
    case DataType::BFloat16: {
      uint16_t b;
      std::memcpy(&b, static_cast<const char*>(p) + 2 * i, 2);
      return fromBf16(b);
    }
    case DataType::Float32: return static_cast<const float*>(p)[i];
    case DataType::Float64: return static_cast<const double*>(p)[i];
    default: return 0;
  }
}

// Integers and bool as raw 64-bit patterns (sign-extended for signed types).
uint64_t getInt(const void* p, size_t i, DataType t) {
  switch (t) {
    case DataType::Int8: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int8_t*>(p)[i]));
    case DataType::Uint8:
    case DataType::Bool: return static_cast<const uint8_t*>(p)[i];
    case DataType::Int32: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int32_t*>(p)[i]));
    case DataType::Uint32: return static_cast<const uint32_t*>(p)[i];
    case DataType::Int64: return static_cast<uint64_t>(static_cast<const int64_t*>(p)[i]);
    case DataType::Uint64: return static_cast<const uint64_t*>(p)[i];
    default: return 0;
  }
}

void putInt(void* p, size_t i, DataType t, uint64_t v) {
  size_t s = dataTypeSize(t);
  std::memcpy(static_cast<char*>(p) + s * i, &v, s);  // little-endian truncation
}

uint64_t truncBits(uint64_t v, DataType t) {
  uint64_t x = 0;
  putInt(&x, 0, t, v);
  return getInt(&x, 0, t);
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The input element `i` of rank `r` for this case, as stored in the dtype.
// Values come from a per-case table of kTable random entries, indexed by
// (i + r * kStride) mod kTable: every rank sees a different sequence, and the
// reference costs a table lookup per (rank, element).
constexpr size_t kTable = 4099;  // prime
constexpr size_t kStride = 1031;

struct Gen {
  DataType t;
  ReduceKind kind;
  uint64_t seed;
  std::vector<long double> f;  // stored values, floating-point dtypes
  std::vector<uint64_t> bits;  // stored values, integers and bool
  std::vector<char> raw;       // stored values as bytes of the dtype

  Gen(DataType dt, ReduceKind k, uint64_t s) : t(dt), kind(k), seed(s) {
    size_t es = dataTypeSize(t);
    raw.assign(kTable * es, 0);
    f.resize(kTable);
    bits.resize(kTable);
    for (size_t j = 0; j < kTable; ++j) {
      make(raw.data(), j, mix(seed * 0x100000001b3ull + j));
      if (isFloatingPoint(t)) f[j] = getFloat(raw.data(), j, t);
      else bits[j] = getInt(raw.data(), j, t);
    }
  }

  static size_t index(int r, size_t i) { return (i + static_cast<size_t>(r) * kStride) % kTable; }

  void make(void* p, size_t at, uint64_t x) const {
    if (isFloatingPoint(t)) {
      long double v;
      if (kind == ReduceKind::Prod) {
        v = 0.75L + static_cast<long double>(x % 501) / 1000.0L;  // [0.75, 1.25]
        if ((x >> 20) & 1) v = -v;
      } else {
        v = (static_cast<long double>(x % 20001) - 10000.0L) / 10000.0L;  // [-1, 1]
      }
      putFloat(p, at, t, v);
    } else if (t == DataType::Bool) {
      // Mostly true for and-like ops, mostly false for or-like ops, so results vary.
      bool andLike = kind == ReduceKind::Prod || kind == ReduceKind::Min || kind == ReduceKind::BAnd;
      putInt(p, at, t, andLike ? (x % 8 != 0) : (x % 8 == 0));
    } else if (kind == ReduceKind::Prod) {
      putInt(p, at, t, static_cast<uint64_t>(static_cast<int64_t>(x % 7) - (isSigned() ? 3 : 0)));
    } else if (kind == ReduceKind::Sum) {
      putInt(p, at, t, static_cast<uint64_t>(static_cast<int64_t>(x % 255) - (isSigned() ? 127 : 0)));
    } else {
      putInt(p, at, t, x);  // full range: min/max/bitwise, and wraparound
    }
  }
  // Rank r's elements [i0, i0 + len) are consecutive table entries with one
  // wraparound per kTable: calls fn(k, j, m) for elements i0+k .. i0+k+m-1
  // stored at table entries j .. j+m-1.
  template <typename F>
  static void forRuns(int r, size_t i0, size_t len, F&& fn) {
    size_t k = 0;
    while (k < len) {
      size_t j = index(r, i0 + k);
      size_t m = std::min(len - k, kTable - j);
      fn(k, j, m);
      k += m;
    }
  }
  // Writes rank r's elements [i0, i0 + len) at element `at` of p.
  void fill(void* p, size_t at, int r, size_t i0, size_t len) const {
    size_t es = dataTypeSize(t);
    forRuns(r, i0, len, [&](size_t k, size_t j, size_t m) {
      std::memcpy(static_cast<char*>(p) + (at + k) * es, raw.data() + j * es, m * es);
    });
  }
  bool isSigned() const { return t == DataType::Int8 || t == DataType::Int32 || t == DataType::Int64; }
  long double valueF(int r, size_t i) const { return f[index(r, i)]; }
  uint64_t valueI(int r, size_t i) const { return bits[index(r, i)]; }
};

struct Expect {
  long double value = 0;  // floating point
  long double tol = 0;
  uint64_t bits = 0;      // integers / bool
};

// The reduction of element i over `ranks` (all n ranks), with its error bound.
Expect reduceRef(const Gen& g, const ReduceOp& op, int n, size_t i) {
  Expect e;
  if (isFloatingPoint(g.t)) {
    long double u = unitRoundoff(g.t);
    long double acc = 0, absSum = 0;
    long double s = op.kind == ReduceKind::PremulSum ? static_cast<long double>(op.scalar) : 1.0L;
    for (int r = 0; r < n; ++r) {
      long double x = g.valueF(r, i);
      switch (op.kind) {
        case ReduceKind::Sum:
        case ReduceKind::Avg: acc += x; absSum += std::fabs(x); break;
        case ReduceKind::PremulSum: acc += s * x; absSum += std::fabs(s * x); break;
        case ReduceKind::Prod: acc = (r == 0 ? x : acc * x); break;
        case ReduceKind::Min: acc = (r == 0 || x < acc) ? x : acc; break;
        case ReduceKind::Max: acc = (r == 0 || x > acc) ? x : acc; break;
        default: break;
      }
    }
    // First-order bounds of recursive floating-point evaluation in any order:
    // a sum of n terms errs by at most (n-1)u * sum|x|; a product by (n-1)u |p|;
    // premul adds one rounding per term, avg one division; the result is
    // rounded once more into the dtype (u |ref|). Min/max are exact.
    switch (op.kind) {
      case ReduceKind::Sum: e.tol = (n - 1) * u * absSum + u * std::fabs(acc); break;
      case ReduceKind::PremulSum: e.tol = n * u * absSum + u * std::fabs(acc); break;
      case ReduceKind::Avg:
        acc /= n;
        e.tol = ((n - 1) * u * absSum) / n + 2 * u * std::fabs(acc);
        break;
      case ReduceKind::Prod: e.tol = n * u * std::fabs(acc); break;
      default: e.tol = 0;
    }
    // Results below the smallest normal lose relative precision; allow the
    // subnormal spacing per operation.
    long double subnormal = g.t == DataType::Float16 ? std::ldexp(1.0L, -24)
                            : g.t == DataType::BFloat16 ? std::ldexp(1.0L, -133)
                            : g.t == DataType::Float32 ? std::ldexp(1.0L, -149) : 0;
    e.tol += n * subnormal;
    e.value = acc;
    return e;
  }
  uint64_t acc = 0;
  for (int r = 0; r < n; ++r) {
    uint64_t x = g.valueI(r, i);
    if (r == 0) {
      acc = x;
      continue;
    }
    bool sgn = g.isSigned();
    switch (op.kind) {
      case ReduceKind::Sum: acc = g.t == DataType::Bool ? (acc | x) : acc + x; break;
      case ReduceKind::Prod: acc = g.t == DataType::Bool ? (acc & x) : acc * x; break;
      case ReduceKind::Min: acc = sgn ? static_cast<uint64_t>(std::min<int64_t>(static_cast<int64_t>(acc), static_cast<int64_t>(x))) : std::min(acc, x); break;
      case ReduceKind::Max: acc = sgn ? static_cast<uint64_t>(std::max<int64_t>(static_cast<int64_t>(acc), static_cast<int64_t>(x))) : std::max(acc, x); break;
      case ReduceKind::BAnd: acc &= x; break;
      case ReduceKind::BOr: acc |= x; break;
      case ReduceKind::BXor: acc ^= x; break;
      default: break;
    }
    acc = truncBits(acc, g.t);
  }
  e.bits = acc;
  return e;
}

Expect plainRef(const Gen& g, int r, size_t i) {
  Expect e;
  if (isFloatingPoint(g.t)) e.value = g.valueF(r, i);
  else e.bits = g.valueI(r, i);
  return e;
}

class Errors {
 public:
  explicit Errors(const Case& c, int rank) : prefix_("rank " + std::to_string(rank) + " " + c.describe() + ": ") {}
  void add(const std::string& s) {
    if (list_.size() < 5) list_.push_back(prefix_ + s);
    else if (list_.size() == 5) list_.push_back(prefix_ + "... (more mismatches)");
  }
  // Compares element `i` of `buf` (named `what`) with `e`.
  void check(const Buffer& buf, size_t i, const Expect& e, const char* what, size_t logical) {
    if (list_.size() > 5) return;
    if (isFloatingPoint(buf.dtype)) {
      long double got = getFloat(buf.data, i, buf.dtype);
      if (std::isnan(static_cast<double>(got)) || std::fabs(got - e.value) > e.tol) {
        std::ostringstream os;
        os.precision(10);
        os << what << "[" << logical << "] = " << static_cast<double>(got) << ", expected "
           << static_cast<double>(e.value) << " +- " << static_cast<double>(e.tol);
        add(os.str());
      }
    } else {
      uint64_t got = getInt(buf.data, i, buf.dtype);
      if (got != e.bits) {
        std::ostringstream os;
        os << what << "[" << logical << "] = " << static_cast<int64_t>(got) << ", expected " << static_cast<int64_t>(e.bits);
        add(os.str());
      }
    }
  }
  // Element `at + k` of `buf` must be bit-identical to rank r's element i0 + k
  // (copies: broadcast, gathers, scatter, alltoall, untouched inputs). Compared
  // run by run; a differing run is reported element by element.
  void checkCopy(const Gen& g, const Buffer& buf, size_t at, int r, size_t i0, size_t len, const char* what) {
    size_t es = dataTypeSize(buf.dtype);
    const char* base = static_cast<const char*>(buf.data);
    Gen::forRuns(r, i0, len, [&](size_t k, size_t j, size_t m) {
      if (list_.size() > 5 || std::memcmp(base + (at + k) * es, g.raw.data() + j * es, m * es) == 0) return;
      for (size_t q = 0; q < m; ++q) check(buf, at + k + q, plainRef(g, r, i0 + k + q), what, at + k + q);
    });
  }
  // Element k of `buf` against the reduction of element i0 + k over all ranks.
  // The inputs repeat every kTable elements, so the reference does too: it is
  // computed once per table entry.
  void checkReduced(const Gen& g, const ReduceOp& op, int n, const Buffer& buf, size_t i0, size_t len, const char* what);
  std::vector<std::string> take() { return std::move(list_); }

 private:
  std::string prefix_;
  std::vector<std::string> list_;
};

void Errors::checkReduced(const Gen& g, const ReduceOp& op, int n, const Buffer& buf, size_t i0, size_t len,
                          const char* what) {
  if (len == 0) return;
  size_t es = dataTypeSize(buf.dtype);
  std::vector<Expect> ref(std::min(len, kTable));
  for (size_t k = 0; k < ref.size(); ++k) ref[k] = reduceRef(g, op, n, i0 + k);
  if (!isFloatingPoint(buf.dtype)) {
    // Integers and bool are exact: compare bytes against the reference stored in the dtype.
    std::vector<char> want(ref.size() * es);
    for (size_t k = 0; k < ref.size(); ++k) putInt(want.data(), k, buf.dtype, ref[k].bits);
    const char* base = static_cast<const char*>(buf.data);
    for (size_t k = 0; k < len && list_.size() <= 5; k += ref.size()) {
      size_t m = std::min(ref.size(), len - k);
      if (std::memcmp(base + k * es, want.data(), m * es) == 0) continue;
      for (size_t q = 0; q < m; ++q) check(buf, k + q, ref[q], what, k + q);
    }
    return;
  }
  for (size_t k = 0; k < len && list_.size() <= 5; ++k) check(buf, k, ref[k % ref.size()], what, k);
}

// Per-rank counts for the v-variants; the same on every rank.
std::vector<size_t> vCounts(size_t count, int n) {
  std::vector<size_t> c(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    long v = static_cast<long>(count) + (r % 3) - 1;
    c[static_cast<size_t>(r)] = static_cast<size_t>(v < 0 ? (r % 2) : v);
  }
  return c;
}

// Elements rank `src` sends to rank `dst` in alltoallv.
size_t a2avCount(size_t count, int src, int dst) {
  return count ? count + static_cast<size_t>((src + 2 * dst) % 3) : static_cast<size_t>((src + dst) % 2);
}

struct Storage {
  std::vector<char> bytes;
  Buffer buf;
  Storage(size_t n, DataType t) : bytes(n * dataTypeSize(t) + 1, static_cast<char>(0x5a)) {
    buf = Buffer(n ? bytes.data() : nullptr, n, t);
  }
};

}  // namespace

long double unitRoundoff(DataType t) {
  switch (t) {
    case DataType::Float16: return std::ldexp(1.0L, -11);
    case DataType::BFloat16: return std::ldexp(1.0L, -8);
    case DataType::Float32: return std::ldexp(1.0L, -24);
    case DataType::Float64: return std::ldexp(1.0L, -53);
    default: return 0;
  }
}

std::vector<DataType> allDataTypes() {
  std::vector<DataType> v;
  for (int i = 0; i < kNumDataTypes; ++i) v.push_back(static_cast<DataType>(i));
  return v;
}

std::vector<ReduceKind> validReductions(DataType t) {
  std::vector<ReduceKind> v;
  for (int i = 0; i < kNumReduceKinds; ++i)
    if (isValidReduction(static_cast<ReduceKind>(i), t)) v.push_back(static_cast<ReduceKind>(i));
  return v;
}

namespace {
size_t gLargeCountBytes = size_t{1} << 20;
}  // namespace

void setLargeCountBytes(size_t bytes) { gLargeCountBytes = bytes; }

std::vector<size_t> standardCounts(DataType t) {
  // 24 KiB: above the eager cells (8 KiB) and the shared-memory single-copy
  // threshold (16 KiB where each local rank has a CPU), below reduce's (32 KiB).
  // 40 KiB: above reduce's, below where a two-rank single-copy reduce splits
  // the work between the ranks (64 KiB; the root reads and reduces it all).
  return {0, 1, 7, (size_t{24} << 10) / dataTypeSize(t) + 1, (size_t{40} << 10) / dataTypeSize(t) + 5,
          gLargeCountBytes / dataTypeSize(t) + 3};
}

std::string Case::describe() const {
  std::ostringstream os;
  os << toString(op) << " " << toString(dtype);
  if (op == OpType::Allreduce || op == OpType::Reduce || op == OpType::ReduceScatter ||
      op == OpType::ReduceScatterv)
    os << " " << toString(reduce.kind);
  os << " count " << count;
  if (op == OpType::Broadcast || op == OpType::Reduce || op == OpType::Gather || op == OpType::Scatter)
    os << " root " << root;
  if (inPlace) os << " in-place";
  return os.str();
}

namespace {
// What an issued case keeps until it is checked: its buffers, the works in
// flight, and the check to run once they are done.
struct Pending {
  Gen g;
  Errors err;
  std::vector<std::unique_ptr<Storage>> storage;
  std::vector<std::shared_ptr<Work>> works;
  std::function<void()> verify;
  Pending(const Case& c, int rank) : g(c.dtype, c.reduce.kind, c.seed), err(c, rank) {}
  Buffer add(size_t n, DataType t) {
    storage.push_back(std::make_unique<Storage>(n, t));
    return storage.back()->buf;
  }
};

// Issues `c` on `pg` into `s` (buffers filled, op in flight, check set).
void issueCase(ProcessGroup& pg, const Case& c, Pending& s) {
  const int n = pg.size(), me = pg.rank();
  const DataType t = c.dtype;
  const size_t cnt = c.count;
  Pending* p = &s;
  auto fillRank = [p](const Buffer& b, size_t at, int r, size_t len) { p->g.fill(b.data, at, r, 0, len); };
  // Out-of-place ops must leave their input untouched.
  auto checkInputIntact = [p](const Buffer& in, int r) {
    p->err.checkCopy(p->g, in, 0, r, 0, in.count, "input (must be unchanged)");
  };
  switch (c.op) {
    case OpType::Allreduce:
    case OpType::Reduce: {
      Buffer in = s.add(cnt, t), out = s.add(cnt, t);
      fillRank(in, 0, me, cnt);
      Buffer dst = c.inPlace ? in : out;
      bool rooted = c.op == OpType::Reduce;
      if (rooted) {
        ReduceOptions o;
        o.op = c.reduce;
        o.root = c.root;
        s.works.push_back(pg.reduce(in, dst, o));
      } else {
        AllreduceOptions o;
        o.op = c.reduce;
        s.works.push_back(pg.allreduce(in, dst, o));
      }
      s.verify = [=] {
        // A reduce's result is defined at its root only.
        if (!rooted || me == c.root) p->err.checkReduced(p->g, c.reduce, n, dst, 0, cnt, "output");
        if (!c.inPlace) checkInputIntact(in, me);
      };
      break;
    }
    case OpType::Broadcast: {
      Buffer b = s.add(cnt, t);
      if (me == c.root) fillRank(b, 0, c.root, cnt);
      BroadcastOptions o;
      o.root = c.root;
      s.works.push_back(pg.broadcast(b, o));
      s.verify = [=] { p->err.checkCopy(p->g, b, 0, c.root, 0, cnt, "buffer"); };
      break;
    }
    case OpType::Allgather: {
      Buffer in = s.add(cnt, t), out = s.add(cnt * n, t);
      Buffer src = c.inPlace ? out.slice(static_cast<size_t>(me) * cnt, cnt) : in;
      fillRank(src, 0, me, cnt);
      s.works.push_back(pg.allgather(src, out));
      s.verify = [=] {
        for (int r = 0; r < n; ++r) p->err.checkCopy(p->g, out, r * cnt, r, 0, cnt, "output");
        if (!c.inPlace) checkInputIntact(in, me);
      };
      break;
    }
    case OpType::Allgatherv: {
      auto counts = vCounts(cnt, n);
      size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      Buffer out = s.add(total, t);
      // In place: this rank's part of the output is its input.
      Buffer in = c.inPlace ? out.slice(std::accumulate(counts.begin(), counts.begin() + me, size_t{0}),
                                        counts[static_cast<size_t>(me)])
                            : s.add(counts[static_cast<size_t>(me)], t);
      fillRank(in, 0, me, in.count);
      s.works.push_back(pg.allgatherv(in, out, counts));
      s.verify = [=] {
        size_t at = 0;
        for (int r = 0; r < n; ++r) {
          p->err.checkCopy(p->g, out, at, r, 0, counts[static_cast<size_t>(r)], "output");
          at += counts[static_cast<size_t>(r)];
        }
        if (!c.inPlace) checkInputIntact(in, me);
      };
      break;
    }
    case OpType::ReduceScatter:
    case OpType::ReduceScatterv: {
      bool v = c.op == OpType::ReduceScatterv;
      auto counts = v ? vCounts(cnt, n) : std::vector<size_t>(static_cast<size_t>(n), cnt);
      size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      size_t off = std::accumulate(counts.begin(), counts.begin() + me, size_t{0});
      size_t mine = counts[static_cast<size_t>(me)];
      Buffer in = s.add(total, t), out = s.add(mine, t);
      fillRank(in, 0, me, total);
      Buffer dst = c.inPlace ? in.slice(off, mine) : out;
      ReduceScatterOptions o;
      o.op = c.reduce;
      s.works.push_back(v ? pg.reduceScatterv(in, dst, counts, o) : pg.reduceScatter(in, dst, o));
      s.verify = [=] {
        p->err.checkReduced(p->g, c.reduce, n, dst, off, mine, "output");
        if (!c.inPlace) checkInputIntact(in, me);
      };
      break;
    }
    case OpType::Alltoall: {
      // Chunk j of rank r holds elements [j*cnt, (j+1)*cnt) of r's pattern.
      Buffer in = s.add(cnt * n, t), out = s.add(cnt * n, t);
      fillRank(in, 0, me, cnt * n);
      Buffer dst = c.inPlace ? in : out;
      s.works.push_back(pg.alltoall(in, dst));
      s.verify = [=] {
        for (int r = 0; r < n; ++r)
          p->err.checkCopy(p->g, dst, r * cnt, r, static_cast<size_t>(me) * cnt, cnt, "output");
        if (!c.inPlace) checkInputIntact(in, me);
      };
      break;
    }
    case OpType::Alltoallv: {
      std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
      for (int j = 0; j < n; ++j) {
        sc[static_cast<size_t>(j)] = a2avCount(cnt, me, j);
        rc[static_cast<size_t>(j)] = a2avCount(cnt, j, me);
      }
      size_t sendTotal = std::accumulate(sc.begin(), sc.end(), size_t{0});
      size_t recvTotal = std::accumulate(rc.begin(), rc.end(), size_t{0});
      Buffer in, out;
      if (c.inPlace) {  // one buffer, as large as the larger of the two
        Buffer both = s.add(std::max(sendTotal, recvTotal), t);
        in = Buffer(both.data, sendTotal, t);
        out = Buffer(both.data, recvTotal, t);
      } else {
        in = s.add(sendTotal, t);
        out = s.add(recvTotal, t);
      }
      fillRank(in, 0, me, in.count);
      s.works.push_back(pg.alltoallv(in, sc, out, rc));
      s.verify = [=] {
        size_t at = 0;
        for (int r = 0; r < n; ++r) {
          // Offset of my chunk in rank r's send buffer.
          size_t srcOff = 0;
          for (int j = 0; j < me; ++j) srcOff += a2avCount(cnt, r, j);
          p->err.checkCopy(p->g, out, at, r, srcOff, rc[static_cast<size_t>(r)], "output");
          at += rc[static_cast<size_t>(r)];
        }
        if (!c.inPlace) checkInputIntact(in, me);
      };
      break;
    }
    case OpType::Gather: {
      // In place (the root only): the root's part of the output is its input.
      bool inPlace = c.inPlace && me == c.root;
      Buffer out = s.add(me == c.root ? cnt * n : 0, t);
      Buffer in = inPlace ? out.slice(static_cast<size_t>(me) * cnt, cnt) : s.add(cnt, t);
      fillRank(in, 0, me, cnt);
      GatherOptions o;
      o.root = c.root;
      s.works.push_back(pg.gather(in, out, o));
      s.verify = [=] {
        if (me == c.root)
          for (int r = 0; r < n; ++r) p->err.checkCopy(p->g, out, r * cnt, r, 0, cnt, "output");
        if (!inPlace) checkInputIntact(in, me);
      };
      break;
    }
    case OpType::Scatter: {
      // In place (the root only): the root's output is its part of the input.
      bool inPlace = c.inPlace && me == c.root;
      Buffer in = s.add(me == c.root ? cnt * n : 0, t);
      Buffer out = inPlace ? in.slice(static_cast<size_t>(me) * cnt, cnt) : s.add(cnt, t);
      if (me == c.root)
        for (int r = 0; r < n; ++r) fillRank(in, r * cnt, r, cnt);
      ScatterOptions o;
      o.root = c.root;
      s.works.push_back(pg.scatter(in, out, o));
      s.verify = [=] {
        p->err.checkCopy(p->g, out, 0, me, 0, cnt, "output");
        // The other ranks' parts of the root's input are left as they were.
        if (me == c.root)
          for (int r = 0; r < n; ++r)
            if (r != me || !inPlace) p->err.checkCopy(p->g, in, r * cnt, r, 0, cnt, "input");
      };
      break;
    }
    case OpType::Barrier:
      s.works.push_back(pg.barrier());
      break;
    case OpType::Send: {
      // A ring: every rank sends its pattern to the next and receives the previous one's.
      if (n < 2) break;
      Buffer out = s.add(cnt, t), in = s.add(cnt, t);
      fillRank(out, 0, me, cnt);
      SendOptions so;
      so.tag = static_cast<int>(c.seed % 30000);
      RecvOptions ro;
      ro.tag = so.tag;
      s.works.push_back(pg.send(out, (me + 1) % n, so));
      s.works.push_back(pg.recv(in, (me + n - 1) % n, ro));
      s.verify = [=] {
        p->err.checkCopy(p->g, in, 0, (me + n - 1) % n, 0, cnt, "received");
        checkInputIntact(out, me);
      };
      break;
    }
    default:
      s.err.add("op not covered by runCase");
  }
}
}  // namespace

PendingCase startCase(ProcessGroup& pg, const Case& c) {
  auto s = std::make_shared<Pending>(c, pg.rank());
  try {
    issueCase(pg, c, *s);
  } catch (const std::exception& e) {
    s->err.add(std::string("threw: ") + e.what());
    s->verify = nullptr;
  }
  PendingCase out;
  out.works = s->works;
  out.finish = [s] {
    try {
      for (auto& w : s->works) w->wait();
      if (s->verify) s->verify();
    } catch (const std::exception& e) {
      s->err.add(std::string("threw: ") + e.what());
    }
    return s->err.take();
  };
  return out;
}

std::vector<std::string> runCase(ProcessGroup& pg, const Case& c) { return startCase(pg, c).finish(); }

namespace {
Case p2pCase(OpType op, DataType t, size_t count) {
  Case c;
  c.op = op;
  c.dtype = t;
  c.count = count;
  return c;
}
}  // namespace

std::vector<std::string> runRing(ProcessGroup& pg, DataType t, size_t count, uint64_t seed) {
  const int n = pg.size(), me = pg.rank();
  Errors err(p2pCase(OpType::Send, t, count), me);
  if (n < 2) return {};
  Gen g(t, ReduceKind::Sum, seed);
  Storage s(count, t), r(count, t);
  g.fill(s.buf.data, 0, me, 0, count);
  try {
    SendOptions so;
    so.tag = 7;
    RecvOptions ro;
    ro.tag = 7;
    auto ws = pg.send(s.buf, (me + 1) % n, so);
    auto wr = pg.recv(r.buf, (me + n - 1) % n, ro);
    wr->wait();
    ws->wait();
    int from = (me + n - 1) % n;
    err.checkCopy(g, r.buf, 0, from, 0, count, "received");
  } catch (const std::exception& e) {
    err.add(std::string("threw: ") + e.what());
  }
  return err.take();
}

std::vector<std::string> runSendRecv(ProcessGroup& pg, DataType t, size_t count, uint64_t seed) {
  const int n = pg.size(), me = pg.rank();
  Errors err(p2pCase(OpType::SendRecv, t, count), me);
  if (n < 2) return {};
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  Gen g(t, ReduceKind::Sum, seed);
  for (int round = 0; round < 3; ++round) {
    Storage s(count, t), r(count, t);
    g.fill(s.buf.data, 0, me, 0, count);
    // A tag per round and seed: a rank may run ahead into the next round,
    // and a receive from any source must not take a later round's message.
    // (NCCL takes tag 0 only, and matches by order.)
    int tag = pg.backendName() == "nccl" ? 0 : static_cast<int>(10000 + (seed % 5000) * 3 + static_cast<uint64_t>(round));
    SendRecvOptions o;
    o.sendTag = o.recvTag = tag;
    o.blocking = round == 0;  // the caller waits at once: a backend may poll on this thread
    try {
      if (round == 1 && me % 2 == 1) {
        RecvOptions ro;
        ro.tag = tag;
        SendOptions so;
        so.tag = tag;
        auto wr = pg.recv(r.buf, prev, ro);
        auto ws = pg.send(s.buf, next, so);
        wr->wait();
        ws->wait();
      } else {
        std::shared_ptr<Work> w;
        try {
          w = pg.sendrecv(s.buf, next, r.buf, round == 2 ? kAnySource : prev, o);
        } catch (const NotSupported&) {
          if (round == 2 && pg.backendName() == "nccl") {
            // Its peers' round-2 sendrecv still expects this rank's send.
            SendOptions so;
            so.tag = tag;
            pg.send(s.buf, next, so)->wait();
            continue;
          }
          throw;
        }
        w->wait();
        if (w->sourceRank() != prev && (round == 2 || w->sourceRank() != -1))
          err.add("round " + std::to_string(round) + ": sourceRank() = " + std::to_string(w->sourceRank()) +
                  ", expected " + std::to_string(prev));
      }
      std::string what = "received, round " + std::to_string(round);
      err.checkCopy(g, r.buf, 0, prev, 0, count, what.c_str());
      err.checkCopy(g, s.buf, 0, me, 0, count, "send buffer (must be unchanged)");
    } catch (const std::exception& e) {
      err.add("round " + std::to_string(round) + " threw: " + e.what());
    }
  }
  return err.take();
}

std::vector<std::string> runAnySource(ProcessGroup& pg, DataType t, size_t count, uint64_t seed) {
  const int n = pg.size(), me = pg.rank();
  Errors err(p2pCase(OpType::Recv, t, count), me);
  if (n < 2) return {};
  Gen g(t, ReduceKind::Sum, seed);
  try {
    if (me == 0) {
      // Each message carries its sender's pattern; sourceRank() must name it.
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int k = 1; k < n; ++k) {
        Storage r(count, t);
        RecvOptions ro;
        ro.tag = static_cast<int>(seed % 30000);  // rounds must not match each other's messages
        auto w = pg.recv(r.buf, kAnySource, ro);
        w->wait();
        int from = w->sourceRank();
        if (from < 1 || from >= n) {
          err.add("sourceRank() = " + std::to_string(from));
          continue;
        }
        seen[static_cast<size_t>(from)]++;
        err.checkCopy(g, r.buf, 0, from, 0, count, "received");
      }
      for (int k = 1; k < n; ++k)
        if (seen[static_cast<size_t>(k)] != 1) err.add("got " + std::to_string(seen[static_cast<size_t>(k)]) + " messages from rank " + std::to_string(k));
    } else {
      Storage s(count, t);
      g.fill(s.buf.data, 0, me, 0, count);
      SendOptions so;
      so.tag = static_cast<int>(seed % 30000);
      pg.send(s.buf, 0, so)->wait();
    }
  } catch (const std::exception& e) {
    err.add(std::string("threw: ") + e.what());
  }
  return err.take();
}

}  // namespace conformance
}  // namespace accl
