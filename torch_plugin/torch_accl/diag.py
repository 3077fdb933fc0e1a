#!/usr/bin/env python3
"""accl-diag: what a stuck or slow ACCL job is doing, from its flight recorder dumps.

Every rank's process writes ACCL_TRACE_DIR/accl-trace-<host>-<pid>.json when an
op times out or fails, on SIGUSR1, and on request (accl::dumpTraces(),
torch_accl.dump_traces()). accl-diag reads the dumps of all ranks (copy them
into one folder, or give several folders) and prints a verdict in a few lines
(which rank did not enter which op, which ranks called different ops, which
failure came first, which link is slowest), then a table per rank.

    accl-diag /tmp/accl-trace            # the dumps of a job
    accl-diag --live                     # SIGUSR1 to every ACCL process of this host, then the same
    accl-diag --store HOST:PORT          # ask a live job, every host of it, through its rendezvous store
    accl-diag --store HOST:PORT --store-kind torch   # the same for a torch job (torch's TCPStore)
    python -m torch_accl.diag DIR        # the same, from torch_accl

This file needs nothing but Python 3.8's standard library; it is installed as
bin/accl-diag with the SDK and as torch_accl.diag with the wheel.
"""
import argparse
import datetime
import glob
import hashlib
import hmac
import json
import os
import re
import signal
import socket
import statistics
import struct
import sys
import time

FORMAT = "accl-trace/1"
NOT_DONE = ("queued", "started", "waiting")


# ----------------------------------------------------------------- reading

def find_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "accl-trace-*.json")))
        elif os.path.exists(p):
            files.append(p)
        else:
            raise SystemExit(f"accl-diag: {p}: no such file or folder")
    return files


def load(files):
    """The dumps as dicts (with "path"); unreadable or foreign files are reported and skipped."""
    dumps, problems = [], []
    for f in files:
        try:
            with open(f) as fh:
                d = json.load(fh)
        except (OSError, ValueError) as e:
            problems.append(f"{f}: not readable as JSON ({e})")
            continue
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            problems.append(f"{f}: not an ACCL flight recorder dump (format {d.get('format') if isinstance(d, dict) else '?'}, "
                            f"expected {FORMAT})")
            continue
        d["path"] = f
        dumps.append(d)
    return dumps, problems


# ------------------------------------------------- asking a live job (--store)

class StoreError(Exception):
    pass


