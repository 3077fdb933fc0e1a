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
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR=env_extra.pop("MASTER_ADDR", "127.0.0.1"),
               MASTER_PORT=str(port), LOCAL_RANK=str(rank), **env_extra)
    cmd = [DRIVER] + mode
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    out = open(os.path.join(log_dir, f"rank{rank}.log"), "w")
    return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT), out


def outcome(p, log, started, limit):
    """(error class, seconds, message) of a rank that must fail; kills it at the limit."""
    try:
        rc = p.wait(timeout=max(0.1, started + limit - time.time()))
    except subprocess.TimeoutExpired:
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


def main():
    return run({"exit_without_destroy": exit_without_destroy, "sigkill": sigkill, "store_killed": store_killed,
                "link_down": link_down, "blackhole": blackhole, "ifdown": ifdown}, SCENARIO, "accl-fault-")


if __name__ == "__main__":
    sys.exit(main())
