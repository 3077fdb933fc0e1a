// FileStore: an append-only log of (op, key, value) records in one file,
// read and appended under flock(2). Every process replays new records before
// each operation, so all see the same map.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "accl/errors.h"
#include "accl/internal/net.h"
#include "accl/store.h"
#include "store_common.h"

namespace accl {

namespace {
constexpr uint8_t kSet = 1;
constexpr uint8_t kDel = 2;
constexpr uint32_t kMaxField = 1u << 30;
}  // namespace

struct FileStore::Impl {
  std::string path;
  int fd = -1;
  std::mutex mu;  // serializes threads of this process
  off_t pos = 0;
  std::map<std::string, Bytes> data;
  int leaveAs = -1, leaveOf = 0;  // removeOnceLeftBy

  struct Lock {
    int fd;
    explicit Lock(int f, const std::string& path) : fd(f) {
      while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) throw SystemError(errnoMessage("accl FileStore: flock " + path, errno));
      }
    }
    ~Lock() { flock(fd, LOCK_UN); }
  };

  void readExact(void* buf, size_t n, off_t at) {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      ssize_t r = pread(fd, p, n, at);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw SystemError("accl FileStore: " + path + " is truncated or unreadable");
      p += r;
      n -= static_cast<size_t>(r);
      at += r;
    }
  }

  // Replays records appended since the last call. Caller holds the flock.
  void refresh() {
    off_t end = lseek(fd, 0, SEEK_END);
    while (pos < end) {
      uint8_t op;
      uint32_t klen, vlen;
      readExact(&op, 1, pos);
      readExact(&klen, 4, pos + 1);
      if (klen > kMaxField || (op != kSet && op != kDel))
        throw SystemError("accl FileStore: " + path + " is corrupt at offset " + std::to_string(pos));
      std::string key(klen, '\0');
      readExact(key.data(), klen, pos + 5);
      readExact(&vlen, 4, pos + 5 + klen);
      if (vlen > kMaxField)
        throw SystemError("accl FileStore: " + path + " is corrupt at offset " + std::to_string(pos));
      Bytes value(vlen);
      readExact(value.data(), vlen, pos + 9 + klen);
      if (op == kSet) data[key] = std::move(value);
      else data.erase(key);
      pos += 9 + klen + vlen;
    }
  }

  void append(uint8_t op, const std::string& key, const Bytes& value) {
    uint32_t klen = static_cast<uint32_t>(key.size()), vlen = static_cast<uint32_t>(value.size());
    std::string rec;
    rec.push_back(static_cast<char>(op));
    rec.append(reinterpret_cast<char*>(&klen), 4);
    rec += key;
    rec.append(reinterpret_cast<char*>(&vlen), 4);
    rec.append(value.begin(), value.end());
    off_t at = lseek(fd, 0, SEEK_END);
    size_t done = 0;
    while (done < rec.size()) {
      ssize_t w = pwrite(fd, rec.data() + done, rec.size() - done, at + static_cast<off_t>(done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw SystemError(errnoMessage("accl FileStore: write " + path, errno));
      done += static_cast<size_t>(w);
    }
    refresh();
  }

  template <typename F>
  auto locked(F f) {
    std::lock_guard<std::mutex> lk(mu);
    Lock l(fd, path);
    refresh();
    return f();
  }
};

FileStore::FileStore(const std::string& path) : impl_(new Impl) {
  impl_->path = path;
  impl_->fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (impl_->fd < 0) throw SystemError(errnoMessage("accl FileStore: cannot open " + path, errno));
}

FileStore::~FileStore() {
  if (impl_->fd >= 0 && impl_->leaveAs >= 0) {
    try {
      set("accl/left/" + std::to_string(impl_->leaveAs), Bytes{1});
      std::vector<std::string> all;
      for (int r = 0; r < impl_->leaveOf; ++r) all.push_back("accl/left/" + std::to_string(r));
      if (check(all)) unlink(impl_->path.c_str());
    } catch (const std::exception&) {
      // A store that can no longer be written is left as it is.
    }
  }
  if (impl_->fd >= 0) close(impl_->fd);
}

void FileStore::removeOnceLeftBy(int rank, int size) {
  impl_->leaveAs = rank;
  impl_->leaveOf = size;
}

const std::string& FileStore::path() const { return impl_->path; }

void FileStore::set(const std::string& key, const Bytes& value) {
  impl_->locked([&] {
    impl_->append(kSet, key, value);
    return 0;
  });
}

Bytes FileStore::get(const std::string& key) {
  wait({key}, timeout_);
  return impl_->locked([&] { return impl_->data[key]; });
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  return impl_->locked([&] {
    auto it = impl_->data.find(key);
    int64_t v = detail::addCounter(key, it == impl_->data.end() ? nullptr : &it->second, delta);
    impl_->append(kSet, key, toBytes(std::to_string(v)));
    return v;
  });
}

Bytes FileStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return impl_->locked([&] {
    auto it = impl_->data.find(key);
    if ((it == impl_->data.end() && expected.empty()) ||
        (it != impl_->data.end() && it->second == expected)) {
      impl_->append(kSet, key, desired);
      return desired;
    }
    return it == impl_->data.end() ? Bytes{} : it->second;
  });
}

bool FileStore::check(const std::vector<std::string>& keys) {
  return impl_->locked([&] {
    for (auto& k : keys)
      if (!impl_->data.count(k)) return false;
    return true;
  });
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto deadline = internal::Clock::now() + timeout;
  int sleepMs = 1;
  while (!check(keys)) {
    if (internal::Clock::now() >= deadline)
      throw Timeout(detail::waitTimeoutMessage("FileStore " + impl_->path, keys, timeout));
    std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
    sleepMs = std::min(sleepMs * 2, 20);
  }
}

bool FileStore::deleteKey(const std::string& key) {
  return impl_->locked([&] {
    bool had = impl_->data.count(key) > 0;
    if (had) impl_->append(kDel, key, {});
    return had;
  });
}

int64_t FileStore::numKeys() {
  return impl_->locked([&] { return static_cast<int64_t>(impl_->data.size()); });
}

}  // namespace accl