class TcpStoreClient:
    """A client of ACCL's rendezvous store server (backend_api/src/tcp_store.cc): frames of
    u32 magic | u16 version | u8 code | u8 0 | u32 body length | body, little-endian, strings as u32 length + bytes;
    with ACCL_STORE_SECRET (or _FILE) the connection first proves the secret both ways (HMAC-SHA256)."""
    MAGIC, VERSION = 0x41435354, 1
    SET, GET, ADD, CAS, CHECK, WAIT, DELETE, NUMKEYS, HELLO, AUTH = range(1, 11)

    def __init__(self, host, port, secret=None, timeout=10.0):
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise StoreError(f"cannot connect to the store at {host}:{port}: {e}") from None
        self.sock.settimeout(timeout)
        if secret:
            nc = os.urandom(32)
            body = self._call(self.HELLO, self._str(nc))
            ns, body = self._take_str(body)
            mac, _ = self._take_str(body)
            want = hmac.new(secret, b"accl-store server\0" + nc + ns, hashlib.sha256).digest()
            if not hmac.compare_digest(mac, want):
                raise StoreError("the store server proves a different secret than ACCL_STORE_SECRET here")
            self._call(self.AUTH, self._str(hmac.new(secret, b"accl-store client\0" + ns + nc, hashlib.sha256).digest()))

    @staticmethod
    def _str(b):
        return struct.pack("<I", len(b)) + b

    @staticmethod
    def _take_str(body):
        if len(body) < 4:
            raise StoreError("malformed reply from the store")
        (n,) = struct.unpack_from("<I", body)
        if len(body) < 4 + n:
            raise StoreError("malformed reply from the store")
        return body[4:4 + n], body[4 + n:]

    def _recv(self, n):
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except socket.timeout:
                raise StoreError(f"the store did not answer within {self.sock.gettimeout():g} s (is the process "
                                 f"that serves it, rank 0 or the launcher, stopped or hung?)") from None
            if not chunk:
                raise StoreError("the store closed the connection (a torch TCPStore? then --store-kind torch)")
            out += chunk
        return out

    def _call(self, cmd, body):
        self.sock.sendall(struct.pack("<IHBBI", self.MAGIC, self.VERSION, cmd, 0, len(body)) + body)
        magic, version, status, _, n = struct.unpack("<IHBBI", self._recv(12))
        if magic != self.MAGIC:
            raise StoreError(f"{magic:#x} is not an ACCL store server's reply (a torch TCPStore? then "
                             f"--store-kind torch)")
        reply = self._recv(n)
        if status != 0:
            raise StoreError(reply.decode(errors="replace") or f"status {status}")
        return reply

    def add(self, key, delta):
        return struct.unpack("<q", self._call(self.ADD, self._str(key.encode()) + struct.pack("<q", delta)))[0]

    def set(self, key, value):
        self._call(self.SET, self._str(key.encode()) + self._str(value))

    def check(self, keys):
        body = struct.pack("<I", len(keys)) + b"".join(self._str(k.encode()) for k in keys)
        return self._call(self.CHECK, body)[:1] == b"\x01"

    def get(self, key):
        value, _ = self._take_str(self._call(self.GET, self._str(key.encode())))
        return value

    def delete(self, key):
        self._call(self.DELETE, self._str(key.encode()))

    def close(self):
        self.sock.close()


class TorchStoreClient:
    """The same calls against torch's TCPStore (a torch job's MASTER_ADDR:MASTER_PORT), through torch itself."""

    def __init__(self, host, port, timeout=10.0):
        try:
            from datetime import timedelta
            import torch.distributed as dist
        except ImportError as e:
            raise StoreError(f"--store-kind torch needs torch here ({e})") from None
        try:
            self.s = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout),
                                   wait_for_workers=False)
        except (RuntimeError, ValueError) as e:
            raise StoreError(f"cannot reach torch's TCPStore at {host}:{port}: {e}") from None

    def _do(self, fn, *args):
        try:
            return fn(*args)
        except (RuntimeError, ValueError) as e:
            raise StoreError(f"torch's TCPStore: {e}") from None

    def add(self, key, delta):
        return int(self._do(self.s.add, key, delta))

    def set(self, key, value):
        self._do(self.s.set, key, value)

    def check(self, keys):
        # torch 1.x binds no check(), and a wait() that gives up leaves its reply in the connection: callers
        # that may meet torch 1.x ask counters with add(key, 0) instead.
        if not hasattr(self.s, "check"):
            return None
        return bool(self._do(self.s.check, list(keys)))

    def get(self, key):
        return bytes(self._do(self.s.get, key))

    def delete(self, key):
        self._do(self.s.delete_key, key)

    def close(self):
        self.s = None


def store_secret():
    s = os.environ.get("ACCL_STORE_SECRET")
    if s:
        return s.encode()
    f = os.environ.get("ACCL_STORE_SECRET_FILE")
    if f:
        with open(f, "rb") as fh:
            return fh.readline().rstrip(b"\n")  # the first line is the secret, as the library reads it
    return None


