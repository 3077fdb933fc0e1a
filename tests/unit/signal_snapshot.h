// The process's signal dispositions at one moment, and which differ later
// (handler or flags; SA_RESTORER is glibc's own flag on whatever it installs,
// and glibc refuses its internal signals, which are left out).
#pragma once

#include <signal.h>

#include <cstring>
#include <string>
#include <vector>

class SignalSnapshot {
 public:
  SignalSnapshot() {
    for (int s = 1; s < NSIG; ++s) known_[s] = sigaction(s, nullptr, &before_[s]) == 0;
  }
  // "Segmentation fault: handler default, flags 0 -> handler a function, flags ..."
  std::vector<std::string> changed() const {
    std::vector<std::string> out;
    for (int s = 1; s < NSIG; ++s) {
      struct sigaction now;
      if (!known_[s] || sigaction(s, nullptr, &now) != 0) continue;
      if (now.sa_handler != before_[s].sa_handler || ((now.sa_flags ^ before_[s].sa_flags) & ~kRestorer) != 0)
        out.push_back(std::string(strsignal(s)) + ": " + describe(before_[s]) + " -> " + describe(now));
    }
    return out;
  }

 private:
  static constexpr int kRestorer = 0x04000000;  // SA_RESTORER
  static std::string describe(const struct sigaction& a) {
    return std::string("handler ") +
           (a.sa_handler == SIG_DFL ? "default" : a.sa_handler == SIG_IGN ? "ignore" : "a function") +
           ", flags " + std::to_string(a.sa_flags);
  }
  struct sigaction before_[NSIG];
  bool known_[NSIG] = {};
};
