// accl-run: starts N local ranks with the torchrun environment, prefixes
// their output with the rank, forwards signals, and stops every rank as soon
// as one fails, saying which rank failed and how.
#include "../common/cli.h"
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "accl/internal/net.h"
#include "accl/internal/strings.h"
#include "accl/store.h"

namespace {

int gSigPipe[2];

void onSignal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = write(gSigPipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

struct Stream {
  int fd = -1;
  std::string partial;
  FILE* out = stdout;
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream streams[2];
};

int freePort() {
  int port = 0;
  int fd = accl::internal::listenOn("127.0.0.1", 0, &port);
  close(fd);
  return port;
}

void emit(Stream& s, int rank, bool prefix, const char* data, size_t n) {
  s.partial.append(data, n);
  size_t pos;
  while ((pos = s.partial.find('\n')) != std::string::npos) {
    std::string line = s.partial.substr(0, pos + 1);
    if (prefix) std::fprintf(s.out, "[%d] %s", rank, line.c_str());
    else std::fputs(line.c_str(), s.out);
    s.partial.erase(0, pos + 1);
  }
  std::fflush(s.out);
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")" +
           (WCOREDUMP(status) ? ", core dumped" : "");
  }
  return "ended with status " + std::to_string(status);
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Runs a standalone store server until SIGINT or SIGTERM.
int serveStore(int port) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  try {
    accl::TcpStoreServer server("", port);
    std::printf("accl-run: store server listening on port %d\n", server.port());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    std::printf("accl-run: store server stopping (signal %d), %zu clients connected\n", sig, server.numClients());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accl-run: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int n = -1, port = 0, storeServer = -1;
  double grace = 5;
  bool noPrefix = false;
  std::string addr = "127.0.0.1", netnsList;
  std::vector<std::string> netns;
  CLI::App app{"accl-run -n N [options] PROGRAM [ARGS...]\nStarts N ranks of PROGRAM on this host with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, "
               "MASTER_ADDR and MASTER_PORT set (as torchrun does), prefixes their output with the rank, forwards "
               "signals (SIGUSR1 without stopping: every rank writes its flight recorder), and stops every rank as "
               "soon as one fails.\n"
               "Exit status: 0 if every rank exits 0; otherwise that of the first rank that failed (128+signal "
               "if it was killed by a signal).",
               "accl-run"};
  app.prefix_command();  // PROGRAM and everything after it are the program's
  app.add_option("-n,--nproc,--nproc-per-node", n, "number of ranks")->check(CLI::Range(1, 1024));
  app.add_option("--master-addr", addr, "address of rank 0's store")->capture_default_str();
  app.add_option("--master-port", port, "port of rank 0's store (default: a free port)")->check(CLI::Range(1, 65535));
  app.add_option("--grace", grace,
                 "after a failure (the other ranks first get 1 s to exit on their own), wait this long after "
                 "SIGTERM before SIGKILL")
      ->type_name("SECONDS")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--no-prefix", noPrefix, "do not prefix output lines with [rank]");
  app.add_option("--netns", netnsList,
                 "simulate hosts: ranks are split in equal blocks over these network namespaces (ip netns), "
                 "LOCAL_RANK/LOCAL_WORLD_SIZE count within a namespace; --master-addr must be reachable from "
                 "all (needs root)")
      ->type_name("NS0,NS1,...");
  app.add_option("--store-server", storeServer,
                 "only run a TCP store server on PORT (0 = any; the port is printed) until SIGINT/SIGTERM, for "
                 "jobs whose ranks all connect as clients (ACCL_STORE_PORT / MASTER_PORT)")
      ->type_name("PORT")
      ->check(CLI::Range(0, 65535));
  if (int rc = accl_tools::parseCommandLine(app, argc, argv, "accl-run"); rc >= 0) return rc;
  if (storeServer >= 0) return serveStore(storeServer);
  bool prefix = !noPrefix;
  netns = accl::internal::split(netnsList, ',', /*skipEmpty=*/true);
  std::vector<std::string> command = app.remaining();
  if (!command.empty() && command[0] == "--") command.erase(command.begin());
  if (n < 0 || command.empty()) {
    std::fprintf(stderr, "accl-run: %s\nRun 'accl-run --help' for the options.\n",
                 n < 0 ? "-n N is required" : "no program given");
    return 2;
  }
  std::vector<char*> childArgv;  // the program's argv, for execvp
  for (auto& a : command) childArgv.push_back(const_cast<char*>(a.c_str()));
  childArgv.push_back(nullptr);
  if (!netns.empty() && n % static_cast<int>(netns.size()) != 0) {
    std::fprintf(stderr, "accl-run: %d ranks cannot be split evenly over %zu namespaces\n", n, netns.size());
    return 2;
  }
  const int perHost = netns.empty() ? n : n / static_cast<int>(netns.size());
  std::vector<int> nsFds;
  for (auto& ns : netns) {
    int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::fprintf(stderr, "accl-run: cannot open network namespace '%s' (/var/run/netns/%s): %s\n", ns.c_str(),
                   ns.c_str(), std::strerror(errno));
      return 2;
    }
    nsFds.push_back(fd);
  }
  if (port == 0) port = freePort();

  if (pipe2(gSigPipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("accl-run: pipe");
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1}) sigaction(sig, &sa, nullptr);

  std::vector<Rank> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    int pipes[2][2];
    if (pipe2(pipes[0], O_CLOEXEC) != 0 || pipe2(pipes[1], O_CLOEXEC) != 0) {
      std::perror("accl-run: pipe");
      return 1;
    }
    // Signals stay blocked across fork until the child has reset its handlers,
    // so a signal meant for the child never runs the parent's handler there.
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t pid = fork();
    if (pid != 0) sigprocmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) {
      std::perror("accl-run: fork");
      return 1;
    }
    if (pid == 0) {
      for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1}) signal(sig, SIG_DFL);
      close(gSigPipe[0]);
      close(gSigPipe[1]);
      setpgid(0, 0);  // a group per rank: signals reach everything the rank started
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphaned ranks if accl-run itself is killed
      sigprocmask(SIG_SETMASK, &old, nullptr);
      dup2(pipes[0][1], STDOUT_FILENO);
      dup2(pipes[1][1], STDERR_FILENO);
      if (!nsFds.empty() && setns(nsFds[static_cast<size_t>(r / perHost)], CLONE_NEWNET) != 0) {
        std::fprintf(stderr, "accl-run: cannot enter network namespace %s: %s\n",
                     netns[static_cast<size_t>(r / perHost)].c_str(), std::strerror(errno));
        _exit(126);
      }
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r % perHost).c_str(), 1);
      setenv("GROUP_RANK", std::to_string(r / perHost).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(perHost).c_str(), 1);
      setenv("MASTER_ADDR", addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      execvp(childArgv[0], childArgv.data());
      std::fprintf(stderr, "accl-run: cannot execute '%s': %s\n", childArgv[0], std::strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid);  // also here, so that no signal can race the child's own call
    close(pipes[0][1]);
    close(pipes[1][1]);
    Rank& rk = ranks[static_cast<size_t>(r)];
    rk.pid = pid;
    rk.running = true;
    rk.streams[0].fd = pipes[0][0];
    rk.streams[0].out = stdout;
    rk.streams[1].fd = pipes[1][0];
    rk.streams[1].out = stderr;
  }

  int exitCode = 0;
  bool stopping = false;
  std::chrono::steady_clock::time_point killAt{};
  auto signalAll = [&](int sig) {
    for (auto& rk : ranks)
      if (rk.running) kill(-rk.pid, sig);
  };
  // After a rank fails, the others get a short window to finish on their
  // own before SIGTERM: a rank that failed at the same moment (often the one
  // with the root cause, e.g. the store's host) then still prints its error.
  const auto reportWindow = std::chrono::milliseconds(1000);
  std::chrono::steady_clock::time_point termAt = std::chrono::steady_clock::time_point::max();
  auto startStop = [&](int code) {
    if (stopping) return;
    stopping = true;
    if (exitCode == 0) exitCode = code;
    termAt = std::chrono::steady_clock::now() + reportWindow;
    killAt = std::chrono::steady_clock::time_point::max();
  };

  char buf[65536];
  std::chrono::steady_clock::time_point drainUntil{};
  for (;;) {
    std::vector<pollfd> fds{{gSigPipe[0], POLLIN, 0}};
    std::vector<std::pair<int, int>> owners{{-1, -1}};
    for (int r = 0; r < n; ++r)
      for (int s = 0; s < 2; ++s)
        if (ranks[static_cast<size_t>(r)].streams[s].fd >= 0) {
          fds.push_back({ranks[static_cast<size_t>(r)].streams[s].fd, POLLIN, 0});
          owners.push_back({r, s});
        }
    bool anyRunning = false;
    for (auto& rk : ranks) anyRunning |= rk.running;
    if (!anyRunning && fds.size() == 1) break;
    if (!anyRunning) {
      // Every rank has exited; leftover descendants may hold the pipes open.
      if (drainUntil == std::chrono::steady_clock::time_point{})
        drainUntil = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      else if (std::chrono::steady_clock::now() > drainUntil)
        break;
    }
    int timeoutMs = (stopping || !anyRunning) ? 100 : -1;
    int pr = poll(fds.data(), fds.size(), timeoutMs);
    if (pr < 0 && errno != EINTR) {
      std::perror("accl-run: poll");
      signalAll(SIGKILL);
      return 1;
    }
    if (fds[0].revents & POLLIN) {
      unsigned char sig;
      while (read(gSigPipe[0], &sig, 1) == 1) {
        if (sig == SIGCHLD) continue;
        if (sig == SIGUSR1) {  // every rank writes its flight recorder; the job goes on
          std::fprintf(stderr, "accl-run: SIGUSR1: forwarded to all ranks (flight recorder dumps)\n");
          signalAll(SIGUSR1);
          continue;
        }
        std::fprintf(stderr, "accl-run: received signal %d (%s); forwarding to all ranks\n", sig, strsignal(sig));
        signalAll(sig);
        termAt = std::chrono::steady_clock::time_point::max();  // already signalled
        if (!stopping || killAt == std::chrono::steady_clock::time_point::max()) {
          stopping = true;
          if (exitCode == 0) exitCode = 128 + sig;
          killAt = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(grace * 1000));
        }
      }
    }
    for (size_t k = 1; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      auto [r, s] = owners[k];
      Stream& st = ranks[static_cast<size_t>(r)].streams[s];
      ssize_t got = read(st.fd, buf, sizeof(buf));
      if (got > 0) {
        emit(st, r, prefix, buf, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        if (!st.partial.empty()) emit(st, r, prefix, "\n", 1);
        close(st.fd);
        st.fd = -1;
      }
    }
    for (int r = 0; r < n; ++r) {
      Rank& rk = ranks[static_cast<size_t>(r)];
      if (!rk.running) continue;
      int status;
      if (waitpid(rk.pid, &status, WNOHANG) == rk.pid) {
        rk.running = false;
        rk.status = status;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && !stopping) {
          std::fprintf(stderr, "accl-run: rank %d (pid %d) %s; stopping the other ranks\n", r, rk.pid,
                       describeStatus(status).c_str());
          startStop(exitCodeOf(status));
        }
      }
    }
    if (stopping && std::chrono::steady_clock::now() >= termAt) {
      termAt = std::chrono::steady_clock::time_point::max();
      signalAll(SIGTERM);
      killAt = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(grace * 1000));
    }
    if (stopping && std::chrono::steady_clock::now() >= killAt) {
      bool any = false;
      for (auto& rk : ranks) any |= rk.running;
      if (any) {
        std::fprintf(stderr, "accl-run: ranks still running %.1f s after SIGTERM; sending SIGKILL\n", grace);
        signalAll(SIGKILL);
      }
      killAt = std::chrono::steady_clock::time_point::max();
    }
  }
  return exitCode;
}
