// Network transport of the accl backend: a full mesh of TCP connections
// (several per pair of hosts), one non-blocking progress thread per
// communicator (epoll), a versioned wire protocol that refuses garbage. Where
// both ends of a pair have a usable RDMA port, the frames of collectives and
// point-to-point messages to that peer go over verbs instead (ib::Link, RC
// queue pairs, RDMA WRITE WITH IMMEDIATE); the sockets then carry only set-up
// and control (arrival queries, aborts), and their closing still tells this
// rank at once that a peer process is gone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "accl/store.h"
#include "accl/work.h"
#include "transport/ibverbs/ib_link.h"
#include "transport/transport.h"
#include "transport/wire.h"

namespace accl {
namespace core {

class TcpTransport : public Transport {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    std::vector<int> nstreams;  // connections to each peer (entry for self ignored)
    uint64_t token = 0;         // job token; connections that do not present it are dropped
    std::string ifSpec;         // ACCL_SOCKET_IFNAME syntax
    std::chrono::milliseconds timeout{30000};
    std::shared_ptr<Store> store;  // already prefixed for this communicator
    std::string where;             // "accl rank R/N accl" for messages
    // verbs: peers on other hosts (remote[p]) use it when both ends can;
    // required = no fallback to TCP (ACCL_TRANSPORTS without tcp).
    bool ibWanted = false;
    bool ibRequired = false;
    std::vector<bool> remote;
    ib::Settings ib;
  };
  explicit TcpTransport(Options o);
  ~TcpTransport() override;

  int rank() const override { return o_.rank; }
  int size() const override { return o_.size; }

  // Marks the start / end of an op: its descriptor goes into every data frame,
  // peers asking whether this rank arrived get its sequence number, and the
  // deadline bounds every wait. endOp with an error tells all peers (abort frame).
  // `timeout` is what `deadline` was computed from (named in timeout errors).
  void beginOp(const OpDesc& d, Clock::time_point deadline, std::chrono::milliseconds timeout);
  void endOp(const std::string& error = "");

  void send(int peer, uint32_t step, const void* buf, size_t len) override;
  void recv(int peer, uint32_t step, void* buf, size_t len) override;
  void wait() override;

  // Point-to-point messages of the user API: matched by (source, tag) in order
  // of posting, like MPI; peer may be -1 (any source) for receives. Posted at
  // once; `work` completes on the progress thread when the message is done,
  // failed, or `deadline` passed (Timeout).
  struct Request;
  void postTagged(bool isSend, int peer, int tag, void* buf, size_t len, Clock::time_point deadline,
                  std::shared_ptr<Work> work, std::string what);

  // For waits outside this transport (shared memory): throws RemoteError if
  // one of `peers` failed or any peer aborted the current op; detects mismatch.
  void checkPeers(const std::vector<int>& peers);
  // Throws accl::Timeout for the current op after asking every peer which op
  // it is in; names the ranks that did not arrive. `waitingFor` is what this
  // rank was waiting on when the deadline passed.
  [[noreturn]] void throwTimeout(const std::string& waitingFor);

  const std::string& interfaceName() const { return ifName_; }
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // Whether frames to `peer` go over verbs; the link (null: none); why verbs
  // is not used for the other peers ("" if it is for all).
  bool overIb(int peer) const { return !ibPeer_.empty() && ibPeer_[peer]; }
  const ib::Link* ibLink() const { return ib_.get(); }
  const std::string& ibStatus() const { return ibWhy_; }
  // Connections dropped because they failed the handshake (tests, logs).
  uint64_t droppedConnections() const { return dropped_.load(); }

 private:
  struct Conn;
  struct Unexpected;
  struct OutFrame;

