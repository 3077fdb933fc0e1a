// accl-diag --store: a live job answers through its rendezvous store.
//
// Each process watches the stores of the groups it created (ACCL_DIAG_POLL,
// one request per period): when accl-diag raises the request counter, the
// process puts its flight recorder dump into the store, and accl-diag, run on
// any host that reaches the store, reads every rank's. A rank that does not
// answer is stopped, hung in a way that stops its threads, or gone; accl-diag
// names it. Keys, under the group's store:
//   accl-diag/request          counter; accl-diag adds 1 per query
//   accl-diag/size             the group's size (set by rank 0)
//   accl-diag/entries/<n>      how many ops per group query n wants (optional)
//   accl-diag/reply/<n>/<r>    rank r's dump for query n (accl-trace/1 JSON)
// On a foreign store (torch's), shared by all groups of the job, processes
// answer instead of ranks:
//   accl-diag/processes        counter; each watching process takes an index i
//   accl-diag/process/<i>      "<host> pid <pid> rank <rank>"
//   accl-diag/reply/<n>/<i>    process i's dump
//   accl-diag/done/<n>/<i>     counter, 1 once that dump is there
// Stores of ACCL's own TCP server take part (accl-run, rendezvousFromEnv),
// and torch's TCPStore through torch_accl (the keys at its root, one watch per
// process, answering as the process's rank in the default group): those
// accl-diag can speak to. The watch holds the group and the store only
// weakly, so it never keeps either alive: the group is never taken, and the
// store only for one query, and a group's destructor waits for a query in
// progress (at most 5 s), so no group or store is destroyed on the watch's
// thread after its owner let go of it (at exit, that raced the process's
// static destructors; and a group that the watch outlived by a moment was
// torn down late, or never, with no orderly goodbye to its peers).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "accl/config.h"
#include "accl/logging.h"
#include "accl/process_group.h"
#include "accl/store.h"
#include "accl/internal/bounded_mutex.h"
#include "accl/internal/diag_responder.h"
#include "accl/internal/process_info.h"
#include "accl/internal/trace_registry.h"

