#include "accl/trace.h"
#include "accl/internal/strings.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <fstream>
#include <iterator>
#include <memory>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/logging.h"
#include "accl/internal/bounded_mutex.h"
#include "accl/internal/bus_factor.h"
#include "accl/internal/process_info.h"
#include "accl/internal/trace_registry.h"

namespace accl {

namespace {

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t wallUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The wall clock's lead over the monotonic clock (µs), read once per process
// for the timeline: every span of every group is placed with the same offset,
// so spans that nest in monotonic time nest in the file too. (Taken per
// event, a thread preempted between its two clock reads shifted that event
// by the preemption, and a wait could fall outside its op's span.) Of a few
// readings, the one whose monotonic reads bracket its wall-clock read most
// tightly.
int64_t timelineOffsetUs() {
  static const int64_t offset = [] {
    int64_t best = 0, bestGap = INT64_MAX;
    for (int i = 0; i < 5; ++i) {
      int64_t a = steadyNs();
      int64_t w = wallUs();
      int64_t b = steadyNs();
      if (b - a < bestGap) {
        bestGap = b - a;
        best = w - (a + (b - a) / 2) / 1000;
      }
    }
    return best;
  }();
  return offset;
}

struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<FlightRecorder>> recorders;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: dumps may run during exit
  return *r;
}

// SIGUSR1 → a byte on this pipe → the dump thread writes the dump (a signal
// handler may not allocate or take locks).
int gDumpPipe[2] = {-1, -1};

void onDumpSignal(int) {
  int saved = errno;
  char b = 1;
  ssize_t ignored = write(gDumpPipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

nlohmann::ordered_json entryJson(const TraceEntry& e) {
  nlohmann::ordered_json j = {{"id", e.id},
                              {"seq", e.seq},
                              {"coll", e.coll},
                              {"op", toString(e.op)},
                              {"dtype", toString(e.dtype)},
                              {"count", e.count},
                              {"root", e.root},
                              {"peer", e.peer},
                              {"bytes", e.bytes},
                              {"algorithm", e.algorithm},
                              {"transport", e.transport},
                              {"state", toString(e.state)},
                              {"queued_us", e.queuedUs},
                              {"started_us", e.startedUs},
                              {"finished_us", e.finishedUs}};
  if (!e.error.empty()) j["error"] = e.error;
  if (!e.note.empty()) j["note"] = e.note;
  if (e.waitedUs > 0) j["waited_us"] = e.waitedUs;
  if (!e.peers.empty()) {
    j["peers"] = nlohmann::json::array();
    for (const auto& p : e.peers)
      j["peers"].push_back(nlohmann::ordered_json{{"rank", p.rank}, {"sent", p.sent}, {"received", p.received}});
  }
  return j;
}

// ACCL_TIMELINE's file: %r, %h, %p replaced; without %r or %p, ".<rank>"
// goes before the extension, so that the processes of a host differ.
std::string expandPattern(const std::string& pattern, int rank) {
  bool perProcess = false;
  std::string out = internal::expandPathPattern(pattern, rank, &perProcess);
  if (!perProcess) {
    size_t slash = out.rfind('/');
    size_t dot = out.rfind('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) dot = out.size();
    out.insert(dot, "." + std::to_string(rank));
  }
  return out;
}

// One trace event written straight as JSON text, for the events of every op
// (the timeline): building an nlohmann object per event (a node and a key
// string per field) and dumping it took about 11 us per op on 2 ranks here,
// 30x an 8-byte allreduce. Keys come in the order given; string values are
// escaped by nlohmann where they need it (rarely: op, dtype, algorithm and
// transport names are plain ASCII; an error message may not be).
class EventText {
 public:
  EventText() {
    out_.reserve(384);  // an op event with its args, without a reallocation
    out_ = "{";
  }
  EventText& str(const char* k, std::string_view v) {
    key(k);
    bool plain = true;
    for (unsigned char c : v) plain = plain && c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
    if (plain) {
      out_ += '"';
      out_.append(v.data(), v.size());
      out_ += '"';
    } else {
      out_ += nlohmann::json(std::string(v)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    return *this;
  }
  EventText& num(const char* k, int64_t v) { return number(k, v); }
  EventText& num(const char* k, uint64_t v) { return number(k, v); }
  EventText& num(const char* k, int v) { return number(k, static_cast<int64_t>(v)); }
  EventText& num(const char* k, double v) { return number(k, v); }
  // A nested object under `k`, until end().
  EventText& object(const char* k) {
    key(k);
    out_ += '{';
    first_ = true;
    return *this;
  }
  EventText& end() {
    out_ += '}';
    first_ = false;
    return *this;
  }
  // The event, closed.
  const std::string& done() {
    out_ += '}';
    return out_;
  }

 private:
  void key(const char* k) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += '"';
    out_ += k;
    out_ += "\":";
  }
  template <typename T>
  EventText& number(const char* k, T v) {
    key(k);
    char buf[40];
    auto r = std::to_chars(buf, buf + sizeof(buf), v);
    out_.append(buf, r.ptr);
    return *this;
  }
  std::string out_;
  bool first_ = true;
};

// The timeline file of this process (ACCL_TIMELINE): a JSON array of
// trace events, opened by the first group, closed at exit.
class Timeline {
 public:
  // The process's timeline, opened on first use by a group of rank `rank`;
  // null when ACCL_TIMELINE is off or the file cannot be written (logged).
  static Timeline* get(int rank) {
    static std::mutex mu;
    static Timeline* t = nullptr;
    static bool tried = false;
    std::lock_guard<std::mutex> lk(mu);
    if (tried) return t;
    tried = true;
    std::string pattern;
    try {
      pattern = Config::get().timeline;
    } catch (const Error&) {
      return nullptr;
    }
    if (pattern.empty()) return nullptr;
    std::string path = expandPattern(pattern, rank);
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
      ACCL_WARN("INIT", errnoMessage("ACCL_TIMELINE: cannot write " + path, errno) << "; no timeline");
      return nullptr;
    }
    t = new Timeline(f, rank, path);  // never destroyed: closed at exit
    std::atexit([] { t->close(); });
    ACCL_INFO("INIT", "timeline: " << path);
    return t;
  }

  int rank() const { return rank_; }
  // A new row (thread) for a group; returns its id (the queue row is id + 1).
  int addGroup(const std::string& label) {
    std::lock_guard<std::mutex> lk(mu_);
    int tid = nextTid_;
    nextTid_ += 3;
    meta(tid, label);
    meta(tid + 1, label + " queue");
    meta(tid + 2, label + " waiting for peers");
    return tid;
  }
  void event(EventText& e) {
    const std::string& text = e.done();
    std::lock_guard<std::mutex> lk(mu_);
    if (!f_) return;
    std::fputs(",\n", f_);
    std::fwrite(text.data(), 1, text.size(), f_);
  }
  void close() {
    std::lock_guard<std::mutex> lk(mu_);
    if (!f_) return;
    std::fputs("\n]\n", f_);
    std::fclose(f_);
    f_ = nullptr;
  }

 private:
  Timeline(FILE* f, int rank, std::string path) : f_(f), rank_(rank), path_(std::move(path)) {
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
    nlohmann::ordered_json p = {{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0},
                                {"args", {{"name", "rank " + std::to_string(rank_) + " (" + internal::hostName() + ", pid " +
                                                       std::to_string(getpid()) + ")"}}}};
    std::fputs("[\n", f_);
    std::fputs(p.dump().c_str(), f_);
  }
  void meta(int tid, const std::string& name) {
    nlohmann::ordered_json m = {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", tid},
                                {"args", {{"name", name}}}};
    std::fputs(",\n", f_);
    std::fputs(m.dump().c_str(), f_);
  }

  std::mutex mu_;
  FILE* f_;
  int rank_;
  std::string path_;
  int nextTid_ = 1;
};

using internal::sizeText;

}  // namespace

const char* toString(OpState s) {
  switch (s) {
    case OpState::Queued: return "queued";
    case OpState::Started: return "started";
    case OpState::Waiting: return "waiting";
    case OpState::Done: return "done";
    case OpState::Failed: return "failed";
  }
  return "unknown";
}

namespace {

inline int64_t coarseNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// The always-on recorder's clock. Two reads of the coarse clock per op (~6 ns
// each here) were a third of the recorder's cost on the fastest ops, so a
// ticker thread copies the coarse clock (CLOCK_MONOTONIC_COARSE, one scale
// with steady_clock) into a word every tick, at that clock's own resolution
// (1-4 ms): an op's time is a load. The ticker parks after 1000 ticks (1-4 s)
// in which no op was recorded, so that an idle process is not woken hundreds
// of times a second; the next op reads the clock itself and wakes it. A forked child
// starts its own. Where no thread can be started, ops read the clock.
class TickClock {
 public:
  static TickClock& get() { return *instance; }
  // The words an op reads and sets (FlightRecorder::opNow() inline).
  const std::atomic<int64_t>* word() const { return &tick_; }
  std::atomic<bool>* usedWord() { return &used_; }
  bool parked() const { return tick_.load(std::memory_order_relaxed) == 0; }
  void setParkAfter(int ticks) { parkAfter_.store(ticks); }
  int64_t now() {
    int64_t t = tick_.load(std::memory_order_relaxed);
    if (__builtin_expect(t == 0, 0)) return wake();
    if (!used_.load(std::memory_order_relaxed)) used_.store(true, std::memory_order_relaxed);
    return t;
  }

 private:
  TickClock() {
    timespec res{};
    int64_t ns = clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 ? res.tv_sec * 1000000000LL + res.tv_nsec : 4000000;
    period_ = std::chrono::nanoseconds(std::min<int64_t>(std::max<int64_t>(ns, 1000000), 4000000));
    mu_ = new std::mutex;
    cv_ = new std::condition_variable;
    pthread_atfork(nullptr, nullptr, [] { get().afterFork(); });
  }
  void afterFork() {  // in the child: no ticker runs there, and its lock may have been held
    mu_ = new std::mutex;  // the parent's copies are abandoned, not destroyed
    cv_ = new std::condition_variable;
    running_ = false;
    tick_.store(0, std::memory_order_relaxed);
  }
  int64_t wake() {
    if (direct_.load(std::memory_order_relaxed)) return coarseNs();
    std::lock_guard<std::mutex> lk(*mu_);
    int64_t t = coarseNs();
    if (tick_.load(std::memory_order_relaxed) != 0) return t;
    tick_.store(t, std::memory_order_relaxed);
    used_.store(true, std::memory_order_relaxed);
    if (running_) {
      cv_->notify_one();
      return t;
    }
    try {
      std::thread([this] { run(); }).detach();
      running_ = true;
    } catch (const std::exception& e) {
      direct_.store(true, std::memory_order_relaxed);
      tick_.store(0, std::memory_order_relaxed);
      ACCL_INFO("INIT", "flight recorder: no ticker thread (" << e.what() << "): ops read the clock");
    }
    return t;
  }
  void run() {
    int idle = 0;
    std::unique_lock<std::mutex> lk(*mu_);
    for (;;) {
      lk.unlock();
      std::this_thread::sleep_for(period_);
      lk.lock();
      if (used_.exchange(false, std::memory_order_relaxed)) {
        idle = 0;
      } else if (++idle >= parkAfter_.load(std::memory_order_relaxed)) {
        tick_.store(0, std::memory_order_relaxed);
        cv_->wait(lk, [&] { return tick_.load(std::memory_order_relaxed) != 0; });
        idle = 0;
        continue;
      }
      tick_.store(coarseNs(), std::memory_order_relaxed);
    }
  }

  alignas(64) std::atomic<int64_t> tick_{0};  // 0: parked (or not started)
  std::atomic<bool> used_{false};             // an op read the clock since the last tick
  alignas(64) std::atomic<bool> direct_{false};
  std::atomic<int> parkAfter_{1000};  // ticks without an op (1-4 s)
  std::chrono::nanoseconds period_;
  std::mutex* mu_;
  std::condition_variable* cv_;
  bool running_ = false;
  static TickClock* const instance;
};
// Made when the library loads (no guard on the op's path); never destroyed:
// the ticker may outlive static destructors.
TickClock* const TickClock::instance = new TickClock;

constexpr auto R = std::memory_order_relaxed;

}  // namespace

// Per op and size bucket (log2 of the bytes): count, bytes, and the times
// (all of them up to kKept, then a uniform sample of that many).
struct FlightRecorder::Stats {
  static constexpr size_t kKept = 1 << 16;
  struct Cell {
    uint64_t count = 0, bytes = 0;
    double sumUs = 0;
    std::vector<float> us;
  };
  std::map<std::pair<int, int>, Cell> cells;
  std::mt19937_64 rng{12345};
};

bool FlightRecorder::wanted() {
  const Config& c = Config::get();
  return c.traceBuffer > 0 || c.stats || !c.timeline.empty();
}

size_t FlightRecorder::wantedCapacity() {
  // Statistics and timeline need a slot for every op in flight, not history.
  return static_cast<size_t>(std::max(Config::get().traceBuffer, 256));
}

FlightRecorder::FlightRecorder(size_t capacity, std::string group, std::string backend, int rank, int size)
    // A power of two: an op's slot is its id masked (no integer division on
    // the op's path).
    : capacity_(size_t(1) << (64 - __builtin_clzll(std::max<uint64_t>(capacity, 2) - 1))),
      slots_(2 * capacity_),
      mask_(slots_ - 1),
      ring_(new Slot[slots_]),
      group_(std::move(group)),
      backend_(std::move(backend)),
      rank_(rank),
      size_(size),
      tick_(TickClock::get().word()),
      tickUsed_(TickClock::get().usedWord()) {
  const Config& c = Config::get();
  dumps_ = c.traceBuffer > 0;
  if (c.stats) stats_ = std::make_unique<Stats>();
  precise_ = c.stats || !c.timeline.empty();
  // Every op takes the precise clock: its phases find a clock word of 0,
  // as when the ticker is parked, and go to nowSlow() with no second test.
  static const std::atomic<int64_t> kNoTick{0};
  if (precise_) tick_ = &kNoTick;
  if (Timeline* t = Timeline::get(rank))
    timelineTid_ = t->addGroup("group " + (group_.empty() ? std::string("default") : "'" + group_ + "'") + " (" +
                               backend_ + ", rank " + std::to_string(rank) + "/" + std::to_string(size) + ")");
}

FlightRecorder::~FlightRecorder() = default;

void FlightRecorder::setHosts(std::vector<std::string> hosts) {
  std::lock_guard<std::mutex> lk(metaMu_);
  hosts_ = std::move(hosts);
}

void FlightRecorder::setTrafficSource(std::function<std::vector<PeerTraffic>()> source) {
  std::lock_guard<std::mutex> lk(metaMu_);
  trafficSource_ = std::move(source);
}

std::vector<std::string> FlightRecorder::hosts() const {
  std::lock_guard<std::mutex> lk(metaMu_);
  return hosts_;
}

std::vector<PeerTraffic> FlightRecorder::traffic() const {
  std::function<std::vector<PeerTraffic>()> source;
  {
    std::lock_guard<std::mutex> lk(metaMu_);
    if (closed_) return {};
    source = trafficSource_;
  }
  return source ? source() : std::vector<PeerTraffic>{};
}

void FlightRecorder::waiting(uint64_t id, const std::string& why) {
  Slot& s = slotOf(id);
  if (idOf(s) != id) return;
  {
    std::lock_guard<std::mutex> lk(textMu_);
    textsOf(s, id).note = why;
  }
  // The op's own thread no longer writes `meta`; a finished op reads as
  // done or failed whatever this flag says.
  s.meta.fetch_or(kWaitingBit, std::memory_order_release);
  // Every waiting rank writes its dump at the op's first warning: accl-diag
  // then compares the ranks while the job still hangs (a stopped rank writes
  // none, which names it too).
  if (dumps_ && stallDumped_.exchange(id) != id) dumpTraces("stall: " + why.substr(0, 300));
}

void FlightRecorder::checkStall(std::chrono::milliseconds warnAfter) {
  if (warnAfter.count() <= 0) return;
  // Backends that warn by themselves do it for collectives; their point-to-
  // point ops are the watchdog's.
  bool collectives = !ownStallWarnings_.load();
  // The oldest op not finished, among those the ring still holds: the oldest
  // of each kind, then the one queued first.
  Copy oldest;
  for (int kind = collectives ? 0 : 1; kind < 2; ++kind) {
    uint64_t first, next;
    heldIds(kind, first, next);
    for (uint64_t id = first; id < next; id += 2) {
      const Slot& s = ring_[id & mask_];
      if (idOf(s) != id || (s.endedId.load(R) & ~kFailedTag) == id) continue;
      Copy c = read(s);
      if (c.id != id) continue;
      if (oldest.id == 0 || c.queuedNs < oldest.queuedNs) oldest = std::move(c);
      break;
    }
  }
  if (oldest.id == 0) return;
  int64_t since = oldest.startedNs ? oldest.startedNs : oldest.queuedNs;
  int64_t waited = coarseNs() - since;
  int64_t warnNs = static_cast<int64_t>(warnAfter.count()) * 1000000;
  if (stallOp_ != oldest.id) {
    stallOp_ = oldest.id;
    stallNextNs_ = warnNs;
  }
  if (waited < stallNextNs_) return;
  stallNextNs_ = 2 * waited;  // backoff: the next warning when it has waited twice as long
  char head[160];
  snprintf(head, sizeof(head), "%s #%lld (%llu x %s", toString(oldest.op),
           static_cast<long long>(oldest.coll >= 0 ? oldest.coll : static_cast<int64_t>(oldest.id)),
           static_cast<unsigned long long>(oldest.count), toString(oldest.dtype));
  std::string what = head;
  if (oldest.root >= 0) what += ", root " + std::to_string(oldest.root);
  if (oldest.peer >= 0) what += ", peer " + std::to_string(oldest.peer);
  char tail[200];
  snprintf(tail, sizeof(tail), ") has waited %.1f s%s; ACCL_TIMEOUT stays the hard limit", waited / 1e9,
           oldest.startedNs ? "" : " in the queue (not started)");
  bool p2p = isPointToPoint(oldest.op);
  std::string msg = what + tail + ". " +
                    (p2p ? std::string("A point-to-point op waits for its peer to post the matching one")
                         : backend_ + " does not say which ranks have not arrived") +
                    ": run accl-diag on the flight recorder dumps of all ranks (this one's is in ACCL_TRACE_DIR)";
  ACCL_WARN("COLL", "accl rank " << rank_ << "/" << size_ << " " << backend_
                                 << (group_.empty() ? std::string() : " group '" + group_ + "'") << ": " << msg);
  waiting(oldest.id, msg);
}

void FlightRecorder::account(const Copy& s) {
  double us = double(s.finishedNs - s.queuedNs) / 1000.0;
  std::lock_guard<std::mutex> lk(statsMu_);
  if (stats_) {
    int bucket = s.bytes ? 63 - __builtin_clzll(s.bytes) : -1;
    Stats::Cell& c = stats_->cells[{static_cast<int>(s.op), bucket}];
    ++c.count;
    c.bytes += s.bytes;
    c.sumUs += us;
    if (c.us.size() < Stats::kKept) {
      c.us.push_back(static_cast<float>(us));
    } else {
      uint64_t j = stats_->rng() % c.count;
      if (j < Stats::kKept) c.us[j] = static_cast<float>(us);
    }
  }
  if (timelineTid_ >= 0) {
    Timeline* t = Timeline::get(rank_);
    int64_t offsetUs = timelineOffsetUs();
    int64_t queued = s.queuedNs / 1000 + offsetUs, started = (s.startedNs ? s.startedNs : s.finishedNs) / 1000 + offsetUs,
            finished = s.finishedNs / 1000 + offsetUs;
    const char* name = toString(s.op);
    EventText op;
    op.str("name", name).str("cat", "op").str("ph", "X").num("pid", t->rank()).num("tid", timelineTid_);
    op.num("ts", started).num("dur", finished - started).object("args");
    op.num("id", s.id).num("coll", s.coll).num("seq", s.seq).num("bytes", s.bytes).num("count", s.count);
    op.str("dtype", toString(s.dtype)).str("algorithm", s.algorithm ? s.algorithm : "");
    op.str("transport", s.transport ? s.transport : "").str("state", toString(s.state));
    if (s.root >= 0) op.num("root", s.root);
    if (s.peer >= 0 || s.op == OpType::Recv) op.num("peer", s.peer);
    if (!s.error.empty()) op.str("error", s.error);
    t->event(op.end());
    EventText queue;
    queue.str("name", std::string("queued: ") + name).str("cat", "queue").str("ph", "X").num("pid", t->rank());
    queue.num("tid", timelineTid_ + 1).num("ts", queued).num("dur", started - queued).object("args").num("id", s.id);
    t->event(queue.end());
  }
}

std::string FlightRecorder::statsTable() const {
  std::vector<PeerTraffic> peers = traffic();
  const std::vector<std::string> names = hosts();
  std::lock_guard<std::mutex> lk(statsMu_);
  if (!stats_ || stats_->cells.empty()) return "";
  std::ostringstream os;
  uint64_t total = 0;
  for (auto& kv : stats_->cells) total += kv.second.count;
  os << "accl stats: group " << (group_.empty() ? std::string("default") : "'" + group_ + "'") << " (" << backend_
     << "), rank " << rank_ << "/" << size_ << ", " << total << " ops; time = from the call to completion\n";
  char line[256];
  snprintf(line, sizeof(line), "  %-16s %-18s %10s %12s %10s %10s %10s %11s\n", "op", "size", "count", "bytes",
           "mean_us", "p50_us", "p99_us", "busbw_GB/s");
  os << line;
  for (auto& kv : stats_->cells) {
    const Stats::Cell& c = kv.second;
    std::vector<float> v = c.us;
    std::sort(v.begin(), v.end());
    auto pct = [&](double q) { return v.empty() ? 0.0 : double(v[std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5))]); };
    double mean = c.sumUs / double(c.count);
    int b = kv.first.second;
    std::string range = b < 0 ? "0 B" : sizeText(double(1ull << b)) + " - " + sizeText(double(2ull << b));
    double bytesPerOp = double(c.bytes) / double(c.count);
    double busbw = mean > 0 ? bytesPerOp / (mean * 1e3) * internal::busFactor(static_cast<OpType>(kv.first.first), size_) : 0;
    snprintf(line, sizeof(line), "  %-16s %-18s %10llu %12s %10.2f %10.2f %10.2f %11.3f\n",
             toString(static_cast<OpType>(kv.first.first)), range.c_str(), static_cast<unsigned long long>(c.count),
             sizeText(double(c.bytes)).c_str(), mean, pct(0.5), pct(0.99), busbw);
    os << line;
  }
  // Links into this rank: bytes over the time they were arriving.
  std::vector<std::pair<double, int>> rates;
  for (auto& p : peers)
    if (p.receiveBusyUs > 0 && p.bytesTimed >= (64u << 10))
      rates.push_back({double(p.bytesTimed) / (double(p.receiveBusyUs) * 1e3), p.rank});
  if (!peers.empty()) {
    os << "  data received from each peer (rate = bytes / time while its data was arriving):\n";
    for (auto& p : peers) {
      if (p.rank == rank_) continue;
      std::string host = p.rank < static_cast<int>(names.size()) ? " (" + names[p.rank] + ")" : "";
      double rate = p.receiveBusyUs > 0 ? double(p.bytesTimed) / (double(p.receiveBusyUs) * 1e3) : 0;
      snprintf(line, sizeof(line), "    rank %d%s: received %s, sent %s", p.rank, host.c_str(),
               sizeText(double(p.bytesReceived)).c_str(), sizeText(double(p.bytesSent)).c_str());
      os << line;
      if (p.bytesTimed >= (64u << 10) && rate > 0) {
        snprintf(line, sizeof(line), ", %.3f GB/s", rate);
        os << line;
      }
      if (p.bytesHeld) {
        snprintf(line, sizeof(line), ", %s of it before its receive (held, copied twice)", sizeText(double(p.bytesHeld)).c_str());
        os << line;
      }
      os << "\n";
    }
  }
  if (rates.size() >= 2) {
    std::sort(rates.begin(), rates.end());
    double median = rates[rates.size() / 2].first;
    int slow = rates.front().second;
    std::string host = slow < static_cast<int>(names.size()) ? " (" + names[slow] + ")" : "";
    snprintf(line, sizeof(line), "  slowest link into this rank: from rank %d%s, %.3f GB/s vs median %.3f GB/s\n", slow,
             host.c_str(), rates.front().first, median);
    os << line;
  }
  return os.str();
}

void FlightRecorder::close() {
  {
    std::lock_guard<std::mutex> lk(metaMu_);
    if (closed_) return;
  }
  std::string table = statsTable();
  {
    std::lock_guard<std::mutex> lk(metaMu_);
    closed_ = true;
    trafficSource_ = nullptr;
  }
  if (!table.empty()) {
    std::string text = logPrefix() + " " + table;
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
}


int64_t FlightRecorder::nowSlow() { return precise_ ? steadyNs() : TickClock::get().now(); }

FlightRecorder::Texts& FlightRecorder::textsOf(Slot& s, uint64_t id) {
  // Ops older than the ring's oldest keep no texts (the first failure is
  // kept apart, in firstFailure_).
  auto& texts = texts_[id & 1];
  while (!texts.empty() && texts.begin()->first + slots_ <= id) texts.erase(texts.begin());
  s.textId.store(id, R);
  return texts[id];
}

void FlightRecorder::updateStart(uint64_t id, int64_t seq, const char* algorithm, const char* transport) {
  Slot& s = slotOf(id);
  if (s.startedId.load(std::memory_order_relaxed) != id) return started(id, seq, algorithm, transport);
  if (seq >= 0) s.seq.store(seq, std::memory_order_relaxed);
  if (algorithm) s.algorithm.store(algorithm, std::memory_order_relaxed);
  if (transport) s.transport.store(transport, std::memory_order_relaxed);
}

void FlightRecorder::waited(uint64_t id, int64_t firstNs, int64_t lastNs, int64_t totalNs) {
  Slot& s = slotOf(id);
  if (idOf(s) != id || totalNs <= 0) return;
  s.waitTotalNs.store(totalNs, R);
  s.meta.fetch_or(kWaitedBit, std::memory_order_release);
  if (timelineTid_ < 0) return;
  // A span from the op's first wait for its peers to the end of its last
  // (the time between is the op's own work); the sum of the waits is in args.
  Timeline* t = Timeline::get(rank_);
  int64_t offsetUs = timelineOffsetUs();
  int64_t w0 = firstNs / 1000 + offsetUs, w1 = lastNs / 1000 + offsetUs;
  const char* name = toString(static_cast<OpType>(s.meta.load(R) & 0xff));
  EventText e;
  e.str("name", std::string("waiting for peers: ") + name).str("cat", "wait").str("ph", "X").num("pid", t->rank());
  e.num("tid", timelineTid_ + 2).num("ts", w0).num("dur", w1 - w0).object("args").num("id", id);
  e.num("waited_us", static_cast<double>(totalNs) / 1000.0);
  std::lock_guard<std::mutex> lk(statsMu_);
  t->event(e.end());
}

FlightRecorder::PeerSlot* FlightRecorder::makePeerRing() {
  std::lock_guard<std::mutex> lk(textMu_);
  if (!peerOwned_) {
    peerOwned_.reset(new PeerSlot[capacity_]);
    peerRing_.store(peerOwned_.get(), std::memory_order_release);
  }
  return peerOwned_.get();
}

void FlightRecorder::peerBytes(uint64_t id, const PeerBytes* peers, size_t n) {
  Slot& s = slotOf(id);
  if (idOf(s) != id || n == 0) return;
  if (id % 2 == 0 && n <= kInlinePeers) {
    PeerSlot* ring = peerRing_.load(std::memory_order_acquire);
    if (!ring) ring = makePeerRing();
    PeerSlot& p = peerSlotOf(ring, id);
    // One writer per collective slot (collectives are issued in order), so
    // no compare-exchange: readers see id 0 while the entries change.
    p.id.store(0, R);
    std::atomic_thread_fence(std::memory_order_release);
    for (size_t i = 0; i < n; ++i) {
      p.e[i].rank.store(peers[i].rank, R);
      p.e[i].sent.store(peers[i].sent, R);
      p.e[i].received.store(peers[i].received, R);
    }
    p.n.store(static_cast<uint32_t>(n), R);
    p.id.store(id, std::memory_order_release);
    return;
  }
  std::lock_guard<std::mutex> lk(textMu_);
  textsOf(s, id).peers.assign(peers, peers + n);
}

// finished() of a failed op, or of any op while statistics or the timeline
// are on.
void FlightRecorder::finishedSlow(uint64_t id, const std::exception_ptr& error) {
  Slot& s = slotOf(id);
  bool mine = idOf(s) == id;
  if (mine) {
    s.finishedNs.store(nowSlow(), R);
    s.endedId.store(error ? id | kFailedTag : id, std::memory_order_release);
  }
  if (!error) {
    if (mine && (stats_ || timelineTid_ >= 0)) account(read(s));
    return;
  }
  if (!mine) return;  // overwritten: nowhere to keep the message
  std::string why;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& x) {
    why = x.what();
  } catch (...) {
    why = "an exception that is not a std::exception";
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> lk(textMu_);
    textsOf(s, id).error = why;
  }
  Copy c = read(s);
  if (stats_ || timelineTid_ >= 0) account(c);
  {
    // The first failure of the group is kept and dumped; the ops failed
    // after it (at once: the group is unusable) are not dumped again.
    std::lock_guard<std::mutex> lk(textMu_);
    if (firstFailure_.id == 0) {
      firstFailure_ = c;
      first = true;
    }
  }
  if (first && dumps_) dumpTraces("an op failed: " + why);
}

FlightRecorder::Copy FlightRecorder::read(const Slot& s) const {
  Copy c;
  bool whole = false;
  for (int attempt = 0; attempt < 1000 && !whole; ++attempt) {
    uint64_t v1 = s.ver.load(std::memory_order_acquire);
    if (v1 & 1) {  // being written
      if (attempt > 100) std::this_thread::yield();
      continue;
    }
    c.id = idOfVersion(v1);
    uint64_t m = s.meta.load(std::memory_order_acquire);
    c.op = static_cast<OpType>(m & 0xff);
    c.dtype = static_cast<DataType>((m >> 8) & 0xff);
    c.coll = c.id % 2 == 0 ? static_cast<int64_t>(c.id / 2) - 1 : -1;  // collectives: even ids 2, 4, ...
    c.count = s.count.load(R);
    c.bytes = s.bytes.load(R);
    uint64_t ranks = s.ranks.load(R);
    c.root = static_cast<int32_t>(static_cast<uint32_t>(ranks));
    c.peer = static_cast<int32_t>(static_cast<uint32_t>(ranks >> 32));
    c.queuedNs = s.queuedNs.load(R);
    c.seq = -1;
    c.algorithm = c.transport = nullptr;
    c.startedNs = c.finishedNs = c.waitTotalNs = 0;
    // Acquire: the fields a tag vouches for were written before it.
    uint64_t ended = s.endedId.load(std::memory_order_acquire);
    bool started = s.startedId.load(std::memory_order_acquire) == c.id;
    bool finished = (ended & ~kFailedTag) == c.id;
    if (started) {
      c.startedNs = s.startedNs.load(R);
      c.seq = s.seq.load(R);
      c.algorithm = s.algorithm.load(R);
      c.transport = s.transport.load(R);
    }
    if (finished) {
      c.finishedNs = s.finishedNs.load(R);
      if (!started) c.startedNs = c.finishedNs;  // finished without a start of its own
    }
    c.state = finished ? ((ended & kFailedTag) ? OpState::Failed : OpState::Done)
              : (m & kWaitingBit) ? OpState::Waiting
              : started ? OpState::Started
                        : OpState::Queued;
    if (m & kWaitedBit) c.waitTotalNs = s.waitTotalNs.load(R);
    std::atomic_thread_fence(std::memory_order_acquire);
    whole = s.ver.load(R) == v1;
  }
  if (!whole || c.id == 0) {
    c.id = 0;  // never written, or never caught between two writes: the caller skips it
    return c;
  }
  if (s.textId.load(R) == c.id) {
    std::lock_guard<std::mutex> lk(textMu_);
    const auto& texts = texts_[c.id & 1];
    auto it = texts.find(c.id);
    if (it != texts.end()) {
      c.error = it->second.error;
      c.note = it->second.note;
      c.peers = it->second.peers;
    }
  }
  PeerSlot* ring = peerRing_.load(std::memory_order_acquire);
  if (ring && c.peers.empty() && c.id % 2 == 0) {
    const PeerSlot& p = peerSlotOf(ring, c.id);
    PeerBytes got[kInlinePeers];
    if (p.id.load(std::memory_order_acquire) == c.id) {
      size_t n = std::min<size_t>(p.n.load(R), kInlinePeers);
      for (size_t i = 0; i < n; ++i) {
        got[i].rank = p.e[i].rank.load(R);
        got[i].sent = p.e[i].sent.load(R);
        got[i].received = p.e[i].received.load(R);
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      // Rewritten meanwhile: by a newer op (this one has left the ring).
      if (p.id.load(R) == c.id) c.peers.assign(got, got + n);
    }
  }
  return c;
}

namespace {
// Monotonic times become wall-clock microseconds when read, not per op.
template <typename C>
TraceEntry toEntry(const C& s, int64_t offsetUs) {
  auto wall = [&](int64_t ns) { return ns ? ns / 1000 + offsetUs : 0; };
  TraceEntry e;
  e.id = s.id;
  e.seq = s.seq;
  e.coll = s.coll;
  e.op = s.op;
  e.dtype = s.dtype;
  e.count = s.count;
  e.root = s.root;
  e.peer = s.peer;
  e.bytes = s.bytes;
  e.algorithm = s.algorithm ? s.algorithm : "";
  e.transport = s.transport ? s.transport : "";
  e.state = s.state;
  e.queuedUs = wall(s.queuedNs);
  e.startedUs = wall(s.startedNs);
  e.finishedUs = wall(s.finishedNs);
  e.waitedUs = s.waitTotalNs / 1000;
  e.error = s.error;
  e.note = s.note;
  e.peers = s.peers;
  return e;
}
}  // namespace

std::vector<TraceEntry> FlightRecorder::entries() const {
  int64_t offsetUs = wallUs() - steadyNs() / 1000;
  // Each kind in the order issued, then the two merged by when they were
  // queued (collectives first among ops queued in the same tick).
  std::vector<TraceEntry> kinds[2];
  for (int kind = 0; kind < 2; ++kind) {
    uint64_t first, next;
    heldIds(kind, first, next);
    for (uint64_t id = first; id < next; id += 2) {
      Copy c = read(ring_[id & mask_]);
      if (c.id == id) kinds[kind].push_back(toEntry(c, offsetUs));  // not yet overwritten by a newer op
    }
  }
  std::vector<TraceEntry> out;
  out.reserve(kinds[0].size() + kinds[1].size());
  std::merge(std::make_move_iterator(kinds[0].begin()), std::make_move_iterator(kinds[0].end()),
             std::make_move_iterator(kinds[1].begin()), std::make_move_iterator(kinds[1].end()),
             std::back_inserter(out),
             [](const TraceEntry& a, const TraceEntry& b) { return a.queuedUs < b.queuedUs; });
  return out;
}

void FlightRecorder::heldIds(int kind, uint64_t& first, uint64_t& next) const {
  uint64_t base = kind == 0 ? 2 : 1;  // the kind's first id
  next = (kind == 0 ? nextCollId_ : nextP2pId_).load(std::memory_order_acquire);
  first = next >= base + slots_ ? next - slots_ : base;
}

TraceEntry FlightRecorder::firstFailure() const {
  int64_t offsetUs = wallUs() - steadyNs() / 1000;
  std::lock_guard<std::mutex> lk(textMu_);
  return toEntry(firstFailure_, offsetUs);
}

namespace internal {

bool traceTickerParked() { return TickClock::get().parked(); }
void setTraceTickerParkAfter(int ticks) { TickClock::get().setParkAfter(ticks); }

void registerRecorder(const std::shared_ptr<FlightRecorder>& r) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  reg.recorders.erase(std::remove_if(reg.recorders.begin(), reg.recorders.end(),
                                     [](const std::weak_ptr<FlightRecorder>& w) { return w.expired(); }),
                      reg.recorders.end());
  reg.recorders.push_back(r);
  // The stall watchdog, for groups whose backend does not warn by itself.
  static std::once_flag watchdog;
  std::call_once(watchdog, [] {
    std::chrono::milliseconds warn{0};
    try {
      warn = Config::get().stallWarn;
    } catch (const Error&) {
    }
    if (warn.count() <= 0) return;
    auto period = std::min<std::chrono::milliseconds>(std::chrono::seconds(1),
                                                      std::max<std::chrono::milliseconds>(warn / 4, std::chrono::milliseconds(50)));
    std::thread([warn, period] {
      for (;;) {
        std::this_thread::sleep_for(period);
        std::vector<std::shared_ptr<FlightRecorder>> live;
        {
          Registry& reg = registry();
          std::lock_guard<std::mutex> lk(reg.mu);
          for (auto& w : reg.recorders)
            if (auto rec = w.lock()) live.push_back(rec);
        }
        for (auto& rec : live) rec->checkStall(warn);
      }
    }).detach();
  });
  // SIGUSR1 dumps, where nobody else handles it (its default would kill the
  // process); set up once, with the first recorder.
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(SIGUSR1, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) {
      ACCL_INFO("INIT", "SIGUSR1 has a handler already: flight recorder dumps only on failures and on request");
      return;
    }
    if (pipe2(gDumpPipe, O_CLOEXEC) != 0) return;
    std::thread([] {
      char b;
      while (true) {
        ssize_t n = read(gDumpPipe[0], &b, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        std::string path = dumpTraces("SIGUSR1");
        if (!path.empty()) ACCL_WARN("INIT", "SIGUSR1: flight recorder written to " << path);
      }
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = onDumpSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
  });
}

}  // namespace internal

namespace internal {

std::string traceDumpJson(const std::string& reason, size_t maxEntries, int indent) {
  std::vector<std::shared_ptr<FlightRecorder>> live;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lk(reg.mu);
    for (auto& w : reg.recorders)
      if (auto r = w.lock()) live.push_back(r);
  }
  if (live.empty()) return "";
  static const std::string host = internal::hostName();
  nlohmann::ordered_json j = {{"format", "accl-trace/1"},
                              {"host", host},
                              {"pid", static_cast<long>(getpid())},
                              {"reason", reason},
                              {"written_us", wallUs()},
                              {"groups", nlohmann::json::array()}};
  for (const auto& r : live) {
    nlohmann::ordered_json g = {{"name", r->group()},    {"backend", r->backend()}, {"rank", r->rank()},
                                {"size", r->size()},     {"capacity", r->capacity()},
                                {"entries", nlohmann::json::array()}};
    auto hosts = r->hosts();
    if (!hosts.empty()) g["hosts"] = hosts;
    auto peers = r->traffic();
    if (!peers.empty()) {
      g["peers"] = nlohmann::json::array();
      for (const auto& p : peers)
        g["peers"].push_back(nlohmann::ordered_json{{"rank", p.rank},
                                                    {"bytes_sent", p.bytesSent},
                                                    {"bytes_received", p.bytesReceived},
                                                    {"receive_busy_us", p.receiveBusyUs},
                                                    {"bytes_timed", p.bytesTimed},
                                                    {"bytes_held", p.bytesHeld},
                                                    {"idle_ms", p.idleMs}});
    }
    TraceEntry first = r->firstFailure();
    if (first.id) g["first_failure"] = entryJson(first);
    auto entries = r->entries();
    size_t from = maxEntries && entries.size() > maxEntries ? entries.size() - maxEntries : 0;
    for (size_t i = from; i < entries.size(); ++i) g["entries"].push_back(entryJson(entries[i]));
    j["groups"].push_back(std::move(g));
  }
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace internal

std::string dumpTraces(const std::string& reason) {
  // A stall warning, a failed op and SIGUSR1 may dump from different threads
  // at once; they share one file (and its .tmp): one writer at a time, each
  // with the recorders as they are when it writes. Bounded: a child forked
  // while a parent's thread wrote would otherwise wait forever.
  static internal::BoundedMutex writing;
  std::unique_lock<internal::BoundedMutex> lock(writing, std::chrono::seconds(10));
  if (!lock.owns_lock()) {
    ACCL_WARN("INIT", "flight recorder dump (" << reason << ") skipped: another dump of this process did not finish in 10 s");
    return "";
  }
  std::string text = internal::traceDumpJson(reason, 0, 1);
  if (text.empty()) return "";
  std::string dir;
  try {
    dir = Config::get().traceDir;
  } catch (const Error&) {
    return "";
  }
  static const std::string host = internal::hostName();
  mkdir(dir.c_str(), 0755);  // one level; an existing folder is fine
  std::string path = dir + "/accl-trace-" + host + "-" + std::to_string(getpid()) + ".json";
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text << "\n";
    if (!f.flush()) {
      ACCL_WARN("INIT", "cannot write the flight recorder to " << tmp << ": " << std::strerror(errno)
                                                                << " (ACCL_TRACE_DIR chooses the folder)");
      return "";
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    ACCL_WARN("INIT", errnoMessage("cannot rename " + tmp + " to " + path, errno));
    return "";
  }
  ACCL_INFO("INIT", "flight recorder written to " << path << " (" << reason << ")");
  return path;
}

}  // namespace accl
