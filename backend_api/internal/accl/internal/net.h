// Small socket helpers shared by the TCP store and TCP transports.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "accl/errors.h"

namespace accl {
namespace internal {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` (>= 0).
int msLeft(Clock::time_point deadline);

// Connects to host:port, retrying refused connections until `deadline`.
// Throws Timeout / SystemError naming the address. `refusedFor`: where
// something should listen there already (an address its owner published
// after it listened), connections refused for that long end the retries
// (ConnectionRefused) rather than waiting out the deadline.
struct ConnectionRefused : SystemError {
  using SystemError::SystemError;
};
int connectTo(const std::string& host, int port, Clock::time_point deadline,
              Clock::duration refusedFor = Clock::duration::max());
// Listens on host:port ("" = all addresses, port 0 = any); returns the fd and sets *boundPort.
int listenOn(const std::string& host, int port, int* boundPort);
void setNonBlocking(int fd, bool on);
void setNoDelay(int fd);
// Blocking full send/recv bounded by `deadline`; `what` names the peer in errors.
// recvAll throws RemoteError if the peer closes the connection.
void sendAll(int fd, const void* data, size_t len, Clock::time_point deadline, const std::string& what);
void recvAll(int fd, void* data, size_t len, Clock::time_point deadline, const std::string& what);

struct Interface {
  std::string name;
  std::string address;  // numeric IPv4 or IPv6
  int family = 0;
  bool loopback = false;
};
// Up interfaces with an address, IPv4 before IPv6.
std::vector<Interface> listInterfaces();
// Filters by an NCCL-style spec: "eth,ib" prefixes, "^docker,lo" excludes,
// "=eth0" exact names ("^=" exact excludes). Empty spec: first up
// non-loopback, non-docker interface, else loopback.
std::vector<Interface> selectInterfaces(const std::string& spec);
bool matchInterfaceSpec(const std::string& spec, const std::string& name);
// Where a store server for clients that connect to `host` listens, for
// ACCL_STORE_BIND `mode` (auto, any, an address): "" = every interface.
std::string storeBindAddress(const std::string& host, const std::string& mode);

}  // namespace internal
}  // namespace accl
