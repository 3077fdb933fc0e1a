#include "accl/trace.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/logging.h"
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

struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<FlightRecorder>> recorders;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: dumps may run during exit
  return *r;
}

std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
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
  return j;
}

}  // namespace

const char* toString(OpState s) {
  switch (s) {
    case OpState::Queued: return "queued";
    case OpState::Started: return "started";
    case OpState::Done: return "done";
    case OpState::Failed: return "failed";
  }
  return "unknown";
}

FlightRecorder::FlightRecorder(size_t capacity, std::string group, std::string backend, int rank, int size)
    : ring_(std::max<size_t>(capacity, 1)), group_(std::move(group)), backend_(std::move(backend)), rank_(rank),
      size_(size) {}

FlightRecorder::Slot* FlightRecorder::find(uint64_t id) {
  if (id == 0) return nullptr;
  Slot& e = ring_[id % ring_.size()];
  return e.id == id ? &e : nullptr;
}

uint64_t FlightRecorder::begin(OpType op, DataType dtype, uint64_t count, int root, int peer, uint64_t bytes) {
  int64_t now = steadyNs();
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t id = next_++;
  Slot& e = ring_[id % ring_.size()];
  e.id = id;
  e.seq = -1;
  e.op = op;
  e.dtype = dtype;
  e.state = OpState::Queued;
  e.count = count;
  e.bytes = bytes;
  e.root = root;
  e.peer = peer;
  e.algorithm = nullptr;
  e.transport[0] = 0;
  e.queuedNs = now;
  e.startedNs = e.finishedNs = 0;
  if (!e.error.empty()) e.error.clear();
  return id;
}

void FlightRecorder::started(uint64_t id, int64_t seq, const char* algorithm, const char* transport) {
  int64_t now = steadyNs();
  std::lock_guard<std::mutex> lk(mu_);
  if (Slot* e = find(id)) {
    if (e->state == OpState::Queued) e->state = OpState::Started;
    if (!e->startedNs) e->startedNs = now;
    if (seq >= 0) e->seq = seq;
    if (algorithm) e->algorithm = algorithm;
    if (transport) {
      std::strncpy(e->transport, transport, sizeof(e->transport) - 1);
      e->transport[sizeof(e->transport) - 1] = 0;
    }
  }
}

void FlightRecorder::finished(uint64_t id, const std::exception_ptr& error) {
  int64_t now = steadyNs();
  if (!error) {
    std::lock_guard<std::mutex> lk(mu_);
    if (Slot* e = find(id)) {
      if (!e->startedNs) e->startedNs = now;
      e->finishedNs = now;
      e->state = OpState::Done;
    }
    return;
  }
  std::string why;
  bool dump = false;
  try {
    std::rethrow_exception(error);
  } catch (const Error& x) {
    why = x.what();
    dump = x.code() == ErrorCode::Timeout || x.code() == ErrorCode::RemoteError;
  } catch (const std::exception& x) {
    why = x.what();
  } catch (...) {
    why = "an exception that is not a std::exception";
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (Slot* e = find(id)) {
      if (!e->startedNs) e->startedNs = now;
      e->finishedNs = now;
      e->state = OpState::Failed;
      e->error = why;
    }
  }
  if (!dump) return;
  // One dump per failure burst: the ops after a failure fail at once too.
  static std::atomic<int64_t> lastDump{0};
  int64_t last = lastDump.load();
  if ((last && now - last < 10'000'000'000LL) || !lastDump.compare_exchange_strong(last, now)) return;
  dumpTraces("an op failed: " + why);
}

std::vector<TraceEntry> FlightRecorder::entries() const {
  // Steady-clock times become wall-clock microseconds here, not per op.
  int64_t offsetUs = wallUs() - steadyNs() / 1000;
  auto wall = [&](int64_t ns) { return ns ? ns / 1000 + offsetUs : 0; };
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<TraceEntry> out;
  uint64_t first = next_ > ring_.size() ? next_ - ring_.size() : 1;
  for (uint64_t id = first; id < next_; ++id) {
    const Slot& s = ring_[id % ring_.size()];
    TraceEntry e;
    e.id = s.id;
    e.seq = s.seq;
    e.op = s.op;
    e.dtype = s.dtype;
    e.count = s.count;
    e.root = s.root;
    e.peer = s.peer;
    e.bytes = s.bytes;
    e.algorithm = s.algorithm ? s.algorithm : "";
    e.transport = s.transport;
    e.state = s.state;
    e.queuedUs = wall(s.queuedNs);
    e.startedUs = wall(s.startedNs);
    e.finishedUs = wall(s.finishedNs);
    e.error = s.error;
    out.push_back(std::move(e));
  }
  return out;
}

namespace internal {

void registerRecorder(const std::shared_ptr<FlightRecorder>& r) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  reg.recorders.erase(std::remove_if(reg.recorders.begin(), reg.recorders.end(),
                                     [](const std::weak_ptr<FlightRecorder>& w) { return w.expired(); }),
                      reg.recorders.end());
  reg.recorders.push_back(r);
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

std::string dumpTraces(const std::string& reason) {
  std::vector<std::shared_ptr<FlightRecorder>> live;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lk(reg.mu);
    for (auto& w : reg.recorders)
      if (auto r = w.lock()) live.push_back(r);
  }
  if (live.empty()) return "";
  std::string dir;
  try {
    dir = Config::get().traceDir;
  } catch (const Error&) {
    return "";
  }
  static const std::string host = hostName();
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
    for (const auto& e : r->entries()) g["entries"].push_back(entryJson(e));
    j["groups"].push_back(std::move(g));
  }
  mkdir(dir.c_str(), 0755);  // one level; an existing folder is fine
  std::string path = dir + "/accl-trace-" + host + "-" + std::to_string(getpid()) + ".json";
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
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
