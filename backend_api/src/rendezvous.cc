#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/internal/strings.h"
#include "accl/logging.h"
#include "accl/store.h"

namespace accl {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int envInt(const char* name, std::vector<std::string>* problems, int minValue = 0) {
  const char* v = env(name);
  if (!v) {
    problems->push_back(std::string(name) + " is not set");
    return -1;
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < minValue || x > 1 << 24) {
    problems->push_back(std::string(name) + "='" + v + "' is not an integer >= " +
                        std::to_string(minValue));
    return -1;
  }
  return static_cast<int>(x);
}

// Tasks on node `nodeId` from Slurm's "2(x3),1" notation.
int slurmTasksOnNode(const std::string& spec, int nodeId) {
  int node = 0;
  for (const std::string& item : internal::split(spec, ',', /*skipEmpty=*/true)) {
    int tasks = std::atoi(item.c_str());
    int repeat = 1;
    size_t x = item.find("(x");
    if (x != std::string::npos) repeat = std::atoi(item.c_str() + x + 2);
    if (nodeId < node + repeat) return tasks;
    node += repeat;
  }
  return -1;
}

// Open MPI's job ids repeat (a hash of the host and mpirun's process id,
// which the kernel reuses): a file named after the job id alone can be one
// that an earlier job left, with its ranks' stale addresses in it. What
// mpirun makes anew for each launch, and passes to all its ranks alike,
// tells the launches apart: "-" and a hash of it, "" where none is set.
std::string launchId() {
  for (const char* v : {"OMPI_MCA_orte_precondition_transports", "OMPI_MCA_orte_hnp_uri", "PMIX_SERVER_URI41",
                        "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"}) {
    const char* s = env(v);
    if (!s || !*s) continue;
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (const char* c = s; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
    char buf[24];
    snprintf(buf, sizeof(buf), "-%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
  return "";
}

}  // namespace

std::string Rendezvous::describe() const {
  return "rank " + std::to_string(rank) + "/" + std::to_string(size) + " (local " +
         std::to_string(localRank) + "/" + std::to_string(localSize) + ", from " + source + ")";
}

Rendezvous rendezvousFromEnv() {
  const Config& cfg = Config::get();
  Rendezvous r;
  std::vector<std::string> problems;
  const char* hint =
      "; expected the environment of torchrun or accl-run (RANK, WORLD_SIZE, LOCAL_RANK, "
      "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), of Open MPI's mpirun (OMPI_COMM_WORLD_*) "
      "or of Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR)";

  if (env("RANK") || env("WORLD_SIZE")) {
    r.source = env("TORCHELASTIC_RUN_ID") ? "torchrun" : "env";
    r.rank = envInt("RANK", &problems);
    r.size = envInt("WORLD_SIZE", &problems, 1);
    r.localRank = env("LOCAL_RANK") ? envInt("LOCAL_RANK", &problems) : r.rank;
    r.localSize = env("LOCAL_WORLD_SIZE") ? envInt("LOCAL_WORLD_SIZE", &problems, 1) : r.size;
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    r.source = "openmpi";
    r.rank = envInt("OMPI_COMM_WORLD_RANK", &problems);
    r.size = envInt("OMPI_COMM_WORLD_SIZE", &problems, 1);
    r.localRank = envInt("OMPI_COMM_WORLD_LOCAL_RANK", &problems);
    r.localSize = envInt("OMPI_COMM_WORLD_LOCAL_SIZE", &problems, 1);
  } else if (env("SLURM_PROCID")) {
    r.source = "slurm";
    r.rank = envInt("SLURM_PROCID", &problems);
    r.size = envInt("SLURM_NTASKS", &problems, 1);
    r.localRank = envInt("SLURM_LOCALID", &problems);
    const char* tpn = env("SLURM_STEP_TASKS_PER_NODE") ? env("SLURM_STEP_TASKS_PER_NODE")
                                                       : env("SLURM_TASKS_PER_NODE");
    int node = env("SLURM_NODEID") ? std::atoi(env("SLURM_NODEID")) : 0;
    r.localSize = tpn ? slurmTasksOnNode(tpn, node) : -1;
    if (r.localSize < 1) problems.push_back("SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE is missing or malformed");
  } else {
    throw InvalidArgument("accl: cannot rendezvous from the environment: no RANK, "
                          "OMPI_COMM_WORLD_RANK or SLURM_PROCID is set" + std::string(hint));
  }
  if (problems.empty() && r.rank >= r.size)
    problems.push_back("rank " + std::to_string(r.rank) + " is not below the world size " +
                       std::to_string(r.size));
  if (problems.empty() && r.localRank >= r.localSize)
    problems.push_back("local rank " + std::to_string(r.localRank) +
                       " is not below the local size " + std::to_string(r.localSize));

  auto fail = [&] {
    std::string msg = "accl: cannot rendezvous from the " + r.source + " environment: ";
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw InvalidArgument(msg + hint);
  };
  if (!problems.empty()) fail();

  if (!cfg.storeFile.empty()) {
    r.store = std::make_shared<FileStore>(cfg.storeFile);
  } else if (!env("MASTER_ADDR") && r.source == "openmpi" && r.localSize == r.size) {
    // Single-node mpirun without MASTER_ADDR: a FileStore named after the job.
    const char* job = env("OMPI_MCA_ess_base_jobid") ? env("OMPI_MCA_ess_base_jobid") : env("PMIX_NAMESPACE");
    if (!job) {
      problems.push_back("MASTER_ADDR is not set and Open MPI's job id is unknown");
      fail();
    }
    std::string path = "/tmp/accl-rdzv-" + std::to_string(getuid()) + "-" + job + launchId();
    auto fs = std::make_shared<FileStore>(path);
    fs->removeOnceLeftBy(r.rank, r.size);
    r.store = fs;
  } else {
    const char* addr = env("MASTER_ADDR");
    if (!addr) problems.push_back("MASTER_ADDR is not set (the host of rank 0)");
    int port = cfg.storePort;
    if (port == 0) {
      if (env("MASTER_PORT")) {
        port = envInt("MASTER_PORT", &problems, 1);
        // torchrun's agent already serves its own store on MASTER_PORT.
        const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
        if (port > 0 && agent && std::string(agent) == "True") port += 1;
      } else if (r.source == "slurm" && env("SLURM_JOB_ID")) {
        port = 20000 + std::atoi(env("SLURM_JOB_ID")) % 20000;
      } else {
        problems.push_back("MASTER_PORT is not set (a free TCP port on MASTER_ADDR)");
      }
    }
    if (port > 65535) problems.push_back("MASTER_PORT + 1 is above 65535");
    if (!problems.empty()) fail();
    TcpStoreOptions o;
    o.isServer = r.rank == 0;
    o.port = port;
    o.timeout = cfg.timeout;
    r.store = std::make_shared<TcpStore>(addr, o);
  }
  r.store->setTimeout(cfg.timeout);
  ACCL_INFO("INIT", "rendezvous: " << r.describe());
  return r;
}

}  // namespace accl
