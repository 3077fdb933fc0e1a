// The socket link: a full mesh of TCP connections between the ranks of a
// communicator (several streams per pair of hosts), each opened with a Hello
// that carries the job token and checked before use. After set-up every
// connection is non-blocking and served by the event loop; the listener
// stays open only to refuse (and log) late, foreign or garbage connections,
// which never disturb the job. Frames of big collective messages are cut in
// chunks spread over the streams; ordered messages use stream 0. A closed or
// reset connection fails its peer (FrameSink::onPeerFailed): that is how a
// dead peer process is noticed, also for peers whose data goes over verbs.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accl/store.h"
#include "transport/net/event_loop.h"
#include "transport/net/frame_link.h"

namespace accl {
namespace core {
namespace net {

class SocketLink : public FrameLink {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    std::vector<int> nstreams;  // connections to each peer (entry for self ignored)
    uint64_t token = 0;         // job token; connections that do not present it are dropped
    std::string ifSpec;         // ACCL_SOCKET_IFNAME syntax
    std::shared_ptr<Store> store;  // already prefixed for the communicator
    std::string where;             // "accl rank R/N accl" for messages
  };
  // Listens on the chosen interface, publishes the address and connects the
  // mesh (blocking, bounded by `deadline`). Throws InvalidArgument (no
  // interface matches), Timeout (ranks that never connected), SystemError.
  SocketLink(Options o, FrameSink* sink, Clock::time_point deadline);
  // Orderly close: half-close, then drain what peers still send for up to
  // 2 s, so that no connection is reset with data in flight.
  ~SocketLink() override;

  // From now on the connections and the listener are served by `loop`.
  void attach(EventLoop* loop);
  // Drops connections that did not complete their Hello in time (call
  // from the loop's thread, now and then).
  void expireHandshakes(Clock::time_point now);

  const std::string& interfaceName() const { return ifName_; }
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  const char* name() const override { return "tcp"; }
  bool serves(int peer) const override { return !conns_[peer].empty(); }
  void send(int peer, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len,
            const OutPtr& m, Route route) override;
  bool withdraw(const OutPtr& m) override;
  void dropPeer(int peer) override;
  // Whether every open connection has written all it was given.
  bool flushed() const;
  // Reads what stream 0 from `peer` (where small messages and ordered frames
  // travel) holds now, without blocking, as the loop would: for a thread
  // that waits on a small message and polls rather than sleep (the caller
  // holds what serialises the loop's dispatch). The frames completed.
  uint64_t pollPeer(int peer);
  // While a waiter polls stream 0 from `peer` (true), the loop is not woken
  // by its bytes: a wake-up of the progress thread per message, on a core
  // the waiters may need, for bytes the waiter reads. False: it is again
  // (what came meanwhile wakes it at once). False if epoll refused (the
  // connection is then closed and its peer failed).
  bool setPolled(int peer, bool polled);
  // An op's waiter that got what it polled for leaves stream 0 from `peer`
  // polled until `untilNs` (steady-clock ns) rather than wake the loop again
  // at once: the next op, posted a few microseconds later, polls it again,
  // and its bytes, sent meanwhile by a peer that runs ahead, wake no one (a
  // wake-up of the progress thread per message, and a held copy). A waiter
  // that polls it takes it over
  // (setPolled); endLingers, or the loop once the time is up (expireLingers),
  // gives it back to the loop, which then reads what came.
  void linger(int peer, int64_t untilNs);
  bool lingering() const { return lingering_ > 0; }
  // How many times a connection was left lingering since the link was made.
  uint64_t lingered() const { return lingered_; }
  // When the first lingering connection is due (steady-clock ns; 0: none).
  int64_t lingerUntil() const;
  void expireLingers(Clock::time_point now);
  // Every lingering connection goes back to the loop now (a waiter that
  // sleeps, a receive the loop must serve). On the loop's thread, or with
  // what serialises it held; `read`: what came is read at once.
  void endLingers(bool read);

  // A data frame of a message of at least kDeferMin bytes that no receive
  // wants yet (FrameSink::readNow: none posted from that peer, none of its
  // messages under way or held) is left in the socket's buffers, its
  // connection not read, for holdForReceiveNs of its size: a receive posted
  // meanwhile takes it with no held copy, and the sender, whose socket
  // fills, waits for its receiver as over shared memory and verbs. Then it
  // is read as before (held). Frames behind it on that connection wait too:
  // any receive from the peer posted meanwhile (resumeDeferred), a closed or
  // failing connection, and the time limit end the wait.
  static constexpr size_t kDeferMin = size_t(64) << 10;
  // Stream 0's read buffer (Conn::ahead); payloads this big and larger are
  // read straight into their receive.
  static constexpr size_t kReadAhead = size_t(4) << 10;
  // Connections whose buffered frames wait for the loop (a frame left
  // waiting that was resumed while its bytes were all in the buffer, which
  // no epoll event announces): the loop reads them (readPending()).
  bool pendingReads() const { return pendingReads_ > 0; }
  void readPending();
  bool deferring() const { return deferred_ > 0; }
  // When the first connection left waiting should be read anyway (steady
  // clock ns; 0: none waits). The loop does not sleep past it.
  int64_t deferredUntil() const;
  // A receive from `peer` (-1: any) was posted: the connections from it left
  // waiting are read again (the loop reads them; the frame lands in the
  // receive, or is held if it is not for it).
  void resumeDeferred(int peer);
  // From the loop: those whose time is up at `now` are read again.
  void expireDeferred(Clock::time_point now);
  // How many frames were left waiting since the link was made.
  uint64_t framesDeferred() const { return framesDeferred_; }
  // How many recv calls the connections made since the link was made.
  uint64_t reads() const { return reads_; }