namespace accl {
namespace internal {

namespace {

constexpr char kRequest[] = "accl-diag/request";

struct Watch {
  std::weak_ptr<Store> store;
  std::weak_ptr<ProcessGroup> group;
  const ProcessGroup* key = nullptr;  // the group, for forgetDiagWatches()
  int rank = 0;  // the <r> of its replies: the group rank, or (foreign stores) the process's index
  bool foreign = false;  // also raises accl-diag/done/<n>/<r> after its reply
  int64_t seen = 0;  // the last request answered (or made before the group existed)
};

struct Responder {
  std::mutex mu;                          // watches, started
  std::vector<std::shared_ptr<Watch>> watches;
  bool started = false;
  internal::BoundedMutex round;           // held while the watches are polled
};

Responder& responder() {
  static Responder* r = new Responder;  // never destroyed: its thread may outlive static destructors
  return *r;
}

// Whether accl-diag can reach this store: ACCL's TCP store, under any prefixes.
bool speaksTcp(const std::shared_ptr<Store>& s, std::string* prefix) {
  Store* p = s.get();
  while (auto* ps = dynamic_cast<PrefixStore*>(p)) {
    *prefix = ps->prefix() + (prefix->empty() ? "" : "/" + *prefix);
    p = ps->base().get();
  }
  return dynamic_cast<TcpStore*>(p) != nullptr;
}

// One poll of one watch; false when the watch is over (group or store gone,
// or the store fails).
bool poll(Watch& w) {
  if (w.group.expired()) return false;  // true from the moment the last owner let go
  auto store = w.store.lock();
  if (!store) return false;
  try {
    int64_t n = store->add(kRequest, 0);
    if (n <= w.seen) return true;
    w.seen = n;
    size_t maxEntries = 200;
    std::string ek = "accl-diag/entries/" + std::to_string(n);
    if (store->check({ek})) {
      Bytes b = store->get(ek);
      try {
        long long v = std::stoll(std::string(b.begin(), b.end()));
        if (v >= 0) maxEntries = static_cast<size_t>(v);
      } catch (const std::exception&) {
      }
    }
    std::string text = traceDumpJson("accl-diag --store, query " + std::to_string(n), maxEntries, -1);
    if (text.empty())  // no recorder (ACCL_TRACE_BUFFER=0): say so rather than stay silent
      text = "{\"format\":\"accl-trace/1\",\"reason\":\"flight recorder off (ACCL_TRACE_BUFFER=0)\",\"groups\":[]}";
    store->set("accl-diag/reply/" + std::to_string(n) + "/" + std::to_string(w.rank), toBytes(text));
    // A counter says the reply is there: a client of torch 1.x's store has
    // no check(), and its add(key, 0) is the one call that asks safely.
    if (w.foreign) store->add("accl-diag/done/" + std::to_string(n) + "/" + std::to_string(w.rank), 1);
    ACCL_INFO("INIT", "accl-diag query " << n << ": flight recorder put into the rendezvous store ("
                                         << text.size() << " bytes)");
    return true;
  } catch (const std::exception& e) {
    ACCL_INFO("INIT", "accl-diag watch of the rendezvous store ends: " << e.what());
    return false;
  }
}

void run(std::chrono::milliseconds period) {
  Responder& r = responder();
  for (;;) {
    std::this_thread::sleep_for(period);
    std::lock_guard<internal::BoundedMutex> busy(r.round);
    std::vector<std::shared_ptr<Watch>> ws;
    {
      std::lock_guard<std::mutex> lk(r.mu);
      ws = r.watches;
    }
    std::vector<Watch*> over;
    for (auto& w : ws)
      if (!poll(*w)) over.push_back(w.get());
    std::lock_guard<std::mutex> lk(r.mu);
    r.watches.erase(std::remove_if(r.watches.begin(), r.watches.end(),
                                   [&](const std::shared_ptr<Watch>& w) {
                                     return std::find(over.begin(), over.end(), w.get()) != over.end();
                                   }),
                    r.watches.end());
  }
}

}  // namespace

namespace {

// size > 0: this group's ranks answer as 0..size-1 ("accl-diag/size").
// size 0 (a foreign store, shared by every group of the job): each watching
// process takes the next index ("accl-diag/processes") and says who it is
// under "accl-diag/process/<index>" (host, pid, rank).
void watch(const std::shared_ptr<Store>& store, const std::shared_ptr<ProcessGroup>& group, int rank, int size,
           const std::string& what) {
  std::chrono::milliseconds period{0};
  try {
    period = Config::get().diagPoll;
  } catch (const Error&) {
    return;
  }
  if (period.count() <= 0) return;
  auto w = std::make_shared<Watch>();
  w->store = store;
  w->group = group;
  w->key = group.get();
  w->rank = rank;
  try {
    w->seen = store->add(kRequest, 0);  // queries made before this group existed are not for it
    if (size > 0) {
      if (rank == 0) store->set("accl-diag/size", toBytes(std::to_string(size)));
    } else {
      w->foreign = true;
      w->rank = static_cast<int>(store->add("accl-diag/processes", 1) - 1);
      store->set("accl-diag/process/" + std::to_string(w->rank),
                 toBytes(hostName() + " pid " + std::to_string(getpid()) + " rank " + std::to_string(rank)));
    }
  } catch (const std::exception& e) {
    ACCL_INFO("INIT", "accl-diag: " << what << " cannot be watched: " << e.what());
    return;
  }
  ACCL_INFO("INIT", "accl-diag --store watches " << what << " every " << period.count() << " ms");
  Responder& r = responder();
  std::lock_guard<std::mutex> lk(r.mu);
  r.watches.push_back(std::move(w));
  if (r.started) return;
  try {
    std::thread(run, period).detach();
    r.started = true;
  } catch (const std::exception& e) {
    ACCL_INFO("INIT", "accl-diag: no thread to watch the rendezvous store: " << e.what());
  }
}

}  // namespace

void forgetDiagWatches(const ProcessGroup* group) {
  Responder& r = responder();
  {
    std::lock_guard<std::mutex> lk(r.mu);
    auto mine = [&](const std::shared_ptr<Watch>& w) { return w->key == group; };
    if (std::none_of(r.watches.begin(), r.watches.end(), mine)) return;
    r.watches.erase(std::remove_if(r.watches.begin(), r.watches.end(), mine), r.watches.end());
  }
  // A query in progress may hold the group's store: let it finish first.
  std::unique_lock<internal::BoundedMutex> wait(r.round, std::defer_lock);
  if (!wait.try_lock_for(std::chrono::seconds(5)))
    ACCL_INFO("INIT", "accl-diag: a query through the rendezvous store still runs as a group is destroyed");
}

void watchForDiagRequests(const std::shared_ptr<Store>& store, const std::shared_ptr<ProcessGroup>& group) {
  if (!store || !group) return;
  std::string prefix;
  if (!speaksTcp(store, &prefix)) return;
  watch(store, group, group->rank(), group->size(),
        "this group's rendezvous store" + (prefix.empty() ? std::string() : " (key prefix '" + prefix + "')"));
}

void watchForeignStoreForDiagRequests(const std::shared_ptr<Store>& store, const std::shared_ptr<ProcessGroup>& group,
                                      int rank, const std::string& kind) {
  if (!store || !group) return;
  watch(store, group, rank, 0, kind + " (accl-diag --store HOST:PORT --store-kind torch)");
}

}  // namespace internal
}  // namespace accl
