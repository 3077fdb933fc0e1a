#include "store_auth.h"

#include <dlfcn.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <mutex>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/logging.h"

namespace accl {
namespace detail {

namespace {

// The two libcrypto functions used, resolved at first use.
struct Crypto {
  using EvpMd = const void* (*)();
  using Hmac = unsigned char* (*)(const void* md, const void* key, int keyLen, const unsigned char* d, size_t n,
                                  unsigned char* md_out, unsigned int* md_len);
  EvpMd sha256 = nullptr;
  Hmac hmac = nullptr;
  std::string error;
};

const Crypto& crypto() {
  static Crypto c;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    for (const char* name : {"libcrypto.so.3", "libcrypto.so"})
      if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      c.error = "ACCL_STORE_SECRET needs OpenSSL's libcrypto.so.3, which cannot be loaded (Debian/Ubuntu: "
                "apt-get install libssl3)";
      return;
    }
    c.sha256 = reinterpret_cast<Crypto::EvpMd>(dlsym(h, "EVP_sha256"));
    c.hmac = reinterpret_cast<Crypto::Hmac>(dlsym(h, "HMAC"));
    if (!c.sha256 || !c.hmac) c.error = "libcrypto lacks EVP_sha256 or HMAC";
  });
  return c;
}

}  // namespace

std::string randomNonce() {
  std::string n(kNonceBytes, '\0');
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = getrandom(&n[got], n.size() - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw SystemError(errnoMessage("accl: getrandom failed", errno));
    }
    got += static_cast<size_t>(r);
  }
  return n;
}

std::string storeMac(const std::string& secret, const char* label, const std::string& a, const std::string& b) {
  const Crypto& c = crypto();
  if (!c.error.empty()) throw NotSupported("accl: " + c.error);
  std::string msg = std::string(label) + '\0' + a + b;
  unsigned char out[64];
  unsigned int len = 0;
  if (!c.hmac(c.sha256(), secret.data(), static_cast<int>(secret.size()),
              reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len))
    throw Internal("accl: HMAC-SHA256 failed");
  return std::string(reinterpret_cast<char*>(out), len);
}

bool sameMac(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string configuredStoreSecret() {
  const Config& cfg = Config::get();
  if (!cfg.storeSecret.empty()) return cfg.storeSecret;
  if (cfg.storeSecretFile.empty()) return "";
  const std::string& path = cfg.storeSecretFile;
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line) || line.empty())
    throw InvalidArgument("accl: ACCL_STORE_SECRET_FILE=" + path +
                          " cannot be read or its first line is empty; accepted: a readable file whose first "
                          "line is the secret");
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
    ACCL_WARN("STORE", "ACCL_STORE_SECRET_FILE " << path << " can be read by other users (mode "
                                                 << std::oct << (st.st_mode & 0777) << std::dec
                                                 << "): chmod 600 it");
  return line;
}

}  // namespace detail
}  // namespace accl
