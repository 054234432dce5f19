#!/usr/bin/env python3
"""POST /import of a 20,000-line OFX statement against the same lines as single requests, on one
running pfm (see import_bench.sh). Prints the preview and commit times, and the time of 20,000
/deposit requests over 64 keep-alive connections to another user with the same tree. Standard
library only; talks to 127.0.0.1 only."""

import http.client
import json
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pfm_bench import TREE3, make_user, run_many  # noqa: E402

LINES = 20_000


def ofx():
    out = ["OFXHEADER:100\nDATA:OFXSGML\nVERSION:102\n\n<OFX><BANKMSGSRSV1><STMTTRNRS><STMTRS><CURDEF>EUR"
           "<BANKACCTFROM><ACCTID>BENCH</BANKACCTFROM><BANKTRANLIST>\n"]
    for i in range(LINES):
        out.append(f"<STMTTRN><TRNTYPE>CREDIT<DTPOSTED>2025{1 + (i // 28) % 12:02d}{1 + i % 28:02d}"
                   f"<TRNAMT>1.01<FITID>F{i}<NAME>Payer {i % 40}</STMTTRN>\n")
    out.append("</BANKTRANLIST></STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>\n")
    return "".join(out).encode()


def post(port, tok, query, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t = time.perf_counter()
    c.request("POST", f"/import?{query}", body=body, headers={"Authorization": f"Bearer {tok}"})
    r = c.getresponse()
    data = r.read()
    secs = time.perf_counter() - t
    if r.status != 200:
        raise SystemExit(f"/import?{query}: {r.status} {data[:300]!r}")
    return secs, json.loads(data)


def main():
    port, secret = int(sys.argv[1]), sys.argv[2]
    body = ofx()
    a = make_user(port, secret, "import_a", TREE3)
    b = make_user(port, secret, "import_b", TREE3)
    preview, p = post(port, a["token"], "", body)
    commit, c = post(port, a["token"], "commit=true", body)
    assert c["summary"]["deposit"] == LINES, c["summary"]
    again, d = post(port, a["token"], "commit=true", body)
    assert d["summary"]["duplicate"] == LINES, d["summary"]
    reqs = [("/deposit", {"uuid": b["accounts"]["Main"], "amount": "1.01", "channel": "bench"})] * LINES
    t = time.perf_counter()
    run_many(port, b["token"], reqs, 64)
    singles = time.perf_counter() - t
    print(f"{'lines':>6} {'bytes':>9} {'preview s':>10} {'commit s':>9} {'again s':>8} {'singles s':>10} {'singles/commit':>15}")
    print(f"{LINES:>6} {len(body):>9} {preview:>10.3f} {commit:>9.3f} {again:>8.3f} {singles:>10.3f} {singles / commit:>15.1f}")


if __name__ == "__main__":
    main()
