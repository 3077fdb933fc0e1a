#!/usr/bin/env python3
"""Faults of the fault matrix that need whole processes or namespaces (ctest label faults).

    fault_matrix.py BUILD_DIR exit_without_destroy shm|tcp|ib  rank 1 of 3 calls exit(0) mid-job without destroying
                                                             its group: the others fail naming it
    fault_matrix.py BUILD_DIR sigkill shm|tcp|ib             rank 1 of 3 is SIGKILLed mid-job: the others fail naming it
    fault_matrix.py BUILD_DIR store_killed none              rank 0, the store server, is SIGKILLed while ranks 1
                                                             and 2 wait in the rendezvous for rank 3: they fail
    fault_matrix.py BUILD_DIR link_down tcp                  two namespace hosts; the link between them goes down
                                                             mid-allreduce: every rank fails within its deadline
    fault_matrix.py BUILD_DIR ifdown ib,DEV                  2 ranks over verbs only (the soft-RoCE guest); the
                                                             device's interface DEV goes down mid-allreduce:
                                                             every rank fails within its deadline, then DEV is
                                                             brought up again
    fault_matrix.py BUILD_DIR pair_cut loss|down[ROUND],ROLE,SYNC_DIR,PORT
                                                             one rank of two, each in its own soft-RoCE guest
                                                             (tests/rdma/in_guest_pair.sh; the store at MASTER_ADDR):
                                                             once both run, the wire between the guests is cut
                                                             mid-allreduce (loss: each guest's eth0 drops every
                                                             packet it sends; down: the host pulls guest 1's cable):
                                                             this rank fails within its deadline
    fault_matrix.py BUILD_DIR blackhole NS0,NS1,ADDR,IPTABLES
                                                             namespaces made by the caller (rank r in NSr, the
                                                             store at ADDR); an iptables rule then drops every
                                                             packet both ways mid-allreduce: every rank fails
                                                             within its deadline (tests/netns/lossy_link_test.sh)

Each prints one line per surviving rank, "rank R: <error class> after <s> s: <message>", which docs/testing.md's
fault matrix quotes. Every survivor must fail with a named error within the limit: no hang, no crash (a signal),
no success. Exit 0: passed, 1: failed, 77: skipped (link_down without root).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from scenario_main import check, run, transports_for  # noqa: E402

BUILD, SCENARIO = sys.argv[1], sys.argv[2]
PARAM = sys.argv[3] if len(sys.argv) > 3 else ""
BIN = os.path.join(BUILD, "bin")
RUN, DRIVER = os.path.join(BIN, "accl-run"), os.path.join(BIN, "accl_diag_driver")
TRANSPORTS = transports_for(PARAM)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_rank(rank, size, port, mode, env_extra, log_dir, netns=None):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               LOCAL_RANK=str(rank))
    env.update(env_extra)
    cmd = [DRIVER] + mode
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    out = open(os.path.join(log_dir, f"rank{rank}.log"), "w")
    return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT), out


def where_it_waits(pid):
    """For a hang's report: each thread's state and kernel stack, and gdb's backtraces where gdb is installed."""
    out = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task")) if os.path.isdir(f"/proc/{pid}/task") else []:
        t = f"/proc/{pid}/task/{tid}"
        try:
            stat = open(f"{t}/stat").read().rsplit(")", 1)[1].split()[0]
            comm = open(f"{t}/comm").read().strip()
            kstack = open(f"{t}/stack").read().strip() if os.access(f"{t}/stack", os.R_OK) else ""
        except OSError as e:
            out.append(f"thread {tid}: {e}")
            continue
        out.append(f"thread {tid} ({comm}) state {stat}:\n{kstack}")
    if shutil.which("gdb"):
        try:
            bt = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"], capture_output=True,
                                text=True, timeout=120)
            out.append((bt.stdout + bt.stderr)[-12000:])
        except subprocess.TimeoutExpired:
            out.append("gdb did not attach within 120 s")
    return "\n".join(out)


ERROR = re.compile(r"error \((\w+)\): (.*)")


def outcome(p, log, started, limit):
    """(error class, seconds, message) of a rank that must fail; kills it at the limit."""
    try:
        rc = p.wait(timeout=max(0.1, started + limit - time.time()))
    except subprocess.TimeoutExpired:
        print(f"HANG: pid {p.pid} still runs after {limit} s; its log:\n{open(log.name).read()[-3000:]}", flush=True)
        print(where_it_waits(p.pid), flush=True)
        p.kill()
        p.wait()
        return ("HANG", limit, f"still running after {limit} s")
    secs = time.time() - started
    with open(log.name) as f:
        text = f.read()
    m = re.search(r"error \((\w+)\): (.*)", text)
    if rc < 0:
        return ("CRASH", secs, f"killed by signal {-rc}: {text[-300:]}")
    if rc == 0:
        return ("SUCCESS", secs, "exited 0 (no error)")
    return (m.group(1), secs, m.group(2)) if m else ("UNNAMED", secs, text[-300:])


