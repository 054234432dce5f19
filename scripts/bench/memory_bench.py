#!/usr/bin/env python3
"""Helpers for scripts/bench/memory_bench.sh: many users of one shape (a main account, one child
account, two deposits), created fast, and wrk scripts that read their balances. Tokens are signed
locally with the server's secret (like pfm_bench.py), so no request pays for argon2; requests go
pipelined over a few keep-alive connections, so the client is not what limits the rate. Standard
library only; talks to 127.0.0.1 only.

  create PORT SECRET N OUT [--first K] [--procs P] [--conns C] [--depth D]   users K..K+N-1, main uuids to OUT
  lua SECRET UUIDS OUT [--first K] [--n N]                       wrk script: get_balance of each
  metrics PORT                                                   the cache's gauges and counters
"""

import argparse
import json
import multiprocessing
import os
import re
import socket
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pfm_bench import LUA_DONE, token  # noqa: E402

PREFIX = "mem"


def post(path, tok, body):
    body = body.encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {tok}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class Conn:
    """One keep-alive connection sending requests pipelined and reading their answers in order."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, reqs):
        self.s.sendall(b"".join(reqs))

    def read(self, count):
        out = []
        for _ in range(count):
            while b"\r\n\r\n" not in self.buf:
                self.more()
            head, _, rest = self.buf.partition(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            n = int(m.group(1)) if m else 0
            while len(rest) < n:
                self.more()
                head, _, rest = self.buf.partition(b"\r\n\r\n")
            status = int(head[9:12])
            out.append((status, rest[:n]))
            self.buf = rest[n:]
        return out

    def more(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise SystemExit("the server closed the connection")
        self.buf += d


def create_range(args):
    """Users first..first+n-1 over `conns` connections: each step sends one batch of `depth`
    requests on every connection before reading any answer, so conns x depth are in flight."""
    port, secret, first, n, depth, conns = args
    cs = [Conn(port) for _ in range(conns)]
    uuids = []
    step = depth * conns
    for start in range(first, first + n, step):
        users = [f"{PREFIX}{i}" for i in range(start, min(start + step, first + n))]
        toks = [token(secret, u) for u in users]
        groups = [(c, users[k * depth:(k + 1) * depth], toks[k * depth:(k + 1) * depth]) for k, c in enumerate(cs)]
        groups = [g for g in groups if g[1]]
        for c, us, ts in groups:
            c.send([post("/register", t, f"user_id={u}&initial_balance=1000") for u, t in zip(us, ts)])
        mains = []
        for c, us, ts in groups:
            for u, (st, body) in zip(us, c.read(len(us))):
                if st != 200:
                    raise SystemExit(f"register {u}: {st} {body[:200]!r}")
                mains.append(json.loads(body)["uuid"])
        k = 0
        for c, us, ts in groups:
            reqs = []
            for t in ts:
                m = mains[k]
                k += 1
                reqs.append(post("/add_sub_account", t, f"parent_uuid={m}&name=Savings&allocation=0.5"))
                reqs.append(post("/deposit", t, f"uuid={m}&amount=12.34&channel=bench"))
                reqs.append(post("/deposit", t, f"uuid={m}&amount=5.67&channel=bench"))
            c.send(reqs)
        for c, us, ts in groups:
            for st, body in c.read(3 * len(us)):
                if st != 200:
                    raise SystemExit(f"write: {st} {body[:200]!r}")
        uuids.extend(mains)
    return uuids


def create(a):
    procs = a.procs
    per = -(-a.n // procs)
    parts = [(a.port, a.secret, a.first + k * per, max(0, min(per, a.n - k * per)), a.depth, a.conns)
             for k in range(procs)]
    t0 = time.time()
    with multiprocessing.Pool(procs) as pool:
        res = pool.map(create_range, parts)
    secs = time.time() - t0
    with open(a.out, "a") as f:
        for uuids in res:
            f.write("".join(u + "\n" for u in uuids))
    print(f"created {a.n} users (4 writes each) in {secs:.1f} s: {a.n / secs:.0f} users/s, {4 * a.n / secs:.0f} writes/s")


def lua(a):
    """A wrk script reading users first..first+n-1 in turn, one get_balance each, then again. The
    requests come from a data file beside it (a script of constants stops at 65,536)."""
    uuids = open(a.uuids).read().split()
    n = a.n or len(uuids) - a.first
    data = a.out + ".txt"
    with open(data, "w") as f:
        for i in range(a.first, a.first + n):
            f.write(f"{uuids[i]} {token(a.secret, f'{PREFIX}{i}')}\n")
    script = (
        """
local reqs = {}
for line in io.lines("%s") do
  local uuid, tok = line:match("(%%S+) (%%S+)")
  reqs[#reqs + 1] = wrk.format("GET", "/get_balance?uuid=" .. uuid, {["Authorization"] = "Bearer " .. tok})
end
local i = 0
request = function()
  i = i + 1
  if i > #reqs then i = 1 end
  return reqs[i]
end
"""
        % os.path.abspath(data)
        + LUA_DONE
    )
    open(a.out, "w").write(script)


def metrics(a):
    s = socket.create_connection(("127.0.0.1", a.port))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        d = s.recv(1 << 16)
        if not d:
            break
        data += d
    out = {}
    for line in data.decode().splitlines():
        m = re.match(r"^pfm_(user_cache_\w+)\s+(\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    print(" ".join(f"{k}={int(v)}" for k, v in sorted(out.items())))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create")
    c.add_argument("port", type=int)
    c.add_argument("secret")
    c.add_argument("n", type=int)
    c.add_argument("out")
    c.add_argument("--first", type=int, default=0)
    c.add_argument("--procs", type=int, default=4)
    c.add_argument("--depth", type=int, default=16)
    c.add_argument("--conns", type=int, default=16)
    l = sub.add_parser("lua")
    l.add_argument("secret")
    l.add_argument("uuids")
    l.add_argument("out")
    l.add_argument("--first", type=int, default=0)
    l.add_argument("--n", type=int, default=0)
    m = sub.add_parser("metrics")
    m.add_argument("port", type=int)
    a = p.parse_args()
    {"create": create, "lua": lua, "metrics": metrics}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