def ask_store(address, prefix, entries, wait_s, kind="accl"):
    """Query a live job through its rendezvous store: every rank whose process watches it (ACCL_DIAG_POLL, default
    every 2 s) puts its flight recorder there. Returns (dumps, who did not answer, the group's size).

    ACCL's store: the ranks of a group answer (accl-diag/size). torch's TCPStore (kind "torch"): every process
    of the job that uses torch_accl answers once, by the index it took (accl-diag/processes), for all its groups."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"accl-diag --store {address}: expected HOST:PORT (the job's MASTER_ADDR:MASTER_PORT)")
    key = (lambda k: f"{prefix}/{k}") if prefix else (lambda k: k)
    host = host.strip("[]") or "127.0.0.1"
    try:
        if kind == "torch":
            c = TorchStoreClient(host, int(port))
        else:
            c = TcpStoreClient(host, int(port), store_secret())
        names = {}
        processes = kind == "torch"  # torch's store: processes answer, and say so by a counter each
        if not processes and c.check([key("accl-diag/size")]):
            size = int(c.get(key("accl-diag/size")))
            who = list(range(size))
        elif processes and c.add(key("accl-diag/processes"), 0) > 0:
            size = c.add(key("accl-diag/processes"), 0)
            who = list(range(size))
            for i in who:
                # Set by each process right after it took its index; torch 1.x cannot check first (a get
                # waits for it, and would time out only for a process killed between the two calls).
                k = key(f"accl-diag/process/{i}")
                names[i] = c.get(k).decode(errors="replace") if c.check([k]) in (True, None) else f"index {i}"
        else:
            if processes:
                c.delete(key("accl-diag/processes"))  # the add(key, 0) above made it
            hint = ("a torch job (then --store-kind torch)" if kind != "torch" else
                    "a job whose torch_accl predates this, or whose store is not torch's TCPStore")
            raise SystemExit(f"accl-diag --store {address}: no ACCL group watches this store"
                             f"{' under prefix ' + repr(prefix) if prefix else ''} (ACCL_DIAG_POLL=0, {hint}, "
                             f"or the prefix its program gave the store: --prefix)")
        n = c.add(key("accl-diag/request"), 0) + 1
        c.set(key(f"accl-diag/entries/{n}"), str(entries).encode())
        c.add(key("accl-diag/request"), 1)
        dumps, missing = [], list(who)
        deadline = time.time() + wait_s
        while missing and time.time() < deadline:
            time.sleep(0.2)
            for r in list(missing):
                k = key(f"accl-diag/reply/{n}/{r}")
                if processes:
                    done = key(f"accl-diag/done/{n}/{r}")
                    there = c.add(done, 0) > 0
                else:
                    there = c.check([k])
                if there:
                    try:
                        d = json.loads(c.get(k))
                    except ValueError as e:
                        print(f"accl-diag: {names.get(r, f'rank {r}')}'s answer is not JSON ({e})", file=sys.stderr)
                        missing.remove(r)
                        continue
                    c.delete(k)  # the store keeps no dumps after the query
                    d["path"] = f"store {address}, {names.get(r, f'rank {r}')}"
                    if d.get("format") == FORMAT and d.get("groups"):
                        dumps.append(d)
                    elif d.get("reason"):
                        print(f"accl-diag: {names.get(r, f'rank {r}')}: {d['reason']}", file=sys.stderr)
                    missing.remove(r)
        c.delete(key(f"accl-diag/entries/{n}"))
        if processes:
            for r in who:  # answered or not, the counters go (a late answer leaves its reply: nothing reads it)
                c.delete(key(f"accl-diag/done/{n}/{r}"))
        c.close()
    except StoreError as e:
        raise SystemExit(f"accl-diag --store {address}: {e}")
    if names:
        missing = [names[i] for i in missing]
    return dumps, missing, size


class Group:
    """One process group as the dumps of its ranks describe it."""

    def __init__(self, backend, name, size):
        self.backend, self.name, self.size = backend, name, size
        self.ranks = {}  # rank -> {"dump": .., "group": .., "colls": {coll: entry}}

    @property
    def label(self):
        return f"group {self.name!r}" if self.name else "the default group"

    def add(self, dump, g):
        r = g["rank"]
        old = self.ranks.get(r)
        if old and old["dump"].get("written_us", 0) >= dump.get("written_us", 0):
            return  # an older dump of the same rank (an earlier run, or an earlier SIGUSR1)
        colls = {}
        entries = list(g.get("entries", []))
        if g.get("first_failure"):
            entries.insert(0, g["first_failure"])
        for e in entries:
            if e.get("coll", -1) >= 0:
                colls[e["coll"]] = e  # a later copy (ring) wins over first_failure
        self.ranks[r] = {"dump": dump, "group": g, "colls": colls, "entries": g.get("entries", [])}

    def host(self, r):
        for info in self.ranks.values():
            hosts = info["group"].get("hosts")
            if hosts and r < len(hosts):
                return hosts[r]
        if r in self.ranks:
            return self.ranks[r]["dump"].get("host", "?")
        return None


ENTRY_FIELDS = {"id": int, "coll": int, "op": str, "state": str}


def valid_group(g):
    """Whether a dump's group has what the analysis reads (a damaged or hand-edited file may not)."""
    if not isinstance(g, dict) or not isinstance(g.get("rank"), int) or not isinstance(g.get("size"), int):
        return False
    if not 0 <= g["rank"] < g["size"] or not isinstance(g.get("entries", []), list):
        return False
    entries = g.get("entries", []) + ([g["first_failure"]] if g.get("first_failure") else [])
    return all(isinstance(e, dict) and all(isinstance(e.get(k), t) for k, t in ENTRY_FIELDS.items())
               for e in entries)


