#!/usr/bin/env python3
"""Helpers for scripts/bench/durable_bench.sh and scripts/bench/history_bench.sh: users with locally signed
tokens (HMAC, like scripts/bench/loadtest.sh, so no argon2), account trees, wrk Lua scripts, consistency
checks and the history run. Standard library only; talks to 127.0.0.1 only."""

import argparse
import base64
import datetime
import hashlib
import hmac
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor


def token(secret, user):
    b = lambda d: base64.urlsafe_b64encode(d).rstrip(b"=").decode()
    h = b(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    p = b(json.dumps({"user_id": user, "role": "user", "iat": 1}).encode())
    s = b(hmac.new(secret.encode(), f"{h}.{p}".encode(), hashlib.sha256).digest())
    return f"{h}.{p}.{s}"


class Client:
    """One keep-alive connection; reconnects once if the server closed it."""

    def __init__(self, port, tok):
        self.port, self.tok, self.conn = port, tok, None

    def call(self, method, path, params=None):
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                headers = {"Authorization": f"Bearer {self.tok}"}
                body = None
                if method == "GET" and params:
                    path = f"{path}?{urllib.parse.urlencode(params)}"
                elif params is not None:
                    body = json.dumps(params)
                    headers["Content-Type"] = "application/json"
                self.conn.request(method, path, body=body, headers=headers)
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, json.loads(data) if data else None
            except (ConnectionError, http.client.HTTPException):
                self.conn = None
                if attempt:
                    raise

    def ok(self, method, path, params=None):
        st, v = self.call(method, path, params)
        if st != 200:
            raise SystemExit(f"{method} {path} {params}: {st} {v}")
        return v


def cents(v):
    """Exact cents of a JSON number printed in plain decimal."""
    t = str(v)
    neg = t.startswith("-")
    t = t.lstrip("-")
    i, _, f = t.partition(".")
    c = int(i or "0") * 100 + int((f + "00")[:2])
    return -c if neg else c


# Tree shapes. tree3: main + 2 children at 0.5 (the durable run). tree9: main, 2 children,
# 6 grandchildren (allocations sum to 1 at each level; two fixed-amount envelopes, large enough
# never to be fully funded, so they stay active and track every deposit).
TREE3 = [("Needs", None, {"allocation": 0.5}), ("Savings", None, {"allocation": 0.5})]
TREE9 = [
    ("Needs", None, {"allocation": 0.6}),
    ("Wants", None, {"allocation": 0.4}),
    ("Rent", "Needs", {"allocation": 0.5, "fixed_amount": 100000000, "account_type": "FixedSaving"}),
    ("Food", "Needs", {"allocation": 0.3}),
    ("Utilities", "Needs", {"allocation": 0.2, "fixed_amount": 50000000, "account_type": "FixedSaving"}),
    ("Fun", "Wants", {"allocation": 0.5}),
    ("Travel", "Wants", {"allocation": 0.3, "account_type": "NonFixedSaving"}),
    ("Gifts", "Wants", {"allocation": 0.2}),
]
INITIAL = "1000"


def make_user(port, secret, user, shape):
    tok = token(secret, user)
    c = Client(port, tok)
    main = c.ok("POST", "/register", {"user_id": user, "initial_balance": INITIAL})["uuid"]
    uuids = {"Main": main}
    for name, parent, extra in shape:
        p = uuids[parent] if parent else main
        uuids[name] = c.ok("POST", "/add_sub_account", {"parent_uuid": p, "name": name, **extra})["uuid"]
    return {"user": user, "token": tok, "accounts": uuids}


def setup(args):
    shape = TREE3 if args.shape == "tree3" else TREE9
    with ThreadPoolExecutor(8) as ex:
        users = list(ex.map(lambda i: make_user(args.port, args.secret, f"{args.prefix}{i}", shape), range(args.n)))
    json.dump(users, open(args.out, "w"))


LUA_DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT rps=%.1f p50=%d p99=%d requests=%d non2xx=%d sockerr=%d\\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.requests, e.status, e.connect + e.read + e.write + e.timeout))
end
"""


def lua(args):
    """A wrk script rotating over the users' deposits (prebuilt requests), printing exact figures."""
    users = json.load(open(args.users))[: args.n]
    lines = ["local reqs = {}"]
    for u in users:
        body = f"uuid={u['accounts']['Main']}&amount=1.01&channel=load"
        lines.append(
            'reqs[#reqs + 1] = wrk.format("POST", "/deposit", {["Authorization"] = "Bearer %s", '
            '["Content-Type"] = "application/x-www-form-urlencoded"}, "%s")' % (u["token"], body)
        )
    lines.append(LUA_TAIL)
    open(args.out, "w").write("\n".join(lines))


LUA_TAIL = """
local i = 0
request = function()
  i = i + 1
  if i > #reqs then i = 1 end
  return reqs[i]
end
""" + LUA_DONE

RAW_LUA = """
wrk.method = "POST"
wrk.body = "uuid=acc00000000-0000-4000-8000-000000000000&amount=1.01&channel=load"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
""" + LUA_DONE


def raw_lua(args):
    open(args.out, "w").write(RAW_LUA)


