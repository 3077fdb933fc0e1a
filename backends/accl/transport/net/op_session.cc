#include "transport/net/op_session.h"

#include <algorithm>

#include "accl/errors.h"

namespace accl {
namespace core {
namespace net {

void OpSession::begin(const OpDesc& d, Clock::time_point deadline, std::chrono::milliseconds timeout) {
  beginLocal(d, deadline, timeout);
  mismatch_.clear();
  reqs_.clear();
}

void OpSession::end(bool ok) {
  active_.store(false, std::memory_order_relaxed);
  reqs_.clear();
  if (!ok) {
    anyFailed_ = true;
    return;
  }
  completed_.push_back(cur_);
  if (completed_.size() > 16) completed_.pop_front();
}

void OpSession::noteDesc(int peer, const OpDesc& theirs) {
  if (active() && theirs.seq == cur_.seq && theirs != cur_ && mismatch_.empty())
    mismatch_ = "rank " + std::to_string(peer) + " called " + describe(theirs);
}

void OpSession::noteLate(int peer, const OpDesc& theirs) {
  if (!late_.empty()) return;
  std::string mine = "op #" + std::to_string(theirs.seq);
  for (auto& d : completed_)
    if (d.seq == theirs.seq) mine = describe(d);
  late_ = "rank " + std::to_string(peer) + " called " + describe(theirs) + " but this rank completed " + mine +
          " without receiving that data";
}

bool OpSession::firstDone(size_t n) const {
  n = std::min(n, reqs_.size());
  for (size_t i = 0; i < n; ++i)
    if (!reqs_[i]->done) return false;
  return true;
}

void OpSession::check(const std::vector<std::string>& peerFailed, const std::vector<int>& peers) const {
  if (!late_.empty()) throw InvalidArgument("mismatched collectives: " + late_);
  if (!mismatch_.empty())
    throw InvalidArgument("mismatched collectives: this rank called " + describe(cur_) + " but " + mismatch_);
  // A peer that failed this op, or an earlier one this rank completed (e.g. a
  // broadcast root that sent and returned before its peer saw the mismatch).
  for (size_t p = 0; p < aborts_.size(); ++p)
    if (aborts_[p].first != 0 && aborts_[p].first <= cur_.seq + 1)
      throw RemoteError("rank " + std::to_string(p) + " failed op #" + std::to_string(aborts_[p].first - 1) + ": " +
                        aborts_[p].second);
  for (auto& r : reqs_)
    switch (r->failure) {
      case Failure::None:
        break;
      case Failure::Mismatch:
        throw InvalidArgument("mismatched collectives: " + r->error);
      case Failure::Remote:
        throw RemoteError(describe(cur_) + ": " + r->error);
    }
  for (int p : peers)
    if (!peerFailed[p].empty()) throw RemoteError(describe(cur_) + ": rank " + std::to_string(p) + ": " + peerFailed[p]);
}

}  // namespace net
}  // namespace core
}  // namespace accl