def wait_ready(logs, timeout=60):
    """Until every rank's log has the driver's "ready" line (its group runs ops)."""
    end = time.time() + timeout
    while time.time() < end:
        if all("ready:" in open(l.name).read() for l in logs):
            return True
        time.sleep(0.05)
    return False


def report(rank, res, limit, must=()):
    cls, secs, msg = res
    print(f"rank {rank}: {cls} after {secs:.1f} s: {msg[:400]}")
    check(cls in ("RemoteError", "Timeout", "SystemError") and secs <= limit,
          f"rank {rank} fails with a named error within {limit} s ({cls}, {secs:.1f} s)")
    for want in must:
        check(want in msg, f"rank {rank}'s error says '{want}'")


def cut_mid_allreduce(tmp, cut, env_extra=None, netns=(None, None), what="the job runs"):
    """Two ranks run 8-byte allreduces with a 10 s deadline (in netns[r] where given); cut() then breaks their
    connection: both must fail with a named error within the deadline plus 10 s."""
    env = dict({"ACCL_TIMEOUT": "10s", "ACCL_STALL_WARN": "0"}, **(env_extra or {}))
    port = free_port()
    procs = [start_rank(r, 2, port, ["loop"], dict(env), tmp, netns=netns[r]) for r in range(2)]
    check(wait_ready([l for _, l in procs]) and all(p.poll() is None for p, _ in procs), what)
    cut()
    cut_at = time.time()
    for r in (0, 1):
        report(r, outcome(procs[r][0], procs[r][1], cut_at, 10 + 10), 20)


def exit_without_destroy(tmp):
    env = {"ACCL_TIMEOUT": "60s", "ACCL_TRANSPORTS": TRANSPORTS}
    port = free_port()
    procs = [start_rank(r, 3, port, ["exit", "200"], dict(env), tmp) for r in range(3)]
    started = time.time()
    p1, log1 = procs[1]
    rc1 = p1.wait(timeout=60)
    check(rc1 == 0, f"rank 1 exited 0 without destroying its group (exit {rc1})")
    for r in (0, 2):
        report(r, outcome(procs[r][0], procs[r][1], started, 30), 30, must=("rank 1",))


def sigkill(tmp):
    env = {"ACCL_TIMEOUT": "60s", "ACCL_TRANSPORTS": TRANSPORTS}
    port = free_port()
    procs = [start_rank(r, 3, port, ["loop"], dict(env), tmp) for r in range(3)]
    check(wait_ready([l for _, l in procs]) and all(p.poll() is None for p, _ in procs), "the job runs")
    procs[1][0].send_signal(signal.SIGKILL)
    killed = time.time()
    procs[1][0].wait()
    for r in (0, 2):
        report(r, outcome(procs[r][0], procs[r][1], killed, 30), 30, must=("rank 1",))


def store_killed(tmp):
    env = {"ACCL_TIMEOUT": "60s", "ACCL_DEBUG": "INFO", "ACCL_DEBUG_SUBSYS": "INIT"}
    port = free_port()
    procs = [start_rank(r, 4, port, ["count", "1"], dict(env), tmp) for r in range(3)]  # rank 3 never comes
    # Every rank is connected to rank 0's store (the rendezvous line is logged
    # once it is), then waits for rank 3's keys.
    end = time.time() + 60
    while time.time() < end and not all("rendezvous: " in open(l.name).read() for _, l in procs):
        time.sleep(0.05)
    check(all("rendezvous: " in open(l.name).read() for _, l in procs), "ranks 0-2 are connected to the store")
    time.sleep(0.5)
    procs[0][0].send_signal(signal.SIGKILL)
    procs[0][0].wait()
    killed = time.time()
    for r in (1, 2):
        report(r, outcome(procs[r][0], procs[r][1], killed, 20), 20, must=("store",))


def link_down(tmp):
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("SKIP: needs root and ip (network namespaces)")
        sys.exit(77)
    a, b = f"acclf{os.getpid() % 1000}a", f"acclf{os.getpid() % 1000}b"

    def cleanup():
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)

    cleanup()
    try:
        for cmd in (["ip", "netns", "add", a], ["ip", "netns", "add", b],
                    ["ip", "link", "add", "wire", "netns", a, "type", "veth", "peer", "name", "wire", "netns", b],
                    ["ip", "-n", a, "addr", "add", "10.76.0.1/24", "dev", "wire"],
                    ["ip", "-n", b, "addr", "add", "10.76.0.2/24", "dev", "wire"],
                    ["ip", "-n", a, "link", "set", "wire", "up"], ["ip", "-n", b, "link", "set", "wire", "up"],
                    ["ip", "-n", a, "link", "set", "lo", "up"], ["ip", "-n", b, "link", "set", "lo", "up"]):
            if subprocess.run(cmd).returncode != 0:
                print("SKIP: cannot build the namespaces")
                sys.exit(77)
        time.sleep(1)
        cut_mid_allreduce(tmp, lambda: subprocess.run(["ip", "-n", a, "link", "set", "wire", "down"]),
                          {"MASTER_ADDR": "10.76.0.1"}, (a, b), "the job runs across the link")
    finally:
        cleanup()


