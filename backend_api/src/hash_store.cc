#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>

#include "accl/errors.h"
#include "accl/store.h"
#include "store_common.h"

namespace accl {

Bytes toBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string toString(const Bytes& b) { return std::string(b.begin(), b.end()); }

struct HashStore::Impl {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Bytes> data;

  bool has(const std::vector<std::string>& keys) {
    for (auto& k : keys)
      if (!data.count(k)) return false;
    return true;
  }
};

HashStore::HashStore() : impl_(new Impl) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->data[key] = value;
  }
  impl_->cv.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->data[key];
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t v;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    auto it = impl_->data.find(key);
    v = detail::addCounter(key, it == impl_->data.end() ? nullptr : &it->second, delta);
    impl_->data[key] = toBytes(std::to_string(v));
  }
  impl_->cv.notify_all();
  return v;
}

Bytes HashStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes now;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    auto it = impl_->data.find(key);
    if ((it == impl_->data.end() && expected.empty()) ||
        (it != impl_->data.end() && it->second == expected)) {
      impl_->data[key] = desired;
      now = desired;
    } else {
      now = it == impl_->data.end() ? Bytes{} : it->second;
    }
  }
  impl_->cv.notify_all();
  return now;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->has(keys);
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(impl_->mu);
  if (!impl_->cv.wait_for(lk, timeout, [&] { return impl_->has(keys); }))
    throw Timeout(detail::waitTimeoutMessage("HashStore", keys, timeout));
}

bool HashStore::deleteKey(const std::string& key) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->data.erase(key) > 0;
}

int64_t HashStore::numKeys() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return static_cast<int64_t>(impl_->data.size());
}

// PrefixStore

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  if (!base_) throw InvalidArgument("accl: PrefixStore needs a base store");
  timeout_ = base_->timeout();
}
void PrefixStore::set(const std::string& k, const Bytes& v) { base_->set(key(k), v); }
Bytes PrefixStore::get(const std::string& k) {
  base_->wait({key(k)}, timeout_);
  return base_->get(key(k));
}
int64_t PrefixStore::add(const std::string& k, int64_t d) { return base_->add(key(k), d); }
Bytes PrefixStore::compareSet(const std::string& k, const Bytes& e, const Bytes& d) {
  return base_->compareSet(key(k), e, d);
}
bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  for (auto& k : keys) full.push_back(key(k));
  return base_->check(full);
}
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  for (auto& k : keys) full.push_back(key(k));
  base_->wait(full, timeout);
}
bool PrefixStore::deleteKey(const std::string& k) { return base_->deleteKey(key(k)); }
int64_t PrefixStore::numKeys() { return base_->numKeys(); }

}  // namespace accl
