// Key-value stores used for rendezvous (modeled on c10d::Store).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accl {

using Bytes = std::vector<uint8_t>;
Bytes toBytes(const std::string& s);
std::string toString(const Bytes& b);

// All methods are thread-safe and bounded by timeout() unless an explicit
// timeout is given; an expired wait throws accl::Timeout naming the keys.
class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(300)};

  virtual ~Store() = default;
  // Stores `value` under `key`, replacing any previous value; wakes waiters.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists, then returns its value.
  virtual Bytes get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored under `key` (0 if absent),
  // returns the new value. The value is stored as decimal text.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Atomically: if the current value equals `expected` (or the key is absent and
  // `expected` is empty), stores `desired`. Returns the value now stored.
  virtual Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // Non-blocking: whether all keys exist.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until all keys exist or `timeout` expires (Timeout).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  // Removes `key`; returns whether it existed.
  virtual bool deleteKey(const std::string& key) = 0;
  virtual int64_t numKeys() = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void setTimeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

// In-process store; ranks as threads share one instance.
class HashStore : public Store {
 public:
  HashStore();
  ~HashStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool deleteKey(const std::string& key) override;
  int64_t numKeys() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Store in a file shared by processes on one host (or a shared file system
// with working flock). The file is an append-only log guarded by flock(2).
class FileStore : public Store {
 public:
  explicit FileStore(const std::string& path);
  ~FileStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool deleteKey(const std::string& key) override;
  int64_t numKeys() override;
  const std::string& path() const;
  // For a file named after one job (the store that mpirun's ranks share on
  // one host): when this store is destroyed, this rank marks that it left,
  // and the last of `size` ranks to leave removes the file (each keeps its
  // open descriptor meanwhile), so that no stale file is left for a later
  // job that happens to get the same name.
  void removeOnceLeftBy(int rank, int size);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  bool isServer = false;       // host the server inside this process
  int port = 0;                // 0 with isServer: pick a free port (see port())
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;
  size_t maxValueBytes = 64u << 20;  // larger requests are refused
  // Shared secret every connection proves (challenge-response, see
  // ACCL_STORE_SECRET); "" takes ACCL_STORE_SECRET / ACCL_STORE_SECRET_FILE.
  std::string secret;
  // With isServer: the address to listen on; "" takes ACCL_STORE_BIND (auto:
  // the host's own address when `host` names one, else every interface).
  std::string bindAddress;
};

// The server half of TcpStore; runs on its own thread, serves any number of
// clients with one poll loop. Malformed or oversized requests close that
// client's connection and are logged; the server keeps serving the others.
class TcpStoreServer {
 public:
  // Binds host:port (port 0 = any free port; host "" = every interface).
  // Throws SystemError if it cannot. With a secret, every client proves it
  // before its first request (ACCL_STORE_SECRET).
  TcpStoreServer(const std::string& host, int port, size_t maxValueBytes = 64u << 20, std::string secret = "");
  ~TcpStoreServer();
  int port() const;
  size_t numClients() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Client (and optionally server) of a TCP store.
class TcpStore : public Store {
 public:
  TcpStore(const std::string& host, const TcpStoreOptions& opts);
  ~TcpStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool deleteKey(const std::string& key) override;
  int64_t numKeys() override;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Prepends "<prefix>/" to every key of an underlying store.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool deleteKey(const std::string& key) override;
  int64_t numKeys() override;
  std::shared_ptr<Store> base() const { return base_; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// Where the ranks of a job are and how they meet.
struct Rendezvous {
  std::shared_ptr<Store> store;
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  std::string source;  // "torchrun", "openmpi", "slurm" or "explicit"
  std::string describe() const;
};

// Reads the launcher's environment: torchrun / accl-run (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Open MPI
// (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...).
// Rank 0 hosts a TcpStore server at MASTER_ADDR:port (port = ACCL_STORE_PORT
// if set, else MASTER_PORT, or MASTER_PORT+1 under torchrun's agent store);
// the others connect to it. ACCL_STORE_FILE selects a FileStore instead.
// Throws InvalidArgument naming each missing or malformed variable.
Rendezvous rendezvousFromEnv();

}  // namespace accl
