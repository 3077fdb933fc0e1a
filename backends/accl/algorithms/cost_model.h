// The accl backend's cost model: an alpha-beta-gamma model (Hockney's, with
// a reduction rate, as in Thakur, Rabenseifner and Gropp's analysis of MPI's
// collectives) of the link between hosts, from which the selection picks the
// algorithm of an op between hosts and `accl-info --plan` predicts op times.
//
//   one message of n bytes between two ranks:   alpha + n * beta
//   reducing n bytes into another n bytes:       n * gamma
//   a step that receives n >= 1 MiB and reduces it, piece by piece:
//     alpha + n * max(beta, gamma) + piece * min(beta, gamma)
//   each further message one rank posts at once: overhead (LogGP's o)
//
// Parameters come from a calibration (`accl-perf --calibrate FILE`, named to
// the backend by ACCL_TUNING_FILE) or, without one, from the transport and the
// NIC's link speed that the topology reports (defaults()).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/select.h"

namespace accl {
namespace core {

struct LinkParams {
  double alphaUs = 0;     // latency of one message (microseconds)
  double betaUsPerB = 0;  // transfer time per byte (microseconds): 1 / bandwidth
  double gammaUsPerB = 0; // reduction time per byte (microseconds)
  double overheadUs = 0;  // each further message posted at once by one rank
};

// The CPUs of a host and what a message costs them. Where a host's ranks
// outnumber its cores (four ranks on two namespace hosts of one 2-core
// machine), a step's rank waits for a core as well as for its message, and an
// op takes at least the CPU time the host's ranks spend on its messages
// divided by the cores (a roofline: the network's time or the CPUs', the
// larger). machineCpus 0: not known, and no such term.
struct CpuParams {
  double machineCpus = 0;        // CPUs of a calibrated host's machine (its ranks' affinity)
  int hostsPerMachine = 1;       // hosts that shared that machine in the calibration (namespaces: 2 or more)
  double usPerMessage = 0;       // CPU time one message between hosts costs a side (sender's or receiver's)
  double usPerLocalMessage = 0;  // the same for a message within a host, or a rank's part in a segment phase
  // The cores one host has in a layout of `hosts` hosts: the machine's, or,
  // where the calibrated hosts shared one machine (namespace hosts), its
  // CPUs divided among the layout's hosts, taken to share it too. 0: not known.
  double coresPerHost(int hosts) const {
    if (machineCpus <= 0) return 0;
    return hostsPerMachine > 1 ? machineCpus / (hosts > 1 ? hosts : 1) : machineCpus;
  }
};

// Messages the ranks of one host handle in an op (each message counts once
// on its sending and once on its receiving side), between hosts and within.
struct HostMessages {
  double net = 0;
  double local = 0;
};

class CostModel {
 public:
  // Defaults for the link between hosts: "tcp" or "ib", at `linkGbps` (the
  // NIC's speed from the topology; <= 0: unknown, 10 Gbit/s for tcp and 100
  // for ib are assumed). The rates are what ACCL's transports reach on such
  // links, not the wire's raw rate.
  static CostModel defaults(const std::string& transport, double linkGbps);
  // Parses a tuning file's text (the JSON that `accl-perf --calibrate`
  // writes). Throws InvalidArgument naming `where`, the field and what is
  // accepted, for anything missing, negative or not a number.
  static CostModel fromJson(const std::string& text, const std::string& where);
  // Reads and parses a tuning file; InvalidArgument if it cannot be read.
  static CostModel fromFile(const std::string& path);
  // The JSON a tuning file holds (fromJson reads it back).
  std::string toJson() const;

  const LinkParams& link() const { return net_; }
  LinkParams& link() { return net_; }
  // Between ranks of one host (the shared-memory link of point-to-point and
  // of the flat algorithms' steps there).
  const LinkParams& local() const { return local_; }
  LinkParams& local() { return local_; }
  // The host's shared segment, where every op among the ranks of one host
  // runs (and the phases on each host of a hierarchical op): an allreduce of
  // n bytes there costs alpha + n * beta, measured with segmentRanks() ranks
  // (accl-perf --calibrate with two or more ranks on rank 0's host).
  const LinkParams& segment() const { return segment_; }
  LinkParams& segment() { return segment_; }
  int segmentRanks() const { return segmentRanks_; }
  void setSegmentRanks(int r) { segmentRanks_ = r; }
  // The segment's allreduce as measured, size by size: (bytes, us) with the
  // sizes increasing ("segment_curve" in the tuning file). Where it is set,
  // the bytes' part of the segment's time is read off it instead of n * beta:
  // the rate changes with the size (a vector that stays in the cache runs
  // faster than one that does not), which one line through the large sizes
  // gets wrong on one side or the other.
  const std::vector<std::pair<double, double>>& segmentCurve() const { return segmentCurve_; }
  void setSegmentCurve(std::vector<std::pair<double, double>> c) { segmentCurve_ = std::move(c); }
  // The bytes' part of the segment's allreduce of `bytes` (us, the handshakes
  // not counted): piecewise linear between the curve's points (their times
  // less the smallest size's, made non-decreasing), past the last point at
  // the last piece's slope (beta where that is not positive); below the
  // first point, and without a curve, bytes * beta.
  double segmentBytesUs(size_t bytes) const;
  // The link between hosts while every rank of a host crosses it at once:
  // measured (accl-perf --calibrate with several ranks per host) with
  // sharedRanks() pairs side by side, the k-th rank of one host with the
  // k-th of the other. Their CPUs, the hosts' links and the progress threads
  // are shared, which a pair measured alone does not see. With several ranks
  // per host, a step where they all cross at once (recursive doubling's
  // steps between hosts, direct exchanges) costs this link's time, and a
  // step where one pair per host crosses (rings) its latency with the
  // link's bandwidth. sharedRanks() 0: not measured; the model then uses
  // link() for both.
  const LinkParams& linkShared() const { return shared_; }
  LinkParams& linkShared() { return shared_; }
  int sharedRanks() const { return sharedRanks_; }
  void setSharedRanks(int r) { sharedRanks_ = r; }
  // The CPU term's parameters (tuning file "cpu"; accl-perf --calibrate
  // writes them).
  const CpuParams& cpu() const { return cpu_; }
  CpuParams& cpu() { return cpu_; }
  // What the ranks of the busiest host handle in algorithm `a` of `c` (the
  // layout of predictUs), and the CPU time that costs them over the cores
  // they share: the floor predictUs puts under its network time where the
  // host's ranks outnumber its cores among `hosts` hosts (0 where they do
  // not, or where the CPUs are not known).
  static HostMessages hostMessages(Coll c, Algo a, size_t bytes, int p, int hosts = 0);
  double cpuFloorUs(const HostMessages& m, int ranksPerHost, int hosts) const;
  const std::string& source() const { return source_; }
  void setSource(std::string s) { source_ = std::move(s); }
  std::string transport;  // the link the parameters describe: "tcp" or "ib"

