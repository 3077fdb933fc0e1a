#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "accl/errors.h"
#include "accl/internal/net.h"
#include "accl/store.h"

using namespace accl;

namespace {

const char* kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                       "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                       "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                       "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID", "SLURM_JOB_ID",
                       "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid",
                       "PMIX_NAMESPACE"};

// Sets exactly `env` among the launcher variables for the scope.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& env) {
    for (auto* v : kVars) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      unsetenv(v);
    }
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (auto* v : kVars) unsetenv(v);
    for (auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

std::string freePort() {
  int port;
  int fd = internal::listenOn("127.0.0.1", 0, &port);
  close(fd);
  return std::to_string(port);
}

std::string errorOf(const std::map<std::string, std::string>& env) {
  ScopedEnv e(env);
  try {
    rendezvousFromEnv();
  } catch (const InvalidArgument& ex) {
    return ex.what();
  }
  return "";
}

}  // namespace

TEST(Rendezvous, Torchrun) {
  ScopedEnv e({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"},
               {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", freePort()}});
  Rendezvous r = rendezvousFromEnv();
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.size, 1);
  EXPECT_EQ(r.source, "env");
  r.store->set("k", toBytes("v"));
  EXPECT_EQ(toString(r.store->get("k")), "v");
}

TEST(Rendezvous, TorchrunAgentStoreUsesNextPort) {
  std::string port = freePort();
  ScopedEnv e({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string(std::stoi(port) - 1)}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
               {"TORCHELASTIC_RUN_ID", "x"}});
  Rendezvous r = rendezvousFromEnv();
  EXPECT_EQ(r.source, "torchrun");
  EXPECT_EQ(static_cast<TcpStore*>(r.store.get())->port(), std::stoi(port));
}

TEST(Rendezvous, OpenMpiWithMasterAddr) {
  ScopedEnv e({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", freePort()}});
  Rendezvous r = rendezvousFromEnv();
  EXPECT_EQ(r.source, "openmpi");
  EXPECT_EQ(r.localSize, 1);
}

TEST(Rendezvous, SlurmParsesTasksPerNode) {
  ScopedEnv e({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"},
               {"SLURM_STEP_TASKS_PER_NODE", "1(x3),2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", freePort()}});
  Rendezvous r = rendezvousFromEnv();
  EXPECT_EQ(r.source, "slurm");
  EXPECT_EQ(r.localSize, 1);
}

TEST(Rendezvous, ErrorsNameWhatIsMissing) {
  std::string m = errorOf({});
  EXPECT_NE(m.find("RANK"), std::string::npos) << m;
  EXPECT_NE(m.find("SLURM_PROCID"), std::string::npos) << m;

  m = errorOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(m.find("MASTER_ADDR is not set"), std::string::npos) << m;
  EXPECT_NE(m.find("MASTER_PORT is not set"), std::string::npos) << m;

  m = errorOf({{"RANK", "3"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(m.find("rank 3 is not below the world size 2"), std::string::npos) << m;

  m = errorOf({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(m.find("RANK='x' is not an integer"), std::string::npos) << m;

  m = errorOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(m.find("SLURM_LOCALID is not set"), std::string::npos) << m;
  EXPECT_NE(m.find("TASKS_PER_NODE"), std::string::npos) << m;
}
