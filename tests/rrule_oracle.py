"""The reference for tests/recurrence_rrule.rs: python-dateutil's rrule.

Reads every rule first (one JSON object per line on stdin), then writes one answer per line on
stdout, in the same order. Days are days since 1970-01-01. For each rule it answers
  first:  the first k nominal days,
  window: [index, day] for every nominal day from `from - 2` on, up to and including the first
          one after `to + 2` (weekend moves shift a day by at most two), or to the series' end.
Exit status 3: dateutil is missing.
"""

import json
import sys
from datetime import date, datetime

try:
    from dateutil import rrule
except ImportError:
    sys.stderr.write("python-dateutil is not installed for %s\n" % sys.executable)
    sys.exit(3)

EPOCH = date(1970, 1, 1).toordinal()
FREQ = {"Days": rrule.DAILY, "Weeks": rrule.WEEKLY, "Months": rrule.MONTHLY, "Years": rrule.YEARLY}
WEEKDAYS = [rrule.MO, rrule.TU, rrule.WE, rrule.TH, rrule.FR, rrule.SA, rrule.SU]


def to_datetime(day):
    return datetime.fromordinal(day + EPOCH)


def answer(rule):
    start = to_datetime(rule["start"])
    args = {"dtstart": start, "interval": rule["every"]}
    if rule["unit"] == "Years":
        args["bymonth"] = start.month
    # Unset, rrule takes the start's day of the month itself.
    if rule["month_day"] is not None:
        args["bymonthday"] = rule["month_day"]
    if rule["nth"] is not None:
        n, weekday = rule["nth"]
        args["byweekday"] = WEEKDAYS[weekday](n)
    if rule["count"] is not None:
        args["count"] = rule["count"]
    if rule["until"] is not None:
        args["until"] = to_datetime(rule["until"])
    k, low, high = rule["k"], rule["from"] - 2, rule["to"] + 2
    first, window = [], []
    for i, when in enumerate(rrule.rrule(FREQ[rule["unit"]], **args)):
        day = when.toordinal() - EPOCH
        if i < k:
            first.append(day)
        if day >= low:
            window.append([i, day])
        if i + 1 >= k and day > high:
            break
    return {"first": first, "window": window}


def main():
    rules = [json.loads(line) for line in sys.stdin if line.strip()]
    out = sys.stdout
    for rule in rules:
        out.write(json.dumps(answer(rule)))
        out.write("\n")
    out.flush()


main()
