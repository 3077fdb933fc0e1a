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
                       "PMIX_NAMESPACE", "OMPI_MCA_orte_precondition_transports", "OMPI_MCA_orte_hnp_uri",
                       "PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21",
                       "PMIX_SERVER_URI2"};

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

// Single-host mpirun without MASTER_ADDR: a file store named after the job.
// Open MPI's job ids repeat, so the name also carries what mpirun makes anew
// per launch, and the last rank to leave removes the file: a later job with
// the same id never reads an earlier one's stale addresses (it would connect
// to them until its set-up timed out).
TEST(Rendezvous, OpenMpiOnOneHostSharesAFileNamedAfterTheLaunchThatTheLastRankRemoves) {
  auto make = [](int rank, const std::string& launch) {
    ScopedEnv e({{"OMPI_COMM_WORLD_RANK", std::to_string(rank)}, {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank)}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                 {"OMPI_MCA_ess_base_jobid", "4242" + std::to_string(getpid())},
                 {"OMPI_MCA_orte_precondition_transports", launch}});
    return rendezvousFromEnv();
  };
  std::string path;
  {
    Rendezvous a0 = make(0, "launch-a"), a1 = make(1, "launch-a"), b0 = make(0, "launch-b");
    auto* fa0 = dynamic_cast<FileStore*>(a0.store.get());
    auto* fa1 = dynamic_cast<FileStore*>(a1.store.get());
    auto* fb0 = dynamic_cast<FileStore*>(b0.store.get());
    ASSERT_TRUE(fa0 && fa1 && fb0) << "not a file store";
    path = fa0->path();
    EXPECT_EQ(fa1->path(), path) << "ranks of one launch must share the file";
    EXPECT_NE(fb0->path(), path) << "another launch with the same job id shares the file";
    a0.store->set("k", Bytes{7});
    EXPECT_EQ(a1.store->get("k"), Bytes{7});
    EXPECT_FALSE(b0.store->check({"k"})) << "a key of another launch is seen";
    // Rank 0 leaves: the file stays for rank 1.
    a0.store.reset();
    EXPECT_EQ(access(path.c_str(), F_OK), 0) << "removed while a rank still uses it";
    EXPECT_EQ(a1.store->get("k"), Bytes{7});
    std::string pathB = fb0->path();
    a1.store.reset();
    EXPECT_NE(access(path.c_str(), F_OK), 0) << "the last rank to leave did not remove " << path;
    EXPECT_EQ(access(pathB.c_str(), F_OK), 0) << "another launch's file was removed";
    b0.store.reset();
    EXPECT_EQ(access(pathB.c_str(), F_OK), 0) << "removed before its rank 1 left";
    unlink(pathB.c_str());
  }
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