def groups_of(dumps, problems=None):
    groups = {}
    for d in dumps:
        for g in d.get("groups", []) if isinstance(d.get("groups"), list) else []:
            if not valid_group(g):
                if problems is not None:
                    problems.append(f"{d['path']}: a group without the expected fields (rank, size, entries with id, "
                                    f"coll, op, state): skipped")
                continue
            key = (g.get("backend", "?"), g.get("name", ""), g["size"])
            if key not in groups:
                groups[key] = Group(*key)
            groups[key].add(d, g)
    return list(groups.values())


# ----------------------------------------------------------------- text

def ranks_text(ranks):
    """[0,1,2,4,6,7] -> "0-2,4,6-7"."""
    ranks = sorted(set(ranks))
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out)


def when(us):
    if not us:
        return "?"
    t = datetime.datetime.fromtimestamp(us / 1e6, tz=datetime.timezone.utc)
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 100000}Z"


def op_text(e, with_args=True):
    name = e["op"]
    if not with_args:
        return name
    args = []
    if e.get("root", -1) >= 0:
        args.append(f"root {e['root']}")
    if e.get("peer", -1) >= 0:
        args.append(f"peer {e['peer']}")
    args.append(f"{e.get('count', 0)} x {e.get('dtype', '?')}")
    return f"{name}({', '.join(args)})"


def number(e):
    seq = e.get("seq", -1)
    return f"#{seq if seq is not None and seq >= 0 else e.get('coll')}"


def signature(e):
    """What every rank must agree on for one collective (counts may differ where the op allows it)."""
    varying = ("alltoallv", "gather", "scatter", "allgatherv", "reduce_scatterv")
    return (e["op"], e.get("root", -1), e.get("dtype"), None if e["op"] in varying else e.get("count"))


def host_text(group, r):
    h = group.host(r)
    return f" ({h})" if h else ""


# ----------------------------------------------------------------- verdict

def named_absent(entry):
    """Ranks the waiting rank's own diagnosis names: 'did not arrive: 2 (host vm: no answer ...), 5 (...)'."""
    text = (entry.get("note") or "") + " " + (entry.get("error") or "")
    out = {}
    m = re.search(r"ranks that did not arrive: (.*?)(?:; ranks no longer connected|; this rank|$)", text)
    if m:
        for rm in re.finditer(r"(?:^|, )(\d+) \(([^()]*(?:\([^()]*\)[^()]*)*)\)", m.group(1)):
            out[int(rm.group(1))] = rm.group(2)
    return out


