// accl-diag --store: a live job answers through its rendezvous store
// (diag_responder.cc).
#pragma once

#include <memory>
#include <string>

#include "accl/process_group.h"
#include "accl/store.h"

namespace accl {
namespace internal {

// Watches `store` (every ACCL_DIAG_POLL) for accl-diag's queries while `group`
// and the store live, answering each with this process's flight recorder.
// Does nothing for stores that are not ACCL's TCP store, or with ACCL_DIAG_POLL=0.
void watchForDiagRequests(const std::shared_ptr<Store>& store, const std::shared_ptr<ProcessGroup>& group);
// The same for a store of another kind that may be called from any thread
// (torch's TCPStore, through torch_accl), under its own keys: this process
// answers as `rank` (its rank in the job), and `kind` names the store in the
// log. The caller keeps `store` alive as long as the watch should last.
void watchForeignStoreForDiagRequests(const std::shared_ptr<Store>& store, const std::shared_ptr<ProcessGroup>& group,
                                      int rank, const std::string& kind);
// Ends the watches of `group` (its destructor calls this), after waiting up
// to 5 s for a query in progress, which may hold the group's store.
void forgetDiagWatches(const ProcessGroup* group);

}  // namespace internal
}  // namespace accl
