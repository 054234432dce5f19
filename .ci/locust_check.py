"""Helpers of .ci/locust.sh (docs/hostile-input.md).

strip SRC DST   copy the reference's locust script with its StepLoadShape class removed (locust
                would otherwise let that shape drive a 10-minute, 500-user run); every other line
                is copied byte for byte.
check DIR       judge a finished run: no client exceptions, the tasks that used to break
                (/distribute) ran, and every failed request is one of the SPEC business-rule
                answers listed in ALLOWED for its path.
"""

import ast
import csv
import json
import re
import sys

# SPEC business-rule answers the reference client can provoke by design: it keeps using accounts
# it deleted or that became inactive, withdraws fixed sums, moves money between random accounts,
# sets attributes on random account kinds and allocations past 100%. (path, status, error regex)
MONEY = r"-?[0-9]+(\.[0-9]{1,2})?"
ALLOWED = {
    "/add_sub_account": [
        (400, r"Child account not added: Total allocation exceeds 100%\. Please adjust the allocations\."),
        (400, r"Account name already exists under this parent"),
        (400, r"Too many child accounts under this parent"),
        (404, r"Parent account not found"),
    ],
    "/set_child_allocation": [
        (400, r"Allocation not set: Total allocation exceeds 100%\. Please adjust the allocations\."),
        (404, r"Parent account not found"),
        (404, r"Child account not found under parent"),
    ],
    "/deposit": [
        (400, r"Deposit not allowed\. Account is not active\."),
        (403, r"Account not found or unauthorized"),
    ],
    "/withdraw": [
        (400, r"Failed: Insufficient balance! Your current balance is:" + MONEY),
        (403, r"Account not found or unauthorized"),
    ],
    "/distribute": [
        (400, r"Distribution failed: Insufficient balance! Your current balance is:" + MONEY),
        (400, r"Distribution failed: No active child accounts available\."),
        (400, r"Distribution failed: No active child accounts with a positive allocation\."),
        (403, r"Account not found or unauthorized"),
    ],
    "/move_balance": [
        (400, r"Failed: Source and destination accounts must differ"),
        (400, r"Failed: Insufficient balance! Your current balance is:" + MONEY),
        (400, r"Failed: Deposit not allowed\. Account is not active\."),
        (404, r"Source account not found"),
        (404, r"Target account not found"),
    ],
    "/delete": [
        (404, r"Account with uuid \S+ not found"),
    ],
    "/list_child_accounts": [(403, r"Parent account not found or unauthorized")],
    "/change_account_status": [
        (400, r"This account is already closed"),
        (400, r"Withdraw from this account or move the balance before closure\."),
        (403, r"This operation is only allowed on child or grandchild accounts"),
        (404, r"Account not found"),
    ],
    "/get_account_status": [
        (403, r"Account not found"),
        (403, r"This operation is only allowed on child or grandchild accounts"),
    ],
    "/set_priority": [
        (403, r"Account not found"),
        (403, r"This operation is only allowed on child or grandchild accounts"),
    ],
    "/get_priority": [
        (403, r"Account not found"),
        (403, r"Priority only available for child or grandchild accounts"),
    ],
    "/set_due_date": [(403, r"Account not found"), (403, r"Due date only applicable to grandchild accounts")],
    "/get_due_date": [(403, r"Account not found"), (403, r"Due date only applicable to grandchild accounts")],
    "/set_fixed_amount": [
        (403, r"Account not found"),
        (403, r"Fixed amount only applicable to grandchild accounts"),
    ],
    "/get_fixed_amount": [
        (403, r"Account not found"),
        (403, r"This endpoint is only applicable to grandchild accounts"),
    ],
}
# Reads that answer "not found" for an account the client deleted earlier.
for path, status, msg in [
    ("/get_balance", 403, r"Account not found or unauthorized"),
    ("/get_transactions", 403, r"Account not found or unauthorized"),
    ("/list_all_accounts", 403, r"Account not found or unauthorized"),
    ("/find_account_by_uuid", 403, r"Account not found or unauthorized"),
    ("/compute_total_balance", 403, r"Account not found or unauthorized"),
    ("/compute_total_due", 403, r"Account not found or unauthorized"),
    ("/compute_total_due_within_days", 404, r"Account not found"),
    ("/spending", 403, r"Account not found"),
    ("/total_income", 403, r"Account not found"),
    ("/allocated_amount", 404, r"Account not found"),
    ("/income_utilization", 404, r"Account not found"),
    ("/walking_amount", 403, r"Account not found"),
    ("/get_minimal_tree", 403, r"Account not found"),
    ("/set_account_type", 403, r"Account not found"),
    ("/get_account_type", 403, r"Account not found"),
    ("/set_account_freq", 403, r"Account not found"),
    ("/get_account_freq", 403, r"Account not found"),
    ("/set_account_periods", 403, r"Account not found"),
    ("/get_account_periods", 403, r"Account not found"),
]:
    ALLOWED.setdefault(path, []).append((status, msg))