def mismatch(group):
    """The first collective number at which ranks called different ops, as lines."""
    common = {}
    for r, info in group.ranks.items():
        for c, e in info["colls"].items():
            common.setdefault(c, {})[r] = e
    for c in sorted(common):
        by_sig = {}
        for r, e in common[c].items():
            by_sig.setdefault(signature(e), []).append(r)
        if len(by_sig) > 1:
            parts = sorted(by_sig.items(), key=lambda kv: min(kv[1]))
            sides = [f"{op_text(common[c][rs[0]])} on rank{'s' if len(rs) > 1 else ''} {ranks_text(rs)}"
                     for _, rs in parts]
            first = [rs[0] for _, rs in parts]
            head = (f"ranks {first[0]} and {first[1]}" if len(first) == 2 else f"ranks {ranks_text(first)}")
            return [f"{head} disagree at collective #{c} of {group.label}: " + " vs ".join(sides)]
    return []


def stall(group):
    """Where the group is stuck: the collective of its first failure, else the first one some rank has not
    finished. Returns (lines, collective number or None)."""
    lines = []
    present = sorted(group.ranks)
    failed_at = [info["group"]["first_failure"]["coll"] for info in group.ranks.values()
                 if info["group"].get("first_failure", {}).get("coll", -1) >= 0]
    if failed_at:
        s = min(failed_at)  # later failures are its consequences: the group is unusable after it
    else:
        unfinished = [min(c for c, e in info["colls"].items() if e["state"] in NOT_DONE)
                      for info in group.ranks.values() if any(e["state"] in NOT_DONE for e in info["colls"].values())]
        if not unfinished:
            last = max((max(info["colls"]) for info in group.ranks.values() if info["colls"]), default=None)
            if last is not None:
                lines.append(f"{group.label}: no collective in flight; the last one (#{last}) completed on every "
                             f"rank with a dump")
            return lines, None
        s = min(unfinished)
    waiting, failed, done, behind = [], [], [], {}
    entry = None
    for r in present:
        e = group.ranks[r]["colls"].get(s)
        if e is None:
            before = [c for c in group.ranks[r]["colls"] if c < s]
            after = [c for c in group.ranks[r]["colls"] if c > s]
            if before or not after:
                behind[r] = group.ranks[r]["colls"][max(before)] if before else None
            # else: its ring no longer holds #s (it went on past it)
        elif e["state"] == "done":
            done.append(r)
        else:
            (failed if e["state"] == "failed" else waiting).append(r)
            entry = entry or e
    if entry is None:
        return lines, None
    what = f"{op_text(entry, False)} {number(entry)} of {group.label}"
    told = {}
    for r in waiting + failed:
        told.update(named_absent(group.ranks[r]["colls"][s]))
    missing_dumps = [r for r in range(group.size) if r not in group.ranks]
    for r in sorted(set(behind) | set(missing_dumps) | set(told)):
        says = f"; the ranks waiting for it say: {told[r]}" if r in told else ""
        if r in behind:
            last = behind[r]
            prior = (f"its last op is {op_text(last, False)} {number(last)}, {last['state']}"
                     if last else "it has no collective in its dump")
            lines.append(f"rank {r}{host_text(group, r)} never entered {what} ({prior}{says})")
        elif r in missing_dumps:
            if r in told:
                lines.append(f"rank {r}{host_text(group, r)} holds up {what}: it wrote no dump, and the ranks "
                             f"waiting for it say: {told[r]}")
            else:
                lines.append(f"rank {r}{host_text(group, r)} wrote no dump: it is stopped, hung or dead, or its "
                             f"ACCL_TRACE_DIR is elsewhere; the other ranks are in {what}")
        else:
            lines.append(f"rank {r}{host_text(group, r)} did not arrive at {what} in time{says}")
    for ranks, verbs, key in ((waiting, ("waits in", "wait in"), "started_us"),
                              (failed, ("failed in", "failed in"), "finished_us")):
        if ranks:
            t = min(group.ranks[r]["colls"][s].get(key) or group.ranks[r]["colls"][s].get("queued_us", 0)
                    for r in ranks)
            many = len(ranks) > 1
            lines.append(f"rank{'s' if many else ''} {ranks_text(ranks)} {verbs[many]} {what} "
                         f"{'since' if key == 'started_us' else 'from'} {when(t)}")
    if done:
        # Where they went on to (an op that needs the stuck ranks later, usually).
        now = {}
        for r in done:
            later = [c for c, e in group.ranks[r]["colls"].items() if c > s and e["state"] != "done"]
            e = group.ranks[r]["colls"][min(later)] if later else None
            now.setdefault(f"{op_text(e, False)} {number(e)} ({e['state']})" if e else None, []).append(r)
        for where, rs in sorted(now.items(), key=lambda kv: min(kv[1])):
            lines.append(f"rank{'s' if len(rs) > 1 else ''} {ranks_text(rs)} completed {what}" +
                         (f" and {'are' if len(rs) > 1 else 'is'} in {where}" if where else ""))
    return lines, s


