// accl-info: version, backends compiled in and usable here, configuration.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../common/cli.h"

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/registry.h"
#include "algorithms/cost_model.h"
#include "algorithms/select.h"

namespace {

void printBackends() {
  std::printf("Backends (compiled in; usable on this host):\n");
  auto list = accl::listBackends();
  if (list.empty()) std::printf("  (none)\n");
  for (auto& b : list) {
    std::printf("  %-6s %-8s %s\n", b.name.c_str(), b.usable ? "usable" : "UNUSABLE",
                b.usable ? b.description.c_str() : b.reason.c_str());
    if (b.loaded) std::printf("  %-6s %-8s module %s\n", "", "", b.file.c_str());
  }
}

void printBuild() {
  std::printf("Build:\n");
  for (auto& [what, value] : accl::buildInfo()) std::printf("  %-17s %s\n", what.c_str(), value.c_str());
}

int printConfig() {
  accl::listBackends();  // loads every module, so that its variables are listed too
  std::string error;
  std::printf("Configuration (ACCL_* environment variables):\n");
  for (auto& e : accl::configTable()) {
    const char* set = std::getenv(e.name.c_str());
    std::string eff;
    try {
      eff = accl::configValue(e.name);
    } catch (const accl::Error& x) {
      eff = "(invalid)";
      error += std::string(error.empty() ? "" : "\n") + "error: " + x.what();
    }
    std::printf("  %-20s = %-24s %s\n", e.name.c_str(), eff.c_str(), set ? "(set)" : "(default)");
    std::printf("  %-20s   type %s, default %s; accepted: %s; read by %s\n", "", e.type.c_str(), e.defaultText.c_str(),
                e.accepted.c_str(), e.owner.c_str());
    std::printf("  %-20s   %s\n", "", e.meaning.c_str());
  }
  if (!error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  return 0;
}

void printMarkdown() {
  accl::listBackends();
  std::printf("| Variable | Type | Default | Accepted values | Read by | Meaning |\n|---|---|---|---|---|---|\n");
  for (auto& e : accl::configTable())
    std::printf("| `%s` | %s | %s | %s | %s | %s |\n", e.name.c_str(), e.type.c_str(), e.defaultText.c_str(),
                e.accepted.c_str(), e.owner.c_str(), e.meaning.c_str());
}

// --plan: the accl backend's algorithm choice per op and size band for a
// layout given by counts, with the cost model's predictions.
int printPlan(int ranks, int hosts, const std::string& transport, double gbps) {
  using namespace accl::core;
  if (ranks < 1 || hosts < 1 || hosts > ranks) {
    std::fprintf(stderr, "accl-info: --plan needs 1 <= --hosts <= --ranks (got --ranks %d --hosts %d)\n", ranks, hosts);
    return 2;
  }
  // The same variables the accl backend reads (it parses them the same way).
  const char* f = std::getenv("ACCL_TUNING_FILE");
  const char* as = std::getenv("ACCL_ALGO");
  std::string file = f ? f : "", algoSpec = as ? as : "";
  CostModel model;
  bool calibrated = !file.empty();
  AlgoOverrides overrides;
  try {
    model = calibrated ? CostModel::fromFile(file) : CostModel::defaults(transport, gbps);
    overrides = parseAlgoSpec(algoSpec);
    overrides.rdmaBetweenHosts = transport == "ib";
  } catch (const accl::Error& e) {
    std::fprintf(stderr, "accl-info: %s\n", e.what());
    return 1;
  }
  Layout l;
  l.size = ranks;
  l.hosts = hosts;
  l.maxLocal = (ranks + hosts - 1) / hosts;
  l.uniform = ranks % hosts == 0;
  const LinkParams& p = model.link();
  std::printf("Plan of the accl backend: %d ranks on %d host(s)%s\n", ranks, hosts,
              l.uniform ? "" : " (uneven: hierarchical ops reduce to one rank per host)");
  const LinkParams& h = model.local();
  const LinkParams& sg = model.segment();
  std::printf("Cost model: %s\n  %s between hosts: alpha %.2f us, bandwidth %.3f GB/s, reduction %.3f GB/s, "
              "per-message overhead %.2f us\n  within a host: alpha %.2f us, bandwidth %.3f GB/s\n"
              "  shared segment: alpha %.2f us, %.3f GB/s of the vector (%s)\n",
              model.source().c_str(), model.transport.c_str(), p.alphaUs, 1e-3 / p.betaUsPerB,
              p.gammaUsPerB > 0 ? 1e-3 / p.gammaUsPerB : 0.0, p.overheadUs, h.alphaUs, 1e-3 / h.betaUsPerB,
              sg.alphaUs, 1e-3 / sg.betaUsPerB,
              model.segmentRanks() > 0 ? ("measured with " + std::to_string(model.segmentRanks()) + " ranks").c_str()
                                       : "default");
  if (!model.segmentCurve().empty()) {
    // The rate the model reads off the measured curve at a few sizes.
    std::string rates;
    for (size_t b : {size_t(1) << 20, size_t(16) << 20, size_t(64) << 20, size_t(256) << 20}) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%s%zu MiB %.2f", rates.empty() ? "" : ", ", b >> 20,
                    1e-3 * static_cast<double>(b) / model.segmentBytesUs(b));
      rates += buf;
    }
    std::printf("  shared segment by size (its measured curve, %zu points): GB/s of the vector at %s\n",
                model.segmentCurve().size(), rates.c_str());
  }
  if (model.sharedRanks() > 1) {
    const LinkParams& sh = model.linkShared();
    std::printf("  between hosts with %d pairs crossing at once: alpha %.2f us, bandwidth %.3f GB/s per pair (where "
                "every rank of a host crosses)\n",
                model.sharedRanks(), sh.alphaUs, 1e-3 / sh.betaUsPerB);
  }
  if (model.cpu().machineCpus > 0)
    std::printf("  CPUs: %g per machine, %d host(s) on it when calibrated (here %.2f cores per host), %.2f us per "
                "message between hosts, %.2f within (where a host's ranks outnumber its cores, an op takes at least "
                "its host's messages' CPU time over the cores)\n",
                model.cpu().machineCpus, model.cpu().hostsPerMachine, model.cpu().coresPerHost(hosts),
                model.cpu().usPerMessage, model.cpu().usPerLocalMessage);
  std::printf("Selection: %s\n", calibrated ? "by this model (ACCL_TUNING_FILE)"
                                            : "fixed size thresholds (no ACCL_TUNING_FILE); the predictions use "
                                              "the default model above");
  if (!algoSpec.empty()) std::printf("ACCL_ALGO=%s overrides the ops it names\n", algoSpec.c_str());
  std::printf("Bytes: per rank (allreduce, broadcast, reduce, gather, scatter); the whole vector (allgather, "
              "reduce_scatter, alltoall).\n%s\n\n",
              hosts == 1 ? "One host: every op runs on the shared segment (alpha + bytes / its rate)."
                         : "Hierarchical ops: the segment's phases on each host, then the exchange between hosts "
                           "(one rank per host, on its slice for allreduce).");
  std::printf("%-15s %12s  %-36s %14s  %s\n", "op", "bytes", "algorithm", "predicted us", "every candidate (us)");
  const CostModel* m = calibrated ? &model : nullptr;
  for (int ci = 0; ci < kNumColls; ++ci) {
    Coll c = static_cast<Coll>(ci);
    for (size_t b = 8; b <= (size_t(1) << 30); b *= 8) {
      size_t bytes = c == Coll::Barrier ? 0 : b;
      Algo a = choose(c, bytes, l, overrides, m);
      // Each candidate's prediction: for a hierarchical op the whole op with
      // that algorithm between hosts, as CostModel::hierarchicalUs counts it.
      const bool hier = a == Algo::Hierarchical;
      std::string name = toString(a);
      if (hier) {
        a = chooseInterHost(c, CostModel::hierarchicalSlice(c, bytes, ranks, hosts), hosts, overrides, m);
        name = std::string("hierarchical(shm+") + toString(a) + ")";
      }
      auto predict = [&](Algo x) {
        return hier ? model.hierarchicalUs(c, x, bytes, ranks, hosts) : model.predictUs(c, x, bytes, ranks, hosts);
      };
      double predicted = a == Algo::Shm ? model.segmentUs(c, bytes, false) : predict(a);
      std::string all = a == Algo::Shm ? "-" : "";
      for (Algo x : a == Algo::Shm ? std::vector<Algo>{} : CostModel::candidates(c)) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%s%s %.1f", all.empty() ? "" : ", ", toString(x), predict(x));
        all += buf;
      }
      std::printf("%-15s %12zu  %-36s %14.1f  %s\n", toString(c), bytes, name.c_str(), predicted, all.c_str());
      if (c == Coll::Barrier) break;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool config = false, backends = false, markdown = false, plan = false;
  int ranks = 0, hosts = 0;
  std::string transport = "tcp";
  double gbps = 0;
  CLI::App app{"Prints the version, the build (transports, CUDA and NCCL versions), the backends with the file "
               "each module was loaded from, and the effective configuration (with no option: all of it).",
               "accl-info"};
  app.add_flag("--config", config, "every ACCL_* variable: name, type, default, effective value, meaning");
  app.add_flag("--backends", backends, "backends compiled in, and whether each is usable on this host");
  app.add_flag("--markdown", markdown, "print the configuration table as Markdown (docs/configuration.md)");
  app.add_flag("--plan", plan,
               "the accl backend's algorithm per op and size band for --ranks/--hosts, with the cost model's "
               "predicted time (ACCL_TUNING_FILE's model, else the defaults of --transport and --link-gbps)");
  app.add_option("--ranks", ranks, "ranks in the group (--plan)")->check(CLI::PositiveNumber);
  app.add_option("--hosts", hosts, "hosts they are spread over, evenly where they divide (--plan; default: one "
                                   "rank per host)")->check(CLI::PositiveNumber);
  app.add_option("--transport", transport, "link between hosts for the default model (--plan)")
      ->check(CLI::IsMember({"tcp", "ib"}))->capture_default_str();
  app.add_option("--link-gbps", gbps, "link speed for the default model in Gbit/s (--plan; default: 10 for tcp, "
                                      "100 for ib)")->check(CLI::PositiveNumber);
  if (int rc = accl_tools::parseCommandLine(app, argc, argv, "accl-info"); rc >= 0) return rc;
  if (plan) {
    if (ranks == 0) {
      std::fprintf(stderr, "accl-info: --plan needs --ranks N (and --hosts H; default one rank per host)\n");
      return 2;
    }
    return printPlan(ranks, hosts ? hosts : ranks, transport, gbps);
  }
  if (ranks || hosts) {
    std::fprintf(stderr, "accl-info: --ranks and --hosts go with --plan\n");
    return 2;
  }
  if (markdown) {
    printMarkdown();
    return 0;
  }
  if (!config || backends) {
    std::printf("ACCL %s\n", accl::versionString());
    printBuild();
    printBackends();
  }
  if (!backends || config) return printConfig();
  return 0;
}