def check3(args):
    """Every tree answers 200 and adds up; the sum of all money matches the deposits wrk saw
    acknowledged, give or take the ones still in flight when a run ended."""
    users = json.load(open(args.users))

    def one(u):
        c = Client(args.port, u["token"])
        a = u["accounts"]
        total = cents(c.ok("GET", "/compute_total_balance", {"uuid": a["Main"]})["total_balance"])
        own = cents(c.ok("GET", "/get_balance", {"uuid": a["Main"]})["balance"])
        parts = own + sum(
            cents(c.ok("GET", "/find_account_by_uuid", {"uuid": a[n]})["total_balance"]) for n, _, _ in TREE3
        )
        return total, parts, sum(cents(c.ok("GET", "/get_balance", {"uuid": a[n]})["balance"]) for n in a)

    with ThreadPoolExecutor(8) as ex:
        res = list(ex.map(one, users))
    bad = [(u["user"], r) for u, r in zip(users, res) if not r[0] == r[1] == r[2]]
    total = sum(r[0] for r in res)
    deposited = total - len(users) * cents(INITIAL)
    lo, hi = args.acked * 101, (args.acked + args.inflight) * 101
    print(f"check: {len(users)} trees answer 200; {len(bad)} whose total differs from the sum of its accounts")
    print(f"check: money deposited {deposited / 100:.2f}, acknowledged by wrk {lo / 100:.2f} "
          f"(+ at most {args.inflight} in flight at run ends: <= {hi / 100:.2f})")
    ok = not bad and lo <= deposited <= hi and deposited % 101 == 0
    print("check: " + ("OK" if ok else f"FAILED {bad[:5]}"))
    sys.exit(0 if ok else 1)


def proc_io(pid):
    d = {}
    for line in open(f"/proc/{pid}/io"):
        k, v = line.split(":")
        d[k] = int(v)
    return d


def history(args):
    """Back-dates `days` days of writes: per day, `per_day` deposits into every account (or only
    into main), plus a withdrawal from Food."""
    u = json.load(open(args.users))[args.index]
    today = datetime.date.today()
    reqs = []
    for d in range(args.days, 0, -1):
        day = (today - datetime.timedelta(days=d)).isoformat()
        for k, (name, uuid) in enumerate(u["accounts"].items()):
            if args.main_only and name != "Main":
                continue
            for r in range(args.per_day):
                reqs.append(("/deposit", {"uuid": uuid, "amount": "3.17", "channel": "hist",
                                          "transaction_date": day, "transaction_number": f"H{d}-{k}-{r}"}))
        reqs.append(("/withdraw", {"uuid": u["accounts"]["Food"], "amount": "0.50", "channel": "shop",
                                   "transaction_date": day}))
    t0 = time.time()
    run_many(args.port, u["token"], reqs, args.conns)
    print(f"history: {len(reqs)} back-dated writes over {args.days} days in {time.time() - t0:.1f}s", file=sys.stderr)


def run_many(port, tok, reqs, conns):
    """Runs (path, params) writes over `conns` keep-alive connections; every one must answer 200."""
    it = iter(reqs)
    lock = threading.Lock()
    lat = []

    def worker():
        c = Client(port, tok)
        mine = []
        while True:
            with lock:
                nxt = next(it, None)
            if nxt is None:
                break
            t = time.perf_counter()
            c.ok("POST", *nxt)
            mine.append(time.perf_counter() - t)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker) for _ in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sorted(lat)


def deposits(args):
    """`n` deposits dated today into one user's main account over `conns` connections, with the
    server's /proc/PID/io deltas around them. Prints one JSON line: counts, seconds, byte deltas and
    every latency (history_bench.sh adds up several such chunks)."""
    u = json.load(open(args.users))[args.index]
    main = u["accounts"]["Main"]
    reqs = [("/deposit", {"uuid": main, "amount": "1.01", "channel": "bench"}) for _ in range(args.n)]
    time.sleep(args.settle)
    before = proc_io(args.pid)
    t0 = time.perf_counter()
    lat = run_many(args.port, u["token"], reqs, args.conns)
    secs = time.perf_counter() - t0
    time.sleep(args.settle)  # background flushes caused by these deposits are counted too
    after = proc_io(args.pid)
    out = {
        "user": u["user"], "conns": args.conns, "n": args.n, "secs": secs,
        "write_bytes": after["write_bytes"] - before["write_bytes"], "wchar": after["wchar"] - before["wchar"],
        "lat_ms": [round(x * 1e3, 3) for x in lat],
    }
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(required=True)
    p = sub.add_parser("setup")
    p.add_argument("port", type=int)
    p.add_argument("secret")
    p.add_argument("n", type=int)
    p.add_argument("prefix")
    p.add_argument("shape", choices=["tree3", "tree9"])
    p.add_argument("out")
    p.set_defaults(f=setup)
    p = sub.add_parser("token")
    p.add_argument("secret")
    p.add_argument("user")
    p.set_defaults(f=lambda a: print(token(a.secret, a.user)))
    p = sub.add_parser("lua")
    p.add_argument("users")
    p.add_argument("n", type=int)
    p.add_argument("out")
    p.set_defaults(f=lua)
    p = sub.add_parser("raw-lua")
    p.add_argument("out")
    p.set_defaults(f=raw_lua)
    p = sub.add_parser("check3")
    p.add_argument("port", type=int)
    p.add_argument("users")
    p.add_argument("acked", type=int)
    p.add_argument("inflight", type=int)
    p.set_defaults(f=check3)
    p = sub.add_parser("history")
    p.add_argument("port", type=int)
    p.add_argument("users")
    p.add_argument("index", type=int)
    p.add_argument("--days", type=int, default=700)
    p.add_argument("--per-day", type=int, default=1)
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--main-only", action="store_true")
    p.set_defaults(f=history)
    p = sub.add_parser("deposits")
    p.add_argument("port", type=int)
    p.add_argument("pid", type=int)
    p.add_argument("users")
    p.add_argument("index", type=int)
    p.add_argument("n", type=int)
    p.add_argument("conns", type=int)
    p.add_argument("--settle", type=float, default=2.0)
    p.set_defaults(f=deposits)
    a = ap.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