def first_failure(group):
    firsts = []
    for r, info in group.ranks.items():
        ff = info["group"].get("first_failure")
        if ff:
            firsts.append((ff.get("finished_us", 0), r, ff))
    if not firsts:
        return []
    t, r, ff = min(firsts)
    err = ff.get("error", "")
    if len(err) > 400:
        err = err[:400] + " ..."
    return [f"first failure: rank {r}{host_text(group, r)} at {when(t)}, {op_text(ff, False)} {number(ff)}: {err}"]


def links(groups):
    """Every measured link src -> dst: (GB/s, bytes, src, dst, group)."""
    seen, out = set(), []
    for g in groups:
        for dst, info in g.ranks.items():
            pid = (info["dump"].get("host"), info["dump"].get("pid"))
            for p in info["group"].get("peers", []):
                # The bytes the busy time covers (dumps before bytes_timed timed every message).
                busy, b = p.get("receive_busy_us", 0), p.get("bytes_timed", p.get("bytes_received", 0))
                key = (pid, p["rank"], g.name, g.size)
                if p["rank"] == dst or busy <= 0 or b < (1 << 20) or key in seen:
                    continue
                seen.add(key)
                out.append((b / (busy * 1e3), b, p["rank"], dst, g))
    return out


def slow_link(groups):
    ls = links(groups)
    if len(ls) < 2:
        return []
    med = statistics.median(x[0] for x in ls)
    rate, b, src, dst, g = min(ls, key=lambda x: x[0])
    flag = " (less than half the median: a slow link or NIC)" if rate < 0.5 * med else ""
    return [f"slowest link: rank {src}{host_text(g, src)} -> rank {dst}{host_text(g, dst)}, {rate:.2f} GB/s vs "
            f"median {med:.2f} over {len(ls)} links{flag}"]


def verdict(groups):
    lines = []
    for g in groups:
        lines += mismatch(g)
        st, _ = stall(g)
        lines += st
        lines += first_failure(g)
    lines += slow_link(groups)
    return lines


# ----------------------------------------------------------------- tables

def rank_table(g):
    rows = [("rank", "host", "pid", "dump", "op (first failed, else first unfinished, else last)", "state", "since",
             "note")]
    for r in range(g.size):
        info = g.ranks.get(r)
        if not info:
            rows.append((str(r), g.host(r) or "?", "-", "none", "-", "-", "-", ""))
            continue
        d = info["dump"]
        entries = info["entries"]
        last = entries[-1] if entries else None
        pend = [e for e in entries if e["state"] in NOT_DONE]
        cur = info["group"].get("first_failure") or (pend[0] if pend else last)
        note = ""
        if cur and (cur.get("note") or cur.get("error")):
            note = (cur.get("note") or cur.get("error"))[:90]
        reason = d.get("reason", "?")
        reason = ("op failed" if reason.startswith("an op failed") else "stall" if reason.startswith("stall: ")
                  else reason[:24])
        rows.append((str(r), g.host(r) or d.get("host", "?"), str(d.get("pid", "?")), reason,
                     f"{op_text(cur, False)} {number(cur)}" if cur else "-", cur["state"] if cur else "-",
                     when(cur.get("started_us") or cur.get("queued_us")) if cur else "-", note))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]