 private:
  struct OutFrame {
    FrameHeader hdr{};
    const char* data = nullptr;
    size_t sent = 0;  // of header + payload
    OutPtr msg;
    std::shared_ptr<std::string> copy;  // the payload, once its message was withdrawn mid-frame
  };
  struct Conn : EventHandler {
    SocketLink* link = nullptr;
    int fd = -1;
    int peer = -1;
    int stream = 0;
    bool closed = false;
    std::deque<OutFrame> out;
    bool armedOut = false;
    bool polled = false;  // setPolled: EPOLLIN is off
    int64_t deferUntil = 0;  // > 0: its frame was left waiting until then (EPOLLIN is off)
    int64_t lingerUntil = 0;  // > 0: polled with no waiter until then (linger)
    FrameHeader hdr{};  // the frame being read
    size_t hdrGot = 0;
    size_t pos = 0;  // of its payload
    LandingPtr land;
    // Stream 0 (small messages and control frames) reads through a buffer
    // of its own: a read for a header or a small payload asks for up to
    // kReadAhead bytes, so one recv brings a frame whole, or many small
    // frames that came back to back (two recv calls per frame before: 8 B
    // broadcasts between namespace hosts read 12,000 times for 6,000
    // messages, where Open MPI's readv into its connection cache read 30).
    // What the buffer holds is read before the socket.
    std::unique_ptr<char[]> ahead;
    size_t aheadPos = 0, aheadEnd = 0;
    bool buffered() const { return aheadPos < aheadEnd; }
    bool readPending = false;  // buffered bytes the loop reads on its next pass
    bool drained = false;      // this readConn's last recv got less than it asked: the socket was empty
    void onEvents(uint32_t events) override;
  };
  struct Listener : EventHandler {
    SocketLink* link = nullptr;
    void onEvents(uint32_t) override { link->acceptLate(); }
  };
  struct LateConn : EventHandler {
    SocketLink* link = nullptr;
    int fd = -1;
    Clock::time_point since;
    void onEvents(uint32_t) override;
  };

  // set-up (mesh.cc)
  void connectMesh(Clock::time_point deadline);
  bool checkHello(int fd, const std::string& from, Clock::time_point deadline, int* peer, int* stream);
  std::unique_ptr<Conn> makeConn(int fd, int peer, int stream);
  void acceptLate();
  void refuseLate(int fd);
  // data (socket_link.cc)
  void readConn(Conn& c);
  // `atEof` names an end of the stream here; `betweenFrames`: such an end is
  // clean (closeConn's `cleanEnd`).
  size_t readSome(Conn& c, char* dst, size_t len, const char* atEof, bool betweenFrames);
  // The header read whole: refused (closes, false), left waiting (false,
  // deferUntil set), or admitted (true; its landing set).
  bool headerArrived(Conn& c);
  bool admitHeader(Conn& c);
  // The connection's frame left waiting is admitted and read again.
  void resume(Conn& c);
  // The epoll events the connection wants now (EPOLLIN unless polled or
  // left waiting, EPOLLOUT while its queue is not empty); false if epoll
  // refused (the connection is then closed, its peer failed).
  bool rearm(Conn& c);
  void frameArrived(Conn& c);
  // Stream 0 connections lingering until `dueNs` or before go back to the
  // loop (linger); `read`: what came is read now.
  void endLingersDue(int64_t dueNs, bool read);
  void writeConn(Conn& c);
  void queue(Conn& c, OutFrame f);
  // Closes the connection and fails its peer (FrameSink::onPeerFailed) with
  // `why`. A clean end (the peer closed its end between two frames) fails
  // the peer only once all its streams ended: a rank that leaves closes them
  // all at once, their ends arrive in any order, and what it sent last on
  // another stream (its last data, its farewell) must land first.
  void closeConn(Conn& c, const std::string& why, bool cleanEnd = false);

  Options o_;
  FrameSink* sink_;
  EventLoop* loop_ = nullptr;
  std::string ifName_, address_;
  int port_ = 0;
  int listenFd_ = -1;
  Listener listener_;
  std::vector<std::vector<std::unique_ptr<Conn>>> conns_;  // [peer][stream]
  std::map<int, std::unique_ptr<LateConn>> late_;         // fd -> connection accepted after set-up
  uint64_t framesIn_ = 0;                                  // frames read whole, for pollPeer
  int deferred_ = 0;                                       // connections left waiting
  int pendingReads_ = 0;                                   // connections with Conn::readPending
  int lingering_ = 0;                                      // connections with Conn::lingerUntil
  uint64_t lingered_ = 0;
  uint64_t framesDeferred_ = 0;
  uint64_t reads_ = 0;
};

}  // namespace net
}  // namespace core
}  // namespace accl
