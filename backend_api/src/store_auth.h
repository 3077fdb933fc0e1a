// Shared-secret authentication of TcpStore connections (ACCL_STORE_SECRET):
// a mutual challenge-response with HMAC-SHA256 over fresh nonces of both
// sides, so the secret never crosses the wire and a recorded exchange cannot
// be replayed. OpenSSL's libcrypto is loaded only when a secret is in use.
#pragma once

#include <string>

namespace accl {
namespace detail {

constexpr size_t kNonceBytes = 32;

// 32 bytes from the kernel's random source.
std::string randomNonce();
// HMAC-SHA256(secret, label | a | b). Throws NotSupported (naming the package)
// when libcrypto cannot be loaded.
std::string storeMac(const std::string& secret, const char* label, const std::string& a, const std::string& b);
// Equality in time independent of where the inputs differ.
bool sameMac(const std::string& a, const std::string& b);
// The secret of this process: ACCL_STORE_SECRET, else the first line of
// ACCL_STORE_SECRET_FILE; "" when neither is set.
std::string configuredStoreSecret();

}  // namespace detail
}  // namespace accl