# ----------------------------------------------------------------- live

def catches_sigusr1(pid):
    """Whether the process handles SIGUSR1 (its default would terminate it)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGUSR1 - 1)))
    except (OSError, ValueError):
        pass
    return False


def accl_processes():
    """pids of this host's processes that have libaccl loaded and SIGUSR1 handled (the flight recorder
    installs its handler with the first group; accl-run forwards it): never one that SIGUSR1 would kill."""
    out = []
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(os.path.basename(d))
        if pid == os.getpid():
            continue
        try:
            with open(os.path.join(d, "maps")) as fh:
                if not any("libaccl" in line for line in fh):
                    continue
        except OSError:
            continue
        if catches_sigusr1(pid):
            out.append(pid)
    return out


def trace_dir_of(pid, default):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            for kv in fh.read().split(b"\0"):
                if kv.startswith(b"ACCL_TRACE_DIR="):
                    return kv.split(b"=", 1)[1].decode()
    except OSError:
        pass
    return default


def live(default_dir, wait_s):
    """SIGUSR1 to every ACCL process here; returns (folders with their dumps, pids that wrote none)."""
    pids = accl_processes()
    if not pids:
        raise SystemExit("accl-diag --live: no process on this host has libaccl loaded")
    t0 = time.time() * 1e6
    dirs = {}
    for pid in pids:
        dirs[pid] = trace_dir_of(pid, default_dir)
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError as e:
            print(f"accl-diag: cannot signal pid {pid}: {e}", file=sys.stderr)
    deadline = time.time() + wait_s
    fresh = set()
    ranks = [p for p in pids if not _is_launcher(p)]
    while time.time() < deadline and len(fresh) < len(ranks):
        time.sleep(0.1)
        for d in set(dirs.values()):
            for f in glob.glob(os.path.join(d, "accl-trace-*.json")):
                try:
                    with open(f) as fh:
                        j = json.load(fh)
                except (OSError, ValueError):
                    continue
                if j.get("written_us", 0) >= t0 and j.get("pid") in dirs:
                    fresh.add(j["pid"])
    # A launcher (accl-run) forwards the signal and writes no dump of its own.
    silent = [p for p in pids if p not in fresh and not _is_launcher(p)]
    return sorted(set(dirs.values())), silent, t0


def _is_launcher(pid):
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip() == "accl-run"
    except OSError:
        return False


# ----------------------------------------------------------------- main

def main(argv=None):
    default_dir = os.environ.get("ACCL_TRACE_DIR", "/tmp/accl-trace")
    ap = argparse.ArgumentParser(
        prog="accl-diag",
        description="Reads ACCL flight recorder dumps (accl-trace-<host>-<pid>.json) of all ranks of a job and says "
                    "which rank holds it up, in which op and why, and which link is slow; then a table per rank.")
    ap.add_argument("paths", nargs="*", help=f"dump files or folders (default: ACCL_TRACE_DIR, here {default_dir})")
    ap.add_argument("--live", action="store_true",
                    help="first send SIGUSR1 to every process of this host that has libaccl loaded, and read the "
                         "dumps they write (run it on each host of a job, or copy the dumps together)")
    ap.add_argument("--store", metavar="HOST:PORT",
                    help="ask a live job through its rendezvous store (MASTER_ADDR:MASTER_PORT of an accl-run job, "
                         "of a program that uses ACCL's store, or with --store-kind torch of a torch job): every rank "
                         "puts its flight recorder there within ACCL_DIAG_POLL (2 s), from every host; ranks that do "
                         "not answer are named")
    ap.add_argument("--store-kind", choices=["accl", "torch"], default="accl",
                    help="with --store: whose store server it is: ACCL's (accl-run, the C++ API; default) or torch's "
                         "TCPStore (a torch job's init_process_group; needs torch here)")
    ap.add_argument("--prefix", default="", help="with --store: the key prefix the job's program gave its store "
                                                  "(PrefixStore), if any")
    ap.add_argument("--entries", type=int, default=200, help="with --store: the last ops per group to ask for (default 200)")
    ap.add_argument("--wait", type=float, default=5.0,
                    help="with --live or --store: seconds to wait for the answers (default 5)")
    ap.add_argument("--json", action="store_true", help="print the verdict and tables as JSON")
    ap.add_argument("--brief", action="store_true", help="the verdict only, no tables")
    a = ap.parse_args(argv)

    silent = []
    since = 0
    unanswered = []
    if a.live and a.store:
        ap.error("--live and --store ask the job in two ways: choose one")
    if a.store:
        dumps, unanswered, _ = ask_store(a.store, a.prefix, a.entries, a.wait, a.store_kind)
        paths, problems = [f"the store at {a.store}"], []
    else:
        if a.live:
            dirs, silent, since = live(default_dir, a.wait)
            paths = a.paths or dirs
        else:
            paths = a.paths or [default_dir]
        dumps, problems = load(find_files(paths))
    if since:
        dumps = [d for d in dumps if d.get("written_us", 0) >= since]
    groups = groups_of(dumps, problems)
    for p in problems:
        print(f"accl-diag: {p}", file=sys.stderr)
    def who_text(xs):  # ranks of a group, or processes of a torch job as they named themselves
        if xs and isinstance(xs[0], str):
            return "process" + ("es " if len(xs) > 1 else " ") + "; ".join(xs)
        return f"rank{'s' if len(xs) > 1 else ''} {ranks_text(xs)}"
    if not dumps and a.store:
        print(f"accl-diag --store {a.store}: no rank answered within {a.wait:g} s ({who_text(unanswered)}: "
              f"stopped, gone, or ACCL_DIAG_POLL=0 there; --wait waits longer)", file=sys.stderr)
        return 2
    if not dumps:
        print(f"accl-diag: no flight recorder dumps in {', '.join(paths)} (ranks write them when an op times out or "
              f"fails, on SIGUSR1, or with --live)", file=sys.stderr)
        return 2
    if not groups:
        print("accl-diag: no usable group in the dumps (see above)", file=sys.stderr)
        return 2
    lines = verdict(groups)
    if unanswered:
        lines.append(f"no answer through the store from {who_text(unanswered)} within {a.wait:g} s (stopped, "
                     f"hung with its threads, gone, or ACCL_DIAG_POLL=0 there)")
    if silent:
        lines.append(f"no answer to SIGUSR1 from pid{'s' if len(silent) > 1 else ''} "
                     f"{', '.join(map(str, silent))} (stopped, or SIGUSR1 handled by someone else)")
    if a.json:
        out = {"verdict": lines, "groups": []}
        for g in groups:
            st, s = stall(g)
            out["groups"].append({"backend": g.backend, "name": g.name, "size": g.size,
                                  "ranks_with_dump": sorted(g.ranks), "stuck_at": s})
        print(json.dumps(out, indent=1))
        return 0
    # Host labels as the groups name them (they tell namespaces or containers
    # that share a host name apart), else the dumps' host names.
    hosts = {h for g in groups for info in g.ranks.values() for h in info["group"].get("hosts", [])}
    hosts = hosts or {d.get("host", "?") for d in dumps}
    print(f"accl-diag: {len(dumps)} dump(s) from {len(hosts)} host(s), {len(groups)} group(s)")
    for line in lines or ["nothing wrong found: no op in flight, no failure, no mismatch"]:
        print("  " + line)
    if not a.brief:
        for g in groups:
            print()
            print(f"{g.label} ({g.backend}, {g.size} ranks, dumps from {len(g.ranks)}):")
            for line in rank_table(g):
                print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
