// The programs the diagnosis tests run under accl-run (one per rank):
//   diag_driver loop             8-byte allreduces, each waited for, until one fails (exit 1); prints
//                                "ready: ..." once the first completed
//   diag_driver count N          N x (allreduce of 256 floats, broadcast of 64 floats from 0), then a barrier
//   diag_driver mismatch         an allreduce, then rank 1 broadcasts while the others allgather
//   diag_driver exit N           allreduces; rank 1 calls exit(0) after N of them, without destroying its group
//   diag_driver bulk MIB N       N allreduces of MIB MiB (then the flight recorder dump
//                                with ACCL_DIAG_DUMP=1)
//   diag_driver late S           an 8-byte allreduce that rank 1 joins S seconds late (prints
//                                "late: done" on every rank that completed it)
//   diag_driver p2plate S wait|poll|sendrecv|blocking  rank 0 receives 2 floats (tag 5) that
//                                rank 1 sends S seconds late, waiting on the Work or polling
//                                isCompleted(), or in a blocking sendrecv that also sends 2
//                                floats to rank 1 (tag 6), or as a blocking receive
//                                (RecvOptions::blocking) (prints "p2plate: done" when the
//                                receive completed)
// The backend is ACCL_DIAG_BACKEND (default accl). Every failure is printed
// as "error (<code>): <message>".
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "accl/registry.h"
#include "accl/trace.h"

using namespace accl;

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  const char* b = std::getenv("ACCL_DIAG_BACKEND");
  std::string backend = b && *b ? b : "accl";
  // The group outlives the try: an op's error is printed when it is thrown, before the
  // group's teardown (which a test must not count as the time to detect the fault).
  std::shared_ptr<ProcessGroup> pg;
  try {
    Rendezvous rv = rendezvousFromEnv();
    pg = createProcessGroup(backend, rv.store, rv.rank, rv.size);
    if (mode == "loop") {
      float x[2] = {1, 2};
      pg->allreduce(Buffer(x, 2, DataType::Float32))->wait();
      std::printf("ready: running allreduces\n");  // the tests wait for this before they inject a fault
      std::fflush(stdout);
      for (uint64_t i = 0;; ++i) pg->allreduce(Buffer(x, 2, DataType::Float32))->wait();
    } else if (mode == "count" && argc > 2) {
      int n = std::atoi(argv[2]);
      std::vector<float> a(256, 1.0f), c(64, 2.0f);
      for (int i = 0; i < n; ++i) {
        pg->allreduce(Buffer(a.data(), a.size(), DataType::Float32))->wait();
        BroadcastOptions o;
        o.root = 0;
        pg->broadcast(Buffer(c.data(), c.size(), DataType::Float32), o)->wait();
      }
      pg->barrier()->wait();
    } else if (mode == "exit" && argc > 2) {
      float x[2] = {1, 2};
      for (int i = 0;; ++i) {
        if (pg->rank() == 1 && i == std::atoi(argv[2])) std::exit(0);  // the group is never destroyed
        pg->allreduce(Buffer(x, 2, DataType::Float32))->wait();
      }
    } else if (mode == "mismatch") {
      std::vector<float> a(16, 1.0f), all(16 * pg->size());
      pg->allreduce(Buffer(a.data(), a.size(), DataType::Float32))->wait();
      if (pg->rank() == 1) {
        BroadcastOptions o;
        o.root = 0;
        pg->broadcast(Buffer(a.data(), a.size(), DataType::Float32), o)->wait();
      } else {
        pg->allgather(Buffer(a.data(), a.size(), DataType::Float32), Buffer(all.data(), all.size(), DataType::Float32))
            ->wait();
      }
    } else if (mode == "late" && argc > 2) {
      float x[2] = {1, 2};
      if (pg->rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(std::atoi(argv[2])));
      pg->allreduce(Buffer(x, 2, DataType::Float32))->wait();
      std::printf("late: done\n");
    } else if (mode == "p2plate" && argc > 3) {
      float x[2] = {1, 2};
      if (pg->rank() == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(std::atoi(argv[2])));
        SendOptions so;
        so.tag = 5;
        pg->send(Buffer(x, 2, DataType::Float32), 0, so)->wait();
      } else if (pg->rank() == 0 && std::string(argv[3]) == "sendrecv") {
        float y[2] = {3, 4};
        SendRecvOptions o;
        o.sendTag = 6;
        o.recvTag = 5;
        o.blocking = true;
        pg->sendrecv(Buffer(y, 2, DataType::Float32), 1, Buffer(x, 2, DataType::Float32), 1, o)->wait();
        std::printf("p2plate: done\n");
      } else if (pg->rank() == 0) {
        RecvOptions ro;
        ro.tag = 5;
        ro.blocking = std::string(argv[3]) == "blocking";
        auto w = pg->recv(Buffer(x, 2, DataType::Float32), 1, ro);
        if (std::string(argv[3]) == "poll")
          while (!w->isCompleted()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        w->wait();
        std::printf("p2plate: done\n");
      }
    } else if (mode == "bulk" && argc > 3) {
      size_t n = static_cast<size_t>(std::atoi(argv[2])) << 20 >> 2;
      std::vector<float> a(n, 1.0f);
      for (int i = 0, k = std::atoi(argv[3]); i < k; ++i) pg->allreduce(Buffer(a.data(), n, DataType::Float32))->wait();
      pg->barrier()->wait();
      const char* d = std::getenv("ACCL_DIAG_DUMP");
      if (d && std::string(d) == "1") dumpTraces("on request");
    } else {
      std::fprintf(stderr, "usage: diag_driver loop | count N | mismatch | exit N | bulk MIB N | late S | p2plate S wait|poll|sendrecv|blocking\n");
      return 2;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", toString(e.code()), e.what());
    std::fflush(stderr);
    return 1;
  }
}
