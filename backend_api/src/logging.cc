#include "accl/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "accl/internal/process_info.h"

namespace accl {

namespace {
std::atomic<int> gRank{-1};
std::atomic<int> gSize{0};
std::mutex gMu;

const char* levelName(LogLevel l) {
  switch (l) {
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Trace: return "TRACE";
    default: return "NONE";
  }
}

FILE* sink() {
  static FILE* f = [] {
    std::string path;
    try {
      path = Config::get().debugFile;
    } catch (...) {
    }
    if (path.empty()) return stderr;
    std::string out = internal::expandPathPattern(path, -1, nullptr);
    FILE* file = std::fopen(out.c_str(), "a");
    return file ? file : stderr;
  }();
  return f;
}
}  // namespace

namespace internal {
std::atomic<int> logCeiling{static_cast<int>(LogLevel::Trace)};
}  // namespace internal

bool logEnabled(LogLevel level, const char* subsys) {
  const Config* cfg;
  try {
    cfg = &Config::get();
  } catch (...) {
    return level == LogLevel::Warn;
  }
  internal::logCeiling.store(std::max(static_cast<int>(cfg->debug), static_cast<int>(LogLevel::Warn)),
                             std::memory_order_relaxed);
  if (static_cast<int>(level) > static_cast<int>(cfg->debug)) return false;
  if (level == LogLevel::Warn || cfg->debugSubsys.empty()) return true;
  bool listed = std::find(cfg->debugSubsys.begin(), cfg->debugSubsys.end(), subsys) != cfg->debugSubsys.end();
  return listed != cfg->debugSubsysExcluded;
}

std::string logPrefix() {
  static const std::string host = internal::hostName();
  // Wall-clock time in UTC with milliseconds: lines of every host sort together.
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[96];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  // host:pid:tid as NCCL's lines (the tid is the kernel's: top -H, gdb, perf).
  std::string prefix = std::string(stamp) + " " + host + ":" + std::to_string(getpid()) + ":" +
                       std::to_string(static_cast<long>(syscall(SYS_gettid)));
  int rank = gRank.load();
  if (rank >= 0) {
    prefix += " [rank " + std::to_string(rank) + "/" + std::to_string(gSize.load()) + "]";
  } else if (const char* r = std::getenv("RANK")) {
    // Before the first group: the launcher's rank (torchrun, accl-run), marked as such.
    const char* n = std::getenv("WORLD_SIZE");
    prefix += std::string(" [rank ") + r + "/" + (n ? n : "?") + " (launcher)]";
  }
  return prefix;
}

void logLine(LogLevel level, const char* subsys, const std::string& msg) {
  std::string line = logPrefix() + " ACCL " + levelName(level) + " " + subsys + ": " + msg + "\n";
  std::lock_guard<std::mutex> lk(gMu);
  FILE* f = sink();
  std::fwrite(line.data(), 1, line.size(), f);
  std::fflush(f);
}

void setLogRank(int rank, int size) {
  int expected = -1;
  if (gRank.compare_exchange_strong(expected, rank)) gSize.store(size);
}

}  // namespace accl

namespace accl {

void logConfigNotes() {
  static std::once_flag once;
  std::call_once(once, [] {
    const Config* cfg;
    try {
      cfg = &Config::get();
    } catch (...) {
      return;  // the parse error reaches the caller of Config::get()
    }
    std::vector<std::string> names;
    for (char** e = environ; e && *e; ++e) {
      std::string kv = *e;
      names.push_back(kv.substr(0, kv.find('=')));
    }
    for (const auto& w : unknownVariableWarnings(names)) ACCL_WARN("INIT", w);
    for (const auto& n : cfg->notes) ACCL_INFO("INIT", n);
  });
}

}  // namespace accl
