#!/usr/bin/env python3
"""Helpers for scripts/bench/webhook_bench.sh: one webhook per user (create, delete), the
deposits made so far (from the money, exact), and waiting for the receiver to have every event.
Standard library only; talks to 127.0.0.1 only."""

import argparse
import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pfm_bench import INITIAL, Client, cents  # noqa: E402

DEPOSIT_CENTS = 101  # the amount of pfm_bench.py's deposits


def each(users, f):
    with ThreadPoolExecutor(8) as ex:
        return list(ex.map(f, users))


def create(args):
    """One webhook per user, subscribed to transaction.recorded; prints nothing, writes the ids."""
    users = json.load(open(args.users))

    def one(u):
        c = Client(args.port, u["token"])
        return c.ok("POST", "/create_webhook", {"url": args.url, "events": "transaction.recorded"})["webhook"]["id"]

    json.dump(each(users, one), open(args.out, "w"))


def delete(args):
    users = json.load(open(args.users))
    ids = json.load(open(args.ids))

    def one(ui):
        u, i = ui
        c = Client(args.port, u["token"])
        # The receiver has every event; their outcomes may still be on their way to storage.
        end = time.monotonic() + 60
        while True:
            hooks = c.ok("GET", "/webhooks")["webhooks"]
            if any(h["failed"] for h in hooks):
                raise SystemExit(f"{u['user']}: a delivery failed: {hooks}")
            if not sum(h["waiting"] for h in hooks):
                break
            if time.monotonic() > end:
                raise SystemExit(f"{u['user']}: deliveries still waiting after 60 s: {hooks}")
            time.sleep(0.05)
        c.ok("POST", "/delete_webhook", {"id": i})

    each(list(zip(users, ids)), one)


def deposits(args):
    """Deposits made so far over every user, from the money: (total - initial) / 1.01."""
    users = json.load(open(args.users))

    def one(u):
        c = Client(args.port, u["token"])
        return cents(c.ok("GET", "/compute_total_balance", {"uuid": u["accounts"]["Main"]})["total_balance"])

    made = sum(each(users, one)) - len(users) * cents(INITIAL)
    if made % DEPOSIT_CENTS:
        raise SystemExit(f"money deposited {made} cents is not a whole number of deposits")
    print(made // DEPOSIT_CENTS)


def received(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=10) as r:
        distinct, requests = r.read().split()
        return int(distinct), int(requests)


def wait(args):
    """Waits until the receiver has `want` distinct events; prints "<distinct> <requests>
    <seconds waited>". Fails after `timeout` seconds, or when it got more than it should."""
    t0 = time.monotonic()
    while True:
        got, requests = received(args.receiver)
        if got >= args.want or time.monotonic() - t0 > args.timeout:
            break
        time.sleep(0.05)
    print(f"{got} {requests} {time.monotonic() - t0:.2f}")
    if got != args.want:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(required=True)
    p = sub.add_parser("create")
    p.add_argument("port", type=int)
    p.add_argument("users")
    p.add_argument("url")
    p.add_argument("out")
    p.set_defaults(f=create)
    p = sub.add_parser("delete")
    p.add_argument("port", type=int)
    p.add_argument("users")
    p.add_argument("ids")
    p.set_defaults(f=delete)
    p = sub.add_parser("deposits")
    p.add_argument("port", type=int)
    p.add_argument("users")
    p.set_defaults(f=deposits)
    p = sub.add_parser("wait")
    p.add_argument("receiver", type=int)
    p.add_argument("want", type=int)
    p.add_argument("--timeout", type=float, default=120)
    p.set_defaults(f=wait)
    a = ap.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