def ifdown(tmp):
    transport, dev = PARAM.split(",")
    try:
        cut_mid_allreduce(tmp, lambda: subprocess.run(["ip", "link", "set", dev, "down"], check=True),
                          {"ACCL_TRANSPORTS": transport}, what=f"the job runs over {transport}")
    finally:
        subprocess.run(["ip", "link", "set", dev, "up"])


def blackhole(tmp):
    ns0, ns1, addr, ipt = PARAM.split(",")

    def cut():  # first in the chain: ahead of any loss or delay rule
        for n in (ns0, ns1):
            subprocess.run(["ip", "netns", "exec", n, ipt, "-I", "OUTPUT", "1", "-o", "eth0", "-j", "DROP"], check=True)
    try:
        cut_mid_allreduce(tmp, cut, {"MASTER_ADDR": addr}, (ns0, ns1), "the job runs across the link")
    finally:
        for n in (ns0, ns1):
            subprocess.run(["ip", "netns", "exec", n, ipt, "-D", "OUTPUT", "-o", "eth0", "-j", "DROP"],
                           stderr=subprocess.DEVNULL)


def appears(path, timeout):
    """Whether PATH exists within TIMEOUT seconds (a file another guest or the host writes)."""
    end = time.time() + timeout
    while time.time() < end and not os.path.exists(path):
        time.sleep(0.05)
    return os.path.exists(path)


def meet(sync, name, role, timeout=300):
    """Both guests of a pair reach NAME: files in SYNC, a folder that both guests mount from the host."""
    open(os.path.join(sync, f"{name}.{role}"), "w").close()
    return check(appears(os.path.join(sync, f"{name}.{1 - role}"), timeout), f"the other guest reached '{name}'")


def wire(sync, state, name):
    """Guest 1's cable pulled (off) or put back (on) by the host (tests/rdma/run.sh, QEMU's set_link): the guest
    sees its carrier go, and nothing crosses the wire either way. (`ip link set eth0 down` inside the guest is not
    used: soft-RoCE packets left in the downed virtio NIC's ring hold their queue pair, and Debian 12's rdma_rxe
    frees it anyway after a wait and then crashes the kernel when the link comes up and the ring is reclaimed.)"""
    req = os.path.join(sync, f"wire-{state}-{name}")
    open(req, "w").close()
    check(appears(req + ".done", 30), f"the host set guest 1's cable {state}")


def pair_cut(tmp):
    name, role, sync, port = PARAM.split(",")  # name: the cut, then the round (the meeting points' names)
    how, role = name.rstrip("0123456789"), int(role)
    if how not in ("loss", "down"):
        raise SystemExit(f"pair_cut: the cut is loss or down, not '{how}'")
    env = {"ACCL_TIMEOUT": "10s", "ACCL_STALL_WARN": "0", "ACCL_TRANSPORTS": "ib", "LOCAL_RANK": "0",
           "MASTER_ADDR": os.environ.get("MASTER_ADDR", "10.78.0.1")}
    p, log = start_rank(role, 2, int(port), ["loop"], env, tmp)
    check(wait_ready([log], 180) and p.poll() is None, f"rank {role} runs allreduces with the other guest's rank")
    if not meet(sync, f"{name}-running", role):
        p.kill()
        return
    if how == "loss":
        subprocess.run(["tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "loss", "100%"], check=True)
    elif role == 1:
        wire(sync, "off", name)
    cut_at = time.time()
    limit = 10 + 10
    try:
        # The rank's exception is its error line (the driver prints it before the group's teardown).
        while time.time() < cut_at + limit and p.poll() is None and not ERROR.search(open(log.name).read()):
            time.sleep(0.05)
        seen = time.time()
        m = ERROR.search(open(log.name).read())
        if m and p.poll() is None:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                # The group's teardown after the error (ibv_destroy_qp) may wait in the kernel for
                # packets still queued on the cut wire: printed for the report; the rank must still
                # exit once the wire is back (checked below).
                print(f"rank {role}: exit held after its error: {where_it_waits(p.pid)[:3000]}", flush=True)
        if m:
            report(role, (m.group(1), seen - cut_at, m.group(2)), limit)
        else:
            report(role, outcome(p, log, cut_at, limit), limit)
    finally:
        # Both have their outcome before the wire comes back.
        meet(sync, f"{name}-done", role)
        if how == "loss":
            subprocess.run(["tc", "qdisc", "del", "dev", "eth0", "root"])
        elif role == 1:
            wire(sync, "on", name)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
        check(p.returncode == 1, f"rank {role} exits with status 1 once the wire is back (status {p.returncode})")


def main():
    return run({"exit_without_destroy": exit_without_destroy, "sigkill": sigkill, "store_killed": store_killed,
                "link_down": link_down, "blackhole": blackhole, "ifdown": ifdown, "pair_cut": pair_cut}, SCENARIO, "accl-fault-")


if __name__ == "__main__":
    sys.exit(main())