  // Predicted time (microseconds) of algorithm `a` for `c` among `p` ranks
  // on `hosts` hosts (0: one rank per host; else in blocks of p / hosts
  // consecutive ranks, as launchers place them) with `bytes` as choose()
  // counts them (per rank; total for allgather, reduce_scatter and
  // alltoall). A step between ranks of one host costs the local link's
  // time, one between hosts the link's; a step where any pair crosses hosts
  // costs the latter. Where the host's ranks outnumber its cores (cpu()),
  // no less than the CPU time of the host's messages over its cores
  // (cpuFloorUs). Throws InvalidArgument for an algorithm `c` does not have.
  double predictUs(Coll c, Algo a, size_t bytes, int p, int hosts = 0) const;
  // What the accl backend runs for `c` among `p` ranks on `hosts` hosts
  // (blocks of p / hosts consecutive ranks), and its predicted time: on one
  // host, the shared segment; allreduce, broadcast and reduce with several
  // ranks per host, the hierarchical op (segment phases on each host, and
  // between hosts the best algorithm on one rank per host, each local rank
  // on its slice for allreduce, the slices sharing the host's link);
  // otherwise the best flat algorithm. `plan`,
  // when given, names it ("shm", "hierarchical(shm+ring)", "ring").
  double predictLayoutUs(Coll c, size_t bytes, int p, int hosts, std::string* plan = nullptr) const;
  // A hierarchical op with `inter` between hosts: the segment's phases and
  // the exchange of hierarchicalSlice() bytes among one rank per host (the
  // slices of an allreduce, and the rails of an allgather or reduce_scatter,
  // on even hosts cross at once and share the host's link: each gets 1/L of
  // its bandwidth); those two add a copy of the vector (into rank order, or
  // the input into rail order).
  double hierarchicalUs(Coll c, Algo inter, size_t bytes, int p, int hosts) const;
  // What one rank of a hierarchical op exchanges between hosts: its slice of
  // an allreduce on even hosts (p / hosts ranks each), its rail's share of an
  // allgather or reduce_scatter there (the whole vector / (p / hosts)), else
  // the whole vector.
  static size_t hierarchicalSlice(Coll c, size_t bytes, int p, int hosts);
  // The segment's share of it: the whole op on one host, or the phases on
  // each host of a hierarchical op (two handshakes for allreduce and
  // barrier, which use the segment before and after the exchange).
  double segmentUs(Coll c, size_t bytes, bool hierarchical) const;
  // The algorithms of `c` between hosts (Hierarchical excluded).
  static std::vector<Algo> candidates(Coll c);
  // The candidate with the lowest prediction (the earlier one on a tie).
  Algo best(Coll c, size_t bytes, int p, int hosts = 0) const;

 private:
  LinkParams net_;
  LinkParams local_{15.0, 1.0 / 3000.0, 1.0 / 4000.0, 1.0};  // as defaults() sets it
  LinkParams segment_{1.0, 1.0 / 3000.0, 0.0, 0.0};            // as defaults() sets it
  int segmentRanks_ = 0;                                       // 0: not measured
  std::vector<std::pair<double, double>> segmentCurve_;        // empty: alpha + n * beta
  LinkParams shared_;
  int sharedRanks_ = 0;  // 0: not measured
  CpuParams cpu_;
  // predictUs without the CPU floor.
  double networkUs(Coll c, Algo a, size_t bytes, int p, int hosts) const;
  // hierarchicalUs without the CPU floor (the exchange between hosts by
  // networkUs).
  double hierarchicalNoFloorUs(Coll c, Algo inter, size_t bytes, int p, int hosts) const;
  // linkShared() as the model uses it with `ranksPerHost` ranks per host.
  LinkParams sharedLink(int ranksPerHost) const;
  std::string source_;
};

}  // namespace core
}  // namespace accl
