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
// Only stores of ACCL's own TCP server take part (accl-run, rendezvousFromEnv):
// those accl-diag can speak to. The watch holds the group and the store only
// weakly, so it never keeps either alive.
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "accl/config.h"
#include "accl/logging.h"
#include "accl/process_group.h"
#include "accl/store.h"
#include "accl/internal/diag_responder.h"
#include "accl/internal/trace_registry.h"

namespace accl {
namespace internal {

namespace {

constexpr char kRequest[] = "accl-diag/request";

struct Watch {
  std::weak_ptr<Store> store;
  std::weak_ptr<ProcessGroup> group;
  int rank = 0;
  int64_t seen = 0;  // the last request answered (or made before the group existed)
};

struct Responder {
  std::mutex mu;
  std::vector<Watch> watches;
  bool started = false;
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
  auto group = w.group.lock();
  auto store = w.store.lock();
  if (!group || !store) return false;
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
    std::vector<Watch> ws;
    {
      std::lock_guard<std::mutex> lk(r.mu);
      ws.swap(r.watches);
    }
    std::vector<Watch> keep;
    for (auto& w : ws)
      if (poll(w)) keep.push_back(std::move(w));
    std::lock_guard<std::mutex> lk(r.mu);
    for (auto& w : keep) r.watches.push_back(std::move(w));  // with those added meanwhile
  }
}

}  // namespace

void watchForDiagRequests(const std::shared_ptr<Store>& store, const std::shared_ptr<ProcessGroup>& group) {
  if (!store || !group) return;
  std::chrono::milliseconds period{0};
  try {
    period = Config::get().diagPoll;
  } catch (const Error&) {
    return;
  }
  if (period.count() <= 0) return;
  std::string prefix;
  if (!speaksTcp(store, &prefix)) return;
  Watch w;
  w.store = store;
  w.group = group;
  w.rank = group->rank();
  try {
    w.seen = store->add(kRequest, 0);  // queries made before this group existed are not for it
    if (group->rank() == 0) store->set("accl-diag/size", toBytes(std::to_string(group->size())));
  } catch (const std::exception& e) {
    ACCL_INFO("INIT", "accl-diag: the rendezvous store cannot be watched: " << e.what());
    return;
  }
  ACCL_INFO("INIT", "accl-diag --store watches this group's rendezvous store every "
                        << period.count() << " ms" << (prefix.empty() ? "" : " (key prefix '" + prefix + "')"));
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

}  // namespace internal
}  // namespace accl