  void connectMesh(Clock::time_point deadline);
  bool checkHello(int fd, const std::string& from, Clock::time_point deadline, int* peer, int* stream);
  void progressLoop();
  void acceptPending();
  void serviceHello(int fd);
  void readConn(Conn& c);
  void writeConn(Conn& c);
  bool handleHeader(Conn& c);
  void payloadDone(Conn& c);
  void closeConn(Conn& c, const std::string& why);
  void failPeer(int peer, const std::string& why);
  void enqueueFrame(Conn& c, OutFrame f);
  void postData(int peer, uint64_t key, const void* buf, size_t len, const std::shared_ptr<Request>& r);
  void setupIb(Clock::time_point deadline);
  // A frame that arrived over verbs goes through the same matching as a TCP one.
  void deliverIb(int peer, int qp, const FrameHeader& h, const char* payload);
  void postIb(int peer, FrameType type, uint64_t key, const void* buf, size_t len, const OpDesc& desc,
              const std::shared_ptr<Request>& r, bool spread);
  // Throws the first failure relevant to the current op, if any (mu_ held),
  // after withdrawing the op's requests (retireOpLocked).
  void throwIfFailed(const std::vector<int>& peers);
  void checkFailedLocked(const std::vector<int>& peers);
  // Withdraws a request (mu_ held): once this returns, nothing reads or
  // writes its buffer. Marks it done (failed with `why` unless it failed
  // already); `what` names it in the log when part of a send was written.
  void withdrawLocked(const std::shared_ptr<Request>& r, const char* why, const char* what);
  // Withdraws every request of the current op (mu_ held): called before an
  // error of the op leaves this transport, so that buffers freed while the
  // error unwinds (the algorithm's scratch, the caller's) are never touched.
  void retireOpLocked();
  std::vector<std::pair<int, std::string>> queryArrivals(uint64_t seq);

  Options o_;
  std::string ifName_, address_;
  int port_ = 0;
  int listenFd_ = -1;
  int epollFd_ = -1;
  int wakeFd_ = -1;
  std::vector<std::vector<std::unique_ptr<Conn>>> conns_;  // [peer][stream]
  std::map<int, Clock::time_point> pendingHello_;           // fd -> accepted at
  std::unique_ptr<ib::Link> ib_;
  std::vector<bool> ibPeer_;
  std::vector<std::vector<std::unique_ptr<Conn>>> ibConns_;  // receive state per [peer][qp]
  std::string ibWhy_;

  std::mutex mu_;
  std::condition_variable cv_;
  // current op
  OpDesc cur_{};
  bool opActive_ = false;
  Clock::time_point deadline_{};
  std::chrono::milliseconds opTimeout_{0};  // the current op's limit, for messages
  std::atomic<uint64_t> entered_{0};  // seq of the op this rank is in (+1; 0 = none yet)
  std::vector<std::shared_ptr<Request>> opReqs_;
  std::string mismatch_;
  // Ops this rank completed (newest last, a few kept) and whether any op
  // failed: data that arrives for a completed op means a peer called
  // something else (e.g. both ranks of a broadcast think they are the root).
  std::deque<OpDesc> completed_;
  bool anyFailed_ = false;
  std::string late_;
  void noteLate(int peer, const OpDesc& theirs);
  // matching
  std::map<std::pair<int, uint64_t>, std::shared_ptr<Request>> posted_;
  std::map<std::pair<int, uint64_t>, std::shared_ptr<Unexpected>> unexpected_;
  std::deque<std::shared_ptr<Request>> postedTagged_;
  std::deque<std::shared_ptr<Unexpected>> unexpectedTagged_;
  struct Pending {
    std::shared_ptr<Request> req;
    std::shared_ptr<Work> work;
    Clock::time_point deadline;
    std::string what;
  };
  std::vector<Pending> tagged_;  // user sends/recvs not yet completed
  // Completes finished or expired user requests (mu_ held); returns the
  // Work completions to run after mu_ is released.
  std::vector<std::function<void()>> reapTagged();
  // peers
  std::vector<std::string> peerFailed_;
  std::vector<std::pair<uint64_t, std::string>> aborts_;  // per peer: (seq + 1, reason)
  std::vector<std::pair<uint64_t, OpDesc>> replies_;      // per peer: (entered, desc)
  std::atomic<uint64_t> dropped_{0};

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace core
}  // namespace accl
