// accl-diag --store: a live job answers through its rendezvous store
// (diag_responder.cc).
#pragma once

#include <memory>

#include "accl/process_group.h"
#include "accl/store.h"

namespace accl {
namespace internal {

// Watches `store` (every ACCL_DIAG_POLL) for accl-diag's queries while `group`
// and the store live, answering each with this process's flight recorder.
// Does nothing for stores that are not ACCL's TCP store, or with ACCL_DIAG_POLL=0.
void watchForDiagRequests(const std::shared_ptr<Store>& store, const std::shared_ptr<ProcessGroup>& group);

}  // namespace internal
}  // namespace accl