# After deleting its main account a user has no tree (SPEC 3.6); the script does not stop such
# a user, because it compares the main uuid (boxed in a list, as the reference answers) with a
# plain string.
for path in list(ALLOWED) + ["/find_account_by_name"]:
    if path == "/delete":
        ALLOWED[path].append((404, r"Account for user_id '\S+' does not exist\."))
    else:
        ALLOWED.setdefault(path, []).append((404, r"User not found or unauthorized access"))
for path in ["/set_account_type", "/get_account_type", "/set_account_freq", "/get_account_freq",
             "/set_account_periods", "/get_account_periods"]:
    ALLOWED[path].append((403, r"This endpoint is only applicable to grandchild accounts"))


def strip(src, dst):
    text = open(src, encoding="utf-8").read()
    tree = ast.parse(text)
    shapes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "StepLoadShape"]
    if len(shapes) != 1:
        sys.exit(f"expected one StepLoadShape class in {src}, found {len(shapes)}")
    node = shapes[0]
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    lines = text.splitlines(keepends=True)
    out = "".join(lines[: first - 1] + lines[node.end_lineno:])
    ast.parse(out)
    open(dst, "w", encoding="utf-8").write(out)
    print(f"copied {src} without StepLoadShape (lines {first}-{node.end_lineno})")


def error_text(body):
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, list) and len(err) == 1:
        err = err[0]
    return err if isinstance(err, str) else None


def check(work):
    problems = []
    with open(f"{work}/stats_exceptions.csv", encoding="utf-8") as f:
        exceptions = list(csv.DictReader(f))
    for e in exceptions:
        problems.append(f"client exception x{e.get('Count')}: {e.get('Message')} at {e.get('Traceback', '')[-300:]}")
    with open(f"{work}/stats_stats.csv", encoding="utf-8") as f:
        stats = {row["Name"]: row for row in csv.DictReader(f)}
    total = stats.get("Aggregated", {})
    print(f"requests {total.get('Request Count')}, failures {total.get('Failure Count')}")
    for name in ["/generate_access_token", "/register", "/distribute", "/add_sub_account", "/deposit"]:
        if int(stats.get(name, {}).get("Request Count", 0)) == 0:
            problems.append(f"{name} was never requested")
    for name in ["/generate_access_token", "/register"]:
        if int(stats.get(name, {}).get("Failure Count", 0)) != 0:
            problems.append(f"{name} failed")
    seen = {}
    try:
        lines = open(f"{work}/failures.jsonl", encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        f = json.loads(line)
        path, status, err = f["path"], f["status"], error_text(f["body"])
        rules = ALLOWED.get(path, [])
        ok = err is not None and any(status == s and re.fullmatch(rx, err) for s, rx in rules)
        key = (path, status, re.sub(r"[0-9a-f-]{36}|" + MONEY, "#", err or str(f["body"])[:120]))
        seen[key] = seen.get(key, 0) + 1
        if not ok:
            problems.append(f"not a SPEC business-rule answer: {f}")
    logged = len(lines)
    counted = int(total.get("Failure Count", 0))
    # The CSV is written a moment before the last in-flight requests end, so it may count fewer.
    if logged < counted:
        problems.append(f"{counted} failures counted by locust but only {logged} recorded")
    for (path, status, err), n in sorted(seen.items()):
        print(f"  failure x{n}: {path} {status} {err}")
    if problems:
        print("\n".join(problems[:40]), file=sys.stderr)
        sys.exit(1)
    print("locust run OK: 0 client exceptions; every failure is a SPEC business-rule answer")


if __name__ == "__main__":
    if sys.argv[1:2] == ["strip"] and len(sys.argv) == 4:
        strip(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["check"] and len(sys.argv) == 3:
        check(sys.argv[2])
    else:
        sys.exit(__doc__)
