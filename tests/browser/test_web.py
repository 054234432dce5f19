"""Drives pfm's web page in headless Chromium (selenium) against a running server.

Usage: PFM_URL=http://127.0.0.1:PORT python3 tests/browser/test_web.py
Env:   PFM_SHOTS   folder for screenshots (default: browser-screenshots, not committed)
       CHROMIUM / CHROMEDRIVER  binaries (default: /usr/bin/chromium, /usr/bin/chromedriver)

Walks through what a person does (docs/web.md): register, log in, build a tree, deposit,
watch balances and envelope bars change, move and distribute money, see an API error inline,
see a script-like account name shown as text, page through transactions, delete with a
confirmation, use the page at phone width and by keyboard; then checks the console has no errors.
The browser runs in Pacific/Auckland (UTC+12/+13): the page works in the person's own calendar.
Exits non-zero on the first failure.
"""

import datetime
import hashlib
import hmac
import http.server
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = os.environ.get("PFM_URL", "http://127.0.0.1:8000").rstrip("/")
SHOTS = os.environ.get("PFM_SHOTS", "browser-screenshots")
XSS = "<img src=x onerror=alert(1)>"
LONG = ("ElectricityGasWaterInternetPhoneAndEverythingElseThatComesMonthly" * 2)[:128]
USER = "alice_web"
PASSWORD = "correct horse 1"
WAIT = 10

# The requests the walk makes fail on purpose (a withdrawal over the balance, a second
# registration, a bad repeat period, a rejected token, a deposit while offline, statements that
# cannot be read): Chromium logs
# every 4xx fetch as a network error; any other error-level console entry fails the test.
EXPECTED_NETWORK_ERRORS = [
    re.compile(r"/withdraw - Failed to load resource: the server responded with a status of 400"),
    re.compile(r"/register - Failed to load resource: the server responded with a status of 409"),
    re.compile(r"/set_account_freq - Failed to load resource: the server responded with a status of 400"),
    re.compile(r"/get_minimal_tree\?[^ ]* - Failed to load resource: the server responded with a status of 401"),
    re.compile(r"/get_minimal_tree\?[^ ]* - Failed to load resource: the server responded with a status of 429"),
    re.compile(r"/deposit - Failed to load resource: net::ERR_INTERNET_DISCONNECTED"),
    re.compile(r"/import\?[^ ]* - Failed to load resource: the server responded with a status of 400"),
    re.compile(r"/create_schedule - Failed to load resource: the server responded with a status of 400"),
]

shot_no = 0


def fail(msg):
    raise AssertionError(msg)


def check(cond, msg):
    if not cond:
        fail(msg)


def shot(d, name):
    global shot_no
    shot_no += 1
    path = os.path.join(SHOTS, f"{shot_no:02d}-{name}.png")
    # Grow the window to the page so the screenshot shows all of it.
    w = d.get_window_size()["width"]
    h = d.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
    d.set_window_size(w, min(max(h + 140, 600), 6000))
    d.save_screenshot(path)
    print(f"  screenshot {path}")


def wait_for(d, fn, what, timeout=WAIT):
    # The page re-renders the tree after every change; an element found just before a re-render
    # goes stale, which only means "look again".
    try:
        return WebDriverWait(d, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(lambda _: fn())
    except TimeoutException:
        fail(f"timed out waiting for: {what}")


def retry(fn):
    """Runs a find-then-act step again when a re-render made its element stale."""
    for attempt in range(5):
        try:
            return fn()
        except StaleElementReferenceException:
            if attempt == 4:
                raise
            time.sleep(0.1)


def by_id(d, id_):
    return d.find_element(By.ID, id_)


def text(d, id_):
    return by_id(d, id_).text


# Reads one tree row in a single script run, so a re-render cannot interleave.
NODE_JS = """
for (const li of document.querySelectorAll('#tree li')) {
  const name = li.querySelector(':scope > .node > .acc-name');
  if (!name || name.textContent !== arguments[0]) continue;
  const bar = li.querySelector(':scope > .envelope progress');
  const status = li.querySelector(':scope > .node .status');
  return {
    uuid: li.dataset.uuid,
    balance: li.querySelector(':scope > .node .bal').textContent,
    status: status ? status.textContent : null,
    row: li.querySelector(':scope > .node').textContent,
    bar: bar ? Number(bar.value) : null,
    envelope: bar ? li.querySelector(':scope > .envelope').textContent : null,
  };
}
return null;
"""


def node(d, name):
    """The tree row of the account named exactly `name`, as data (None if absent)."""
    return d.execute_script(NODE_JS, name)


def node_li(d, name):
    """The tree <li> whose account-name button reads exactly `name` (None if absent)."""
    for li in d.find_elements(By.CSS_SELECTOR, "#tree li"):
        btn = li.find_element(By.CSS_SELECTOR, ":scope > .node > .acc-name")
        if btn.get_property("textContent") == name:
            return li
    return None


def node_balance(d, name):
    n = node(d, name)
    check(n is not None, f"account {name!r} is not in the tree")
    return n["balance"]


def press(d, name, part, keys=None):
    """Clicks (or sends keys to) the toggle or name button of an account's tree row."""

    def go():
        li = node_li(d, name)
        check(li is not None, f"account {name!r} is not in the tree")
        e = li.find_element(By.CSS_SELECTOR, f":scope > .node > {part}")
        if keys:
            e.send_keys(keys)
        else:
            e.click()

    retry(go)


def select_account(d, name):
    wait_for(d, lambda: node(d, name) is not None, f"{name} in tree")
    press(d, name, ".acc-name")
    wait_for(d, lambda: text(d, "acct-name") == name, f"{name} selected")


def fill(d, id_, value):
    e = by_id(d, id_)
    e.clear()
    e.send_keys(value)


def choose(d, select_id, account_name):
    sel = Select(by_id(d, select_id))
    for o in sel.options:
        if o.get_property("textContent").strip().startswith(account_name + " ("):
            sel.select_by_value(o.get_attribute("value"))
            return
    fail(f"{account_name} not offered in #{select_id}")


def submit(d, form_id):
    by_id(d, form_id).find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def form_error(d, form_id):
    return by_id(d, form_id).find_element(By.CSS_SELECTOR, "[data-error]").get_property("textContent")


def form_ok(d, form_id):
    return by_id(d, form_id).find_element(By.CSS_SELECTOR, "[data-ok]").get_property("textContent")


def wait_notice(d, pattern, form_id=None):
    """Waits for a success message: the form's own line, or without a form the page's notice."""

    def done():
        if form_id:
            if form_error(d, form_id):
                fail(f"#{form_id} shows an error: {form_error(d, form_id)}")
            return re.search(pattern, form_ok(d, form_id))
        n = by_id(d, "notice")
        return n.is_displayed() and re.search(pattern, n.text)

    wait_for(d, done, f"message matching {pattern!r}")


def focused_id(d):
    return d.execute_script("const e = document.activeElement; return e ? (e.id || e.closest('form')?.id || e.tagName) : null")


def tree_children(d, name):
    """Names of the children the tree shows under `name`, in order."""
    return d.execute_script(
        "const li = [...document.querySelectorAll('#tree li')].find(l => l.querySelector(':scope > .node > .acc-name').textContent === arguments[0]);"
        "return li ? [...li.querySelectorAll(':scope > ul > li > .node > .acc-name')].map(b => b.textContent) : null",
        name,
    )


def local_today(d):
    return d.execute_script("const n = new Date(); return n.getFullYear() + '-' + String(n.getMonth() + 1).padStart(2, '0') + '-' + String(n.getDate()).padStart(2, '0')")


def add_sub(d, parent, name, allocation, fixed=None, due=None):
    select_account(d, parent)
    fill(d, "add-name", name)
    fill(d, "add-alloc", allocation)
    if fixed is not None:
        fill(d, "add-fixed", fixed)
    if due is not None:
        # A date input takes keys in the browser's locale order; set it through its value.
        d.execute_script("arguments[0].value = arguments[1]", by_id(d, "add-due"), due)
    submit(d, "add-form")
    wait_notice(d, re.escape(f"{name} added under {parent}"), "add-form")
    wait_for(d, lambda: node(d, name) is not None, f"{name} shown in the tree")


def envelope(d, name):
    n = node(d, name)
    check(n is not None and n["bar"] is not None, f"{name} has no envelope bar")
    return int(n["bar"]), n["envelope"]


def api(d, method, path, params):
    """Calls the API directly with the page's token (to make many transactions quickly)."""
    session = json.loads(d.execute_script("return sessionStorage.getItem('pfm.session')"))
    req = urllib.request.Request(
        BASE + path,
        method=method,
        data=json.dumps(params).encode(),
        headers={"Authorization": "Bearer " + session["token"], "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def uuid_of(d, name):
    return node(d, name)["uuid"]


# An OFX 1.x statement (SGML, no closing tags on data elements): one credit, two debits, each
# with the bank's id (FITID); a payee is the script-like name, as its entities.
OFX_HEADER = (
    "OFXHEADER:100\nDATA:OFXSGML\nVERSION:102\nSECURITY:NONE\nENCODING:USASCII\nCHARSET:1252\n"
    "COMPRESSION:NONE\nOLDFILEUID:NONE\nNEWFILEUID:NONE\n\n"
)


def ofx(transactions):
    return (
        OFX_HEADER + "<OFX>\n<BANKMSGSRSV1>\n<STMTTRNRS>\n<TRNUID>1\n<STMTRS>\n<CURDEF>USD\n"
        "<BANKACCTFROM>\n<BANKID>121099999\n<ACCTID>55501234\n<ACCTTYPE>CHECKING\n</BANKACCTFROM>\n"
        "<BANKTRANLIST>\n<DTSTART>20251101\n<DTEND>20251130\n" + transactions + "</BANKTRANLIST>\n"
        "</STMTRS>\n</STMTTRNRS>\n</BANKMSGSRSV1>\n</OFX>\n"
    )


STATEMENT = ofx(
    "<STMTTRN>\n<TRNTYPE>CREDIT\n<DTPOSTED>20251103\n<TRNAMT>250.00\n<FITID>WEB-1\n<NAME>Employer Ltd\n</STMTTRN>\n"
    "<STMTTRN>\n<TRNTYPE>DEBIT\n<DTPOSTED>20251105\n<TRNAMT>-12.34\n<FITID>WEB-2\n"
    "<NAME>&lt;img src=x onerror=alert(1)&gt;\n<MEMO>coffee &amp; cake\n</STMTTRN>\n"
    "<STMTTRN>\n<TRNTYPE>DEBIT\n<DTPOSTED>20251107\n<TRNAMT>-45.00\n<FITID>WEB-3\n<NAME>Corner grocer\n</STMTTRN>\n"
)

# What the preview table shows, one dict per line, read in one script run.
IMPORT_ROWS_JS = """
return [...document.querySelectorAll('#imp-table tbody tr[data-line]')].map(tr => {
  const td = tr.querySelectorAll(':scope > td');
  const sel = tr.querySelector('select');
  return {
    line: tr.dataset.line,
    action: tr.dataset.action,
    date: td[0].textContent,
    payee: (td[1].querySelector('.payee') || {}).textContent || null,
    memo: (td[1].querySelector('.memo') || {}).textContent || null,
    amount: td[2].textContent,
    why: [...td[3].querySelectorAll('.why')].map(e => e.textContent).join(' '),
    envelope: sel ? sel.id : td[4].textContent,
    chosen: sel ? sel.selectedOptions[0].textContent : null,
  };
});
"""


def import_rows(d):
    return d.execute_script(IMPORT_ROWS_JS)


def money_of(s):
    return round(float(s.replace(",", "")), 2)


def import_file(d, path):
    """Chooses `path` in the import panel's file input and asks for a preview."""
    e = by_id(d, "imp-file")
    e.clear()
    e.send_keys(path)
    submit(d, "import-form")


def import_idle(d):
    return d.execute_script("return !document.getElementById('import-commit').hasAttribute('aria-busy')")


def api_get(d, path, params):
    """Reads the API directly with the page's token."""
    session = json.loads(d.execute_script("return sessionStorage.getItem('pfm.session')"))
    req = urllib.request.Request(
        BASE + path + "?" + urllib.parse.urlencode(params), headers={"Authorization": "Bearer " + session["token"]}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


# The upcoming list, one dict per occurrence, read in one script run.
UPCOMING_JS = """
return [...document.querySelectorAll('#up-table tbody tr[data-schedule]')].map(tr => {
  const td = tr.querySelectorAll(':scope > td');
  return {
    schedule: tr.dataset.schedule, n: tr.dataset.n, state: tr.dataset.state,
    date: td[0].textContent, name: td[1].textContent, account: td[2].textContent,
    amount: td[3].textContent, shown: td[4].textContent,
    acts: [...td[5].querySelectorAll('button')].map(b => b.textContent),
  };
});
"""


def upcoming(d, name=None):
    return [r for r in d.execute_script(UPCOMING_JS) if name is None or r["name"] == name]


def upcoming_button(d, name, text_):
    """The button `text_` of the schedule `name`'s next occurrence in the upcoming list."""
    for tr in d.find_elements(By.CSS_SELECTOR, "#up-table tbody tr[data-schedule]"):
        if tr.find_elements(By.CSS_SELECTOR, "td")[1].get_property("textContent") == name:
            for b in tr.find_elements(By.CSS_SELECTOR, "button"):
                if b.get_property("textContent") == text_:
                    return b
    return None


# The forecast chart as drawn: its daily points, bill marks and refusal marks.
FORECAST_JS = """
const svg = document.querySelector('#fc-chart svg');
if (!svg) return null;
return {
  points: [...svg.querySelectorAll('circle.fc-pt')].map(c => [c.dataset.date, c.dataset.balance, Number(c.getAttribute('cy'))]),
  line: svg.querySelector('path.fc-line').getAttribute('d').split(/[ML]/).filter(Boolean).length,
  bills: [...svg.querySelectorAll('line.fc-bill')].map(l => [l.dataset.date, l.classList.contains('short')]),
  refused: [...svg.querySelectorAll('path.fc-refused')].map(m => m.dataset.date),
  label: svg.getAttribute('aria-label'),
};
"""


def forecast_drawn(d):
    return d.execute_script(FORECAST_JS)


def day_after(day, n):
    return (datetime.date.fromisoformat(day) + datetime.timedelta(days=n)).isoformat()


def set_value(d, id_, value):
    """Sets a date input through its value (its keys follow the browser's locale), as a person's change."""
    d.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('change', {bubbles: true}))",
        by_id(d, id_), value,
    )


def new_schedule(d, name, what, account, amount, **kw):
    """Fills the new-schedule form afresh: `what` deposit/withdraw, `kw` other fields by element id suffix."""
    d.execute_script("document.getElementById('sched-form').reset()")
    fill(d, "sc-name", name)
    Select(by_id(d, "sc-type")).select_by_value(what)
    choose(d, "sc-acc", account)
    fill(d, "sc-amount", amount)
    for key in ("start", "end-date"):
        set_value(d, "sc-" + key, kw.pop(key, ""))
    for key in ("unit", "on", "nth", "wday", "end", "weekend", "auto"):
        if key in kw:
            Select(by_id(d, "sc-" + key)).select_by_value(kw.pop(key))
    for key in ("every", "mday", "end-after"):
        if key in kw:
            fill(d, "sc-" + key, kw.pop(key))
    check(not kw, f"unknown schedule fields {kw}")


def schedules_walk(d):
    """Creates schedules through the form, skips and approves occurrences, reads the forecast."""
    wait_for(d, lambda: re.fullmatch(r"\d{4}-\d\d-\d\d", text(d, "up-today")), "the service's today")
    today = text(d, "up-today")
    check(upcoming(d) == [], f"upcoming before any schedule: {upcoming(d)}")
    # A refusal in the API's words, under the form, the field it names marked.
    fill(d, "sc-name", "Pocket money")
    submit(d, "sched-form")
    wait_for(d, lambda: form_error(d, "sched-form") == "amount is required", "the missing amount refused")
    check(by_id(d, "sc-amount").get_attribute("aria-invalid") == "true", "the amount is not marked invalid")
    # A rule that can never occur: the 31st of every February.
    new_schedule(d, "Pocket money", "deposit", "Main", "25", start="2030-02-01", unit="years", on="day", mday="31")
    submit(d, "sched-form")
    want = "the 31st of February never comes: choose another day or 'last'"
    wait_for(d, lambda: form_error(d, "sched-form") == want, f"inline error {want!r}")
    check(api_get(d, "/schedules", {})["schedules"] == [], "a refused schedule was created")

    # An automatic weekly deposit into Main from tomorrow, three times: coming, then one skipped.
    tomorrow = day_after(today, 1)
    new_schedule(d, "Pocket money", "deposit", "Main", "25", start=tomorrow, unit="weeks", end="after",
                 **{"end-after": "3"})
    by_id(d, "sched-form").find_element(By.CSS_SELECTOR, "button[type=submit]").send_keys(Keys.ENTER)
    wait_notice(d, re.escape(f"Created the schedule Pocket money. Next: {tomorrow} (scheduled)."), "sched-form")
    wait_for(d, lambda: len(upcoming(d, "Pocket money")) == 3, "three weekly deposits coming")
    rows = upcoming(d, "Pocket money")
    got = [(r["date"], r["account"], r["amount"], r["state"]) for r in rows]
    want = [(day_after(today, k), "Main", "+25.00", "scheduled") for k in (1, 8, 15)]
    check(got == want, f"the coming deposits: {got}")
    check(rows[0]["acts"] == ["Pay now", "Skip"] and rows[1]["acts"] == [], f"actions offered: {rows}")
    sl = by_id(d, "sl-table").get_property("textContent")
    check("every week, from " + tomorrow + ", 3 times, posts by itself" in sl, f"schedules table: {sl!r}")
    retry(lambda: upcoming_button(d, "Pocket money", "Skip").send_keys(Keys.ENTER))
    wait_for(d, lambda: [r["state"] for r in upcoming(d, "Pocket money")] == ["skipped", "scheduled", "scheduled"],
             "the first deposit skipped")
    check(f"Skipped Pocket money on {tomorrow}." == text(d, "up-ok"), text(d, "up-ok"))
    check(upcoming(d, "Pocket money")[1]["acts"] == ["Pay now", "Skip"], "the next deposit offers no actions")
    wait_for(d, lambda: (d.execute_script("return document.activeElement.dataset.act") == "skip"),
             "focus on the next occurrence's Skip")

    # Waits for approval and starts today, so it is due: approving it pays 2027.
    select_account(d, "2027")
    two027 = money_of(node_balance(d, "2027"))
    total = money_of(text(d, "t-balance"))
    new_schedule(d, "Phone", "withdraw", "2027", "10", auto="false")
    submit(d, "sched-form")
    wait_notice(d, re.escape(f"Created the schedule Phone. Next: {today} (due: waits for approval)."), "sched-form")
    wait_for(d, lambda: upcoming(d, "Phone")[:1] and upcoming(d, "Phone")[0]["state"] == "due", "Phone due today")
    row = upcoming(d, "Phone")[0]
    check((row["date"], row["amount"], row["shown"], row["acts"]) == (today, "-10.00", "due: waits for approval", ["Approve", "Skip"]),
          f"the due occurrence: {row}")
    check(node_balance(d, "2027") == f"{two027:,.2f}", "a due occurrence moved money before its approval")
    shot(d, "schedules")
    retry(lambda: upcoming_button(d, "Phone", "Approve").send_keys(Keys.ENTER))
    wait_for(d, lambda: upcoming(d, "Phone")[0]["state"] == "posted", "Phone posted")
    check(text(d, "up-ok") == f"Posted Phone of {today}: 10.00 (sch:2:0).", text(d, "up-ok"))
    wait_for(d, lambda: money_of(node_balance(d, "2027")) == round(two027 - 10, 2), "2027 paid 10.00")
    wait_for(d, lambda: money_of(text(d, "t-balance")) == round(total - 10, 2), "the total balance down by 10.00")
    check(api_get(d, "/upcoming", {"days": 30})["occurrences"][0]["state"] == "posted", "the API disagrees")

    # The forecast of 2027, day by day: one point per day of the window, the end as the API says.
    wait_for(d, lambda: text(d, "fc-acc") == "2027", "the forecast of 2027")
    Select(by_id(d, "fc-days")).select_by_value("90")
    want = api_get(d, "/forecast", {"days": 90, "uuid": uuid_of(d, "2027")})
    acc = [a for a in want["accounts"] if a["uuid"] == uuid_of(d, "2027")][0]
    check(acc["balance_end"] < acc["balance_today"], f"Phone is not in the forecast: {acc}")
    wait_for(d, lambda: (forecast_drawn(d) or {}).get("points", [[None]])[0][0] == today
             and len(forecast_drawn(d)["points"]) == 91, "91 daily points")
    f = forecast_drawn(d)
    check(f["line"] == 91, f"the line has {f['line']} points")
    check([p[0] for p in f["points"]] == [day_after(today, k) for k in range(91)], "the points are not the window's days")
    check(float(f["points"][-1][1]) == acc["balance_end"], f"end {f['points'][-1]} != {acc['balance_end']}")
    check(float(f["points"][0][1]) == round(two027 - 10, 2), f"today's point {f['points'][0]}")
    # Lower balances are drawn lower.
    check(f["points"][-1][2] > f["points"][0][2], f"the line does not go down: {f['points'][0]} {f['points'][-1]}")
    check(f"{acc['balance_end']:,.2f} on {day_after(today, 90)}" in text(d, "fc-sum"), text(d, "fc-sum"))
    # An occurrence the service would refuse: more than 2027 holds.
    r = api(d, "POST", "/create_schedule", {"name": "Holiday", "type": "withdraw", "uuid": uuid_of(d, "2027"),
                                               "amount": "1000", "start": day_after(today, 3), "end_after": "1"})
    check(r["success"], r)
    by_id(d, "refresh").click()
    wait_for(d, lambda: (forecast_drawn(d) or {}).get("refused") == [day_after(today, 3)], "the refusal marked on the chart")
    un = by_id(d, "fc-unapplied").get_property("textContent")
    check(f"{day_after(today, 3)}: Holiday would be refused: not enough money in the account" in un, f"refused: {un!r}")

    # A Bill due in the window, unfunded: its due date and shortfall as the forecast gives them.
    r = api(d, "POST", "/add_sub_account", {"parent_uuid": uuid_of(d, "Needs"), "name": "Water", "allocation": "0",
                                             "fixed_amount": "80", "due_date": day_after(today, 10), "account_type": "Bill",
                                             "freq": "30"})
    check(r["success"], r)
    by_id(d, "refresh").click()
    select_account(d, "Water")
    want = api_get(d, "/forecast", {"days": 90, "uuid": uuid_of(d, "Water")})
    check(want["bills"] and want["bills"][0]["shortfall"] > 0, f"Water is not short: {want['bills']}")
    bills_js = "return [...document.querySelectorAll('#fc-bills tbody tr')].map(tr => [...tr.cells].map(c => c.textContent))"
    wanted = [[b["due_date"], "Water", f"{b['amount_due']:,.2f}", f"{b['paid']:,.2f}", f"{b['balance']:,.2f}",
               f"{b['shortfall']:,.2f}" if b["shortfall"] > 0 else "-"] for b in want["bills"]]
    wait_for(d, lambda: d.execute_script(bills_js) == wanted, f"the bills table {wanted}")
    f = forecast_drawn(d)
    check(f["bills"] == [[b["due_date"], b["shortfall"] > 0] for b in want["bills"]], f"bill marks {f['bills']}")
    check(by_id(d, "fc-bills").is_displayed(), "the bills table is hidden")

    # A script-like name is only text (a move on the last Friday of each month, for the form's
    # other fields).
    new_schedule(d, XSS, "move", "Main", "1", start=day_after(today, 2), on="nth", nth="-1", wday="fri")
    check(not by_id(d, "sc-acc").is_displayed() and not by_id(d, "sc-mday").is_displayed(), "fields of other choices shown")
    choose(d, "sc-from", "Main")
    choose(d, "sc-to", "2027")
    submit(d, "sched-form")
    wait_notice(d, re.escape(f"Created the schedule {XSS}."), "sched-form")
    wait_for(d, lambda: upcoming(d, XSS) != [], "the script-like schedule coming")
    check(upcoming(d, XSS)[0]["account"] == "Main → 2027", f"the move: {upcoming(d, XSS)[0]}")
    sc = [x for x in api_get(d, "/schedules", {})["schedules"] if x["name"] == XSS][0]
    check((sc["type"], sc["nth"], sc["weekday"], sc["month_day"]) == ("move", -1, "fri", None), f"the move's rule: {sc}")
    check(datetime.date.fromisoformat(sc["next"]["date"]).weekday() == 4, f"not a Friday: {sc['next']}")
    check("every month, on the last Friday" in by_id(d, "sl-table").get_property("textContent"), "the rule as words")
    check(d.find_elements(By.CSS_SELECTOR, "#schedules img, #forecast img") == [], "an <img> was injected by a schedule")
    try:
        d.switch_to.alert
        fail("an alert opened: a schedule's name was run as HTML")
    except NoAlertPresentException:
        pass

    # Delete: confirmed, then gone from both lists; what it posted stays. Pocket money stays for
    # the phone-width check.
    for name in (XSS, "Holiday", "Phone"):
        button = retry(lambda: [b for b in d.find_elements(By.CSS_SELECTOR, "#sl-table button[data-act=delete]")
                                if b.get_attribute("aria-label") == "Delete the schedule " + name][0])
        button.click()
        wait_for(d, lambda: by_id(d, "confirm").is_displayed(), "confirmation of a schedule's delete")
        check("What it already posted stays" in text(d, "confirm-text"), text(d, "confirm-text"))
        by_id(d, "confirm-ok").click()
        wait_for(d, lambda: upcoming(d, name) == [], f"{name} gone from the upcoming list")
        check(text(d, "up-ok") == f"Deleted the schedule {name}.", text(d, "up-ok"))
    left = [x["name"] for x in api_get(d, "/schedules", {})["schedules"]]
    check(left == ["Pocket money"], f"schedules left: {left}")
    check(money_of(node_balance(d, "2027")) == round(two027 - 10, 2), "deleting Phone undid its posting")

# ---- access tokens and webhooks (docs/tokens.md, docs/webhooks.md)

class Receiver:
    """A webhook receiver on 127.0.0.1:0 that answers 200 and keeps what it was sent."""

    def __init__(self):
        self.got = []  # (headers as a dict of lowercase names, body bytes)
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/pfm-hook"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def events(self):
        with self.lock:
            return list(self.got)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def verify(secret, header, body, tolerance=300):
    """docs/webhooks.md's check, as a receiver writes it."""
    parts = dict(p.split("=", 1) for p in header.split(","))
    mac = hmac.new(secret.encode(), parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, parts["v1"]) and abs(time.time() - int(parts["t"])) <= tolerance


def with_token(token, method, path, params=None):
    """Calls the API as a program holding `token` would: (status, answer)."""
    params = params or {}
    if method == "GET":
        req = urllib.request.Request(BASE + path + "?" + urllib.parse.urlencode(params), method="GET")
    else:
        req = urllib.request.Request(BASE + path, method=method, data=json.dumps(params).encode())
        req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


# A table of the developer panel, one dict per row: each cell's text by its label, plus the
# row's data attributes.
DEV_ROWS_JS = """
return [...document.querySelectorAll('#' + arguments[0] + ' tbody tr')].filter(tr => Object.keys(tr.dataset).length).map(tr => {
  const o = Object.assign({}, tr.dataset);
  for (const td of tr.querySelectorAll(':scope > td')) o[td.dataset.label] = td.textContent;
  o.attempts = [...tr.querySelectorAll('.attempts li')].map(li => li.dataset.status || null);
  o.imgs = tr.querySelectorAll('img').length;
  return o;
});
"""


def dev_rows(d, table):
    return d.execute_script(DEV_ROWS_JS, table)


def dev_button(d, table, act, label):
    def find():
        hits = [b for b in d.find_elements(By.CSS_SELECTOR, f"#{table} button[data-act={act}]") if b.get_attribute("aria-label") == label]
        check(hits, f"no {act} button labelled {label!r} in #{table}")
        return hits[0]

    return retry(find)


def developer_walk(d):
    """Tokens: create one in the page, use it from a program, revoke it. Webhooks: create one for a
    receiver here, see a deposit made in the page arrive signed, its delivery listed, redeliver it."""
    wait_for(d, lambda: text(d, "tk-table").strip() != "", "the token list")
    # ---- a read token, shown once, listed without its text
    fill(d, "tk-name", "reporting")
    Select(by_id(d, "tk-scope")).select_by_value("read")
    Select(by_id(d, "tk-expiry")).select_by_value("30")
    submit(d, "token-form")
    wait_notice(d, r"^Created the token reporting, expiring \d{4}-\d\d-\d\d \d\d:\d\d\.$", "token-form")
    check(by_id(d, "tk-new").is_displayed(), "the new token is not shown")
    token = by_id(d, "tk-new-text").get_property("value")
    check(re.fullmatch(r"pfm_pat_[A-Za-z0-9_-]+\.\d+\.[A-Za-z0-9_-]{43}", token), f"token text: {token!r}")
    check("will not be shown again" in text(d, "tk-new"), text(d, "tk-new"))
    check(focused_id(d) == "tk-new-h", f"focus after creating a token is on {focused_id(d)}")
    by_id(d, "tk-copy").send_keys(Keys.ENTER)
    wait_for(d, lambda: text(d, "tk-copied") != "", "the copy button's answer")
    rows = dev_rows(d, "tk-table")
    check([(r["Name"], r["Scope"], r["Last used"]) for r in rows] == [("reporting", "read", "never")], f"tokens: {rows}")
    check(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", rows[0]["Expires"]), rows[0]["Expires"])
    check(token not in by_id(d, "tk-table").get_property("textContent"), "the token's text is in the list")
    # ---- the token reads, and may not write
    status, body = with_token(token, "GET", "/tokens")
    check(status == 200 and [t["name"] for t in body["tokens"]] == ["reporting"], f"GET /tokens with the token: {status} {body}")
    main = uuid_of(d, "Main")
    status, body = with_token(token, "GET", "/get_balance", {"uuid": main})
    check(status == 200, f"GET /get_balance with the token: {status} {body}")
    before = text(d, "t-balance")
    status, body = with_token(token, "POST", "/deposit", {"uuid": main, "amount": "5", "channel": "Cash"})
    check(status == 403 and "may only read" in body["error"], f"POST /deposit with a read token: {status} {body}")
    by_id(d, "refresh").click()
    wait_for(d, lambda: dev_rows(d, "tk-table")[0]["Last used"] != "never", "the token's last use shown")
    check(text(d, "t-balance") == before, "a read token deposited")
    by_id(d, "tk-hide").click()
    check(not by_id(d, "tk-new").is_displayed() and by_id(d, "tk-new-text").get_property("value") == "", "the token is still shown")
    check(token not in d.page_source, "the token's text is still in the page")
    # ---- a name like a script is text
    fill(d, "tk-name", XSS)
    Select(by_id(d, "tk-expiry")).select_by_value("")
    submit(d, "token-form")
    wait_notice(d, r"never expiring\.$", "token-form")
    wait_for(d, lambda: len(dev_rows(d, "tk-table")) == 2, "two tokens listed")
    rows = dev_rows(d, "tk-table")
    check(rows[1]["Name"] == XSS and rows[1]["Expires"] == "never" and rows[1]["imgs"] == 0, f"script-like token: {rows[1]}")
    try:
        d.switch_to.alert
        fail("an alert opened: a token's name was run as HTML")
    except NoAlertPresentException:
        pass
    by_id(d, "tk-hide").click()
    # ---- revoke by keyboard, after confirming; the token is refused from then on
    dev_button(d, "tk-table", "revoke", "Revoke the token reporting").send_keys(Keys.ENTER)
    wait_for(d, lambda: by_id(d, "confirm").is_displayed(), "confirmation of a revoke")
    check("refused from its next request" in text(d, "confirm-text"), text(d, "confirm-text"))
    check(text(d, "confirm-ok") == "Revoke", text(d, "confirm-ok"))
    by_id(d, "confirm-ok").click()
    wait_for(d, lambda: [r["Name"] for r in dev_rows(d, "tk-table")] == [XSS], "the revoked token gone from the list")
    check(text(d, "tk-ok") == "Revoked the token reporting: it no longer works.", text(d, "tk-ok"))
    check(focused_id(d) == "tk-h", f"focus after a revoke is on {focused_id(d)}")
    status, body = with_token(token, "GET", "/tokens")
    check(status == 401, f"a revoked token: {status} {body}")
    shot(d, "tokens")

    # ---- a webhook for a receiver here; its secret shown once
    rx = Receiver()
    try:
        webhook_walk(d, rx)
    finally:
        rx.close()


def webhook_walk(d, rx):
    fill(d, "wh-url", rx.url)
    fill(d, "wh-desc", "bookkeeping")
    fill(d, "wh-bill-days", "5")
    by_id(d, "wh-ev-acc-created").click()  # transaction.recorded is checked already
    submit(d, "webhook-form")
    wait_notice(d, r"^Created the webhook .* for transaction\.recorded, account\.created\.$", "webhook-form")
    secret = by_id(d, "wh-new-text").get_property("value")
    check(secret.startswith("whsec_"), f"secret: {secret!r}")
    check("will not be shown again" in text(d, "wh-new"), text(d, "wh-new"))
    rows = dev_rows(d, "wh-table")
    check(len(rows) == 1, f"webhooks: {rows}")
    hook = rows[0]
    check(hook["URL"] == rx.url + "bookkeeping" and hook["Events"] == "transaction.recorded, account.created", f"webhook row: {hook}")
    check((hook["State"], hook["Waiting"], hook["Failed"]) == ("enabled", "0", "0"), f"webhook row: {hook}")
    listed = api_get(d, "/webhooks", {})["webhooks"]
    check(listed[0]["bill_days"] == 5 and "secret" not in listed[0], f"/webhooks: {listed}")
    by_id(d, "wh-hide").click()
    # ---- a deposit in the page arrives at the receiver, signed with that secret
    choose(d, "dep-acc", "Main")
    fill(d, "dep-amount", "12.50")
    submit(d, "deposit-form")
    wait_notice(d, r"Deposited 12\.50 into Main", "deposit-form")
    wait_for(d, lambda: len(rx.events()) >= 1, "the receiver gets the deposit's event")
    headers, body = rx.events()[0]
    event = json.loads(body)
    check(event["type"] == "transaction.recorded" and headers.get("pfm-event-type") == "transaction.recorded", f"event: {event}")
    check(headers.get("pfm-event-id") == event["id"], f"event id header: {headers}")
    check(verify(secret, headers["pfm-signature"], body), f"the signature does not verify: {headers['pfm-signature']}")
    check(not verify(secret + "x", headers["pfm-signature"], body), "a wrong secret verifies")
    first = event["data"]["records"][0]
    check((first["uuid"], first["Type"], first["Amount"]) == (uuid_of(d, "Main"), "Deposit", 12.5), f"the event's first record: {first}")
    # ---- its delivery, in the page: delivered, answered 200
    dev_button(d, "wh-table", "deliveries", "Recent deliveries of " + rx.url).click()
    check(text(d, "wd-url") == rx.url, text(d, "wd-url"))

    def delivery(n_attempts):
        rows = [r for r in dev_rows(d, "wd-table") if r.get("event") == event["id"]]
        return rows[0] if rows and rows[0]["state"] == "delivered" and len(rows[0]["attempts"]) == n_attempts else None

    wait_for(d, lambda: delivery(1), "the delivery listed as delivered")
    row = delivery(1)
    check(row["attempts"] == ["200"] and row["Type"] == "transaction.recorded", f"delivery: {row}")
    check(re.search(r"HTTP 200 · \d+ ms", row["Attempts"]), f"attempt shown as {row['Attempts']!r}")
    shot(d, "webhook-deliveries")
    by_id(d, "developer").screenshot(os.path.join(SHOTS, "developer-panel.png"))
    # ---- redeliver: the same event again, a second attempt listed
    dev_button(d, "wd-table", "redeliver", f"Send transaction.recorded {event['id']} again").send_keys(Keys.ENTER)
    wait_for(d, lambda: len(rx.events()) >= 2, "the receiver gets the event again")
    headers2, body2 = rx.events()[1]
    check(json.loads(body2)["id"] == event["id"], f"redelivered another event: {body2[:200]}")
    check(verify(secret, headers2["pfm-signature"], body2), "the redelivery's signature does not verify")
    wait_for(d, lambda: delivery(2), "the redelivery listed")
    check(delivery(2)["attempts"] == ["200", "200"], f"delivery: {delivery(2)}")
    check(re.match(r"Sending transaction\.recorded evt_\S+ again now\.", text(d, "wd-ok")), text(d, "wd-ok"))
    # At phone width the webhook and its deliveries are cards, nothing wider than the screen.
    d.set_window_size(390, 844)
    time.sleep(0.4)
    overflow = d.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    check(overflow <= 0, f"with a webhook's deliveries the page is {overflow}px wider than a phone screen")
    by_id(d, "developer").screenshot(os.path.join(SHOTS, "developer-deliveries-phone.png"))
    d.set_window_size(1280, 900)
    # ---- disable, enable (the focus stays on the toggle), delete after confirming
    label = "Disable the webhook " + rx.url
    dev_button(d, "wh-table", "disable", label).send_keys(Keys.ENTER)
    wait_for(d, lambda: dev_rows(d, "wh-table")[0]["State"].startswith("disabled"), "the webhook disabled")
    check("disabled by its owner" in dev_rows(d, "wh-table")[0]["State"], f"webhook: {dev_rows(d, 'wh-table')}")
    check(d.switch_to.active_element.get_attribute("data-act") == "enable", "focus left the toggle")
    dev_button(d, "wh-table", "enable", "Enable the webhook " + rx.url).send_keys(Keys.ENTER)
    wait_for(d, lambda: dev_rows(d, "wh-table")[0]["State"] == "enabled", "the webhook enabled again")
    check(d.switch_to.active_element.get_attribute("data-act") == "disable", "focus left the toggle")
    dev_button(d, "wh-table", "delete", "Delete the webhook " + rx.url).click()
    wait_for(d, lambda: by_id(d, "confirm").is_displayed(), "confirmation of a webhook's delete")
    by_id(d, "confirm-cancel").click()
    check(len(dev_rows(d, "wh-table")) == 1, "Cancel deleted the webhook")
    dev_button(d, "wh-table", "delete", "Delete the webhook " + rx.url).click()
    wait_for(d, lambda: by_id(d, "confirm").is_displayed(), "confirmation of a webhook's delete")
    by_id(d, "confirm-ok").click()
    wait_for(d, lambda: dev_rows(d, "wh-table") == [], "the webhook gone")
    check(text(d, "wh-ok") == f"Deleted the webhook {rx.url}.", text(d, "wh-ok"))
    check(not by_id(d, "wd-panel").is_displayed(), "the deleted webhook's deliveries still shown")
    check(api_get(d, "/webhooks", {})["webhooks"] == [], "the webhook is still there")


def run(d):
    # ---- the page loads, signed out, with every input labelled
    d.get(BASE + "/")
    wait_for(d, lambda: by_id(d, "auth").is_displayed(), "log-in forms")
    check(d.title.startswith("pfm"), f"title is {d.title!r}")
    unlabelled = d.execute_script(
        "return [...document.querySelectorAll('input,select')].filter(e => e.type !== 'hidden' && !e.labels.length).map(e => e.id)"
    )
    check(unlabelled == [], f"inputs without a label: {unlabelled}")
    shot(d, "signed-out")

    # ---- register (then the page logs in by itself)
    fill(d, "reg-user", USER)
    fill(d, "reg-pass", PASSWORD)
    fill(d, "reg-initial", "1000")
    submit(d, "register-form")
    wait_for(d, lambda: by_id(d, "app").is_displayed(), "the signed-in page")
    wait_for(d, lambda: text(d, "t-balance") == "1,000.00", "total balance 1,000.00")
    check(text(d, "who-name") == USER, "user name in the header")

    # ---- log out: nothing of the session stays in the page for the next person
    by_id(d, "logout").click()
    wait_for(d, lambda: by_id(d, "auth").is_displayed(), "signed out")
    check(d.execute_script("return sessionStorage.getItem('pfm.session')") is None, "token left in sessionStorage")
    left = d.execute_script(
        "return [document.getElementById('t-balance').textContent, document.querySelectorAll('#tree li').length,"
        " document.querySelectorAll('select[data-accounts] option').length, document.getElementById('acct-name').textContent]"
    )
    check(left == ["-", 0, 0, ""], f"the logged-out session is still in the page: {left}")
    # ---- a password is required, and never trimmed
    fill(d, "reg-user", "bob_web")
    submit(d, "register-form")
    want = "Password is required (8 to 128 characters)."
    wait_for(d, lambda: form_error(d, "register-form") == want, f"inline error {want!r}")
    # ---- a second registration of the same id is refused in the API's words
    fill(d, "reg-user", USER)
    fill(d, "reg-pass", PASSWORD)
    submit(d, "register-form")
    want = "Account creation Failed: User already exists"
    wait_for(d, lambda: form_error(d, "register-form") == want, f"inline error {want!r}")
    check(not by_id(d, "app").is_displayed(), "a refused registration signed in")
    # ---- log in with a keyboard only: type, then Enter submits
    fill(d, "login-user", USER)
    by_id(d, "login-pass").send_keys(PASSWORD + Keys.ENTER)
    wait_for(d, lambda: by_id(d, "app").is_displayed(), "signed in again")
    check(focused_id(d) == "totals-h", f"focus after log in is on {focused_id(d)}")
    wait_for(d, lambda: text(d, "t-balance") == "1,000.00", "totals after log in")
    check("eyJ" not in d.current_url and "token" not in d.current_url, "token in the page URL")
    # ---- a reload keeps the session (sessionStorage), without asking again
    d.refresh()
    wait_for(d, lambda: by_id(d, "app").is_displayed() and text(d, "t-balance") == "1,000.00", "still signed in")

    # ---- build a tree
    add_sub(d, "Main", "Needs", "0.6")
    add_sub(d, "Main", "Savings", "0.4")
    add_sub(d, "Needs", "Rent", "0.7", fixed="500", due="2030-01-31")
    add_sub(d, "Needs", "Food", "0.3")
    add_sub(d, "Main", XSS, "0")
    # A name that is a number keeps its place (the API's order decides equal priorities).
    add_sub(d, "Main", "2027", "0")
    check(tree_children(d, "Main") == ["Needs", "Savings", XSS, "2027"], f"Main's children: {tree_children(d, 'Main')}")
    # An envelope past its due date and still short says so.
    add_sub(d, "Needs", "Old bill", "0", fixed="50", due="2020-01-31")
    check("overdue" in envelope(d, "Old bill")[1], f"Old bill: {envelope(d, 'Old bill')[1]!r}")
    check("overdue" not in envelope(d, "Rent")[1], "Rent, due in 2030, is marked overdue")
    value, label = envelope(d, "Rent")
    check(value == 0, f"Rent bar starts empty, is {value}")
    check("due 2030-01-31" in label and "0.00 of 500.00" in label, f"Rent envelope text: {label!r}")
    shot(d, "tree-built")

    # ---- the script-like name is shown as text, nothing ran
    check(node(d, XSS) is not None, "the script-like account is missing from the tree")
    check(d.find_elements(By.CSS_SELECTOR, "#tree img, #account img, select img") == [], "an <img> was injected")
    select_account(d, XSS)
    check(by_id(d, "acct-name").get_property("textContent") == XSS, "account heading must show the name as text")
    try:
        d.switch_to.alert
        fail("an alert opened: the name was run as HTML")
    except NoAlertPresentException:
        pass

    # ---- deposit into Main: balances and the envelope bar change
    select_account(d, "Main")
    choose(d, "dep-acc", "Main")
    fill(d, "dep-amount", "1,000.00")  # as the page shows amounts
    fill(d, "dep-channel", "Salary")
    # Today in the person's calendar: a deposit of today, counted in this month's income.
    d.execute_script("arguments[0].value = arguments[1]", by_id(d, "dep-date"), local_today(d))
    by_id(d, "deposit-form").find_element(By.CSS_SELECTOR, "button[type=submit]").send_keys(Keys.ENTER)
    wait_notice(d, r"Deposited 1,000\.00 into Main", "deposit-form")
    check(focused_id(d) == "deposit-form", f"focus left the deposit form for {focused_id(d)}")
    wait_for(d, lambda: text(d, "t-balance") == "2,000.00", "total balance 2,000.00")
    check(text(d, "t-income") == "1,000.00", f"income this month {text(d, 't-income')}")
    wait_for(d, lambda: node_balance(d, "Rent") == "420.00", "Rent 420.00")
    check(node_balance(d, "Food") == "180.00", "Food 180.00")
    check(node_balance(d, "Savings") == "400.00", "Savings 400.00")
    value, label = envelope(d, "Rent")
    check(value == 84 and "420.00 of 500.00" in label, f"Rent bar after deposit: {value} {label!r}")
    shot(d, "after-deposit")

    # ---- move money between accounts
    choose(d, "mv-from", "Savings")
    choose(d, "mv-to", "Food")
    fill(d, "mv-amount", "100")
    submit(d, "move-form")
    wait_notice(d, r"Moved 100\.00 from Savings to Food", "move-form")
    wait_for(d, lambda: node_balance(d, "Food") == "280.00", "Food 280.00 after move")
    check(node_balance(d, "Savings") == "300.00", "Savings 300.00 after move")

    # ---- an API error is shown next to the form, in the API's words, and nothing changes
    choose(d, "wd-acc", "Food")
    fill(d, "wd-amount", "5000")
    submit(d, "withdraw-form")
    want = "Failed: Insufficient balance! Your current balance is:280"
    wait_for(d, lambda: form_error(d, "withdraw-form") == want, f"inline error {want!r}")
    check(node_balance(d, "Food") == "280.00", "a failed withdrawal changed Food")
    shot(d, "inline-error")

    # ---- spend a little
    fill(d, "wd-amount", "30")
    submit(d, "withdraw-form")
    wait_notice(d, r"Withdrew 30\.00 from Food", "withdraw-form")
    check(form_error(d, "withdraw-form") == "", "the old error stays after success")
    wait_for(d, lambda: text(d, "t-spending") == "30.00", "spending this month 30.00")

    # ---- distribute Main's opening balance; Rent's bar fills up
    choose(d, "ds-acc", "Main")
    fill(d, "ds-amount", "500")
    submit(d, "distribute-form")
    wait_notice(d, r"Distributed 500\.00 from Main", "distribute-form")
    wait_for(d, lambda: envelope(d, "Rent")[0] == 100, "Rent fully funded")
    check(node_balance(d, "Rent") == "500.00", f"Rent balance {node_balance(d, 'Rent')}")
    check(node(d, "Rent")["status"] == "inactive", "a funded envelope is inactive")

    # ---- edit the envelope: a bigger target empties the bar a little; a bad period is refused
    select_account(d, "Rent")
    fill(d, "env-fixed", "600")
    fill(d, "env-freq", "abc")
    submit(d, "env-form")
    want = "Saved fixed amount; not saved: account_freq must be a positive number"
    wait_for(d, lambda: form_error(d, "env-form") == want, f"inline error {want!r}")
    check(by_id(d, "env-freq").get_attribute("aria-invalid") == "true", "the refused field is not marked invalid")
    check(by_id(d, "env-fixed").get_attribute("aria-invalid") is None, "a saved field is marked invalid")
    check(by_id(d, "env-freq").get_attribute("aria-describedby") == "env-form-error", "fields not tied to their error")
    wait_for(d, lambda: envelope(d, "Rent")[0] == 83, "Rent 83% funded after the target grew")
    check("500.00 of 600.00" in envelope(d, "Rent")[1], envelope(d, "Rent")[1])
    check("Repeats every\n-" in text(d, "acct-facts"), f"the refused period was saved: {text(d, 'acct-facts')!r}")
    check(by_id(d, "env-freq").get_property("value") == "abc", "the refused value was replaced")
    fill(d, "env-freq", "30")
    submit(d, "env-form")
    wait_notice(d, r"Saved repeat period for Rent", "env-form")
    wait_for(d, lambda: "30 days" in text(d, "acct-facts"), "Rent repeats every 30 days")

    # ---- change allocation and status
    select_account(d, "Savings")
    fill(d, "al-value", "0.3")
    # A reload meanwhile (Refresh, or another form's action) keeps what was typed.
    by_id(d, "refresh").click()
    time.sleep(0.5)
    check(by_id(d, "al-value").get_property("value") == "0.3", "a reload undid the typed allocation")
    fill(d, "pr-value", "5")  # typed in another form, not sent
    submit(d, "alloc-form")
    wait_notice(d, r"Allocation for Savings updated to 0\.3", "alloc-form")
    wait_for(d, lambda: "alloc 30%" in node(d, "Savings")["row"], "Savings allocation 30%")
    check(by_id(d, "pr-value").get_property("value") == "5", "the allocation's reload undid the typed priority")
    Select(by_id(d, "st-value")).select_by_value("inactive")
    submit(d, "status-form")
    wait_notice(d, r"Account Savings status updated to inactive", "status-form")
    wait_for(d, lambda: node(d, "Savings")["status"] == "inactive", "Savings inactive")

    # ---- transactions: date filter and paging
    main_uuid = uuid_of(d, "Main")
    for i in range(6):
        api(d, "POST", "/deposit", {"uuid": main_uuid, "amount": "1", "channel": f"bulk{i}"})
    by_id(d, "refresh").click()
    wait_for(d, lambda: text(d, "t-income") == "1,006.00", "Refresh shows the deposits made elsewhere")
    select_account(d, "Main")
    wait_for(d, lambda: "(15 transactions)" in text(d, "tx-page"), "15 transactions on Main")
    check(text(d, "tx-page").startswith("Page 1 of 2"), text(d, "tx-page"))
    check(len(d.find_elements(By.CSS_SELECTOR, "#tx-table tbody tr")) == 10, "10 rows on page 1")
    check(by_id(d, "tx-prev").get_property("disabled"), "Previous enabled on page 1")
    by_id(d, "tx-next").click()
    wait_for(d, lambda: text(d, "tx-page").startswith("Page 2 of 2"), "page 2")
    check(len(d.find_elements(By.CSS_SELECTOR, "#tx-table tbody tr")) == 5, "5 rows on page 2")
    shot(d, "transactions-page-2")
    d.execute_script("arguments[0].value = '2099-01-01'", by_id(d, "tx-from"))
    by_id(d, "tx-filter").find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(d, lambda: "No transactions in these dates." in by_id(d, "tx-table").text, "empty filtered list")
    by_id(d, "tx-clear").click()
    wait_for(d, lambda: "(15 transactions)" in text(d, "tx-page"), "filter cleared")
    # Today, in the person's calendar, holds all of them.
    for field in ("tx-from", "tx-to"):
        d.execute_script("arguments[0].value = arguments[1]", by_id(d, field), local_today(d))
    by_id(d, "tx-filter").find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(d, lambda: "(15 transactions)" in text(d, "tx-page"), "today's transactions")
    by_id(d, "tx-clear").click()
    # A back-dated record sorts by its date: last, on the last page.
    api(d, "POST", "/deposit", {"uuid": main_uuid, "amount": "2", "channel": "old", "transaction_date": "2020-01-02T00:00:00Z"})
    by_id(d, "refresh").click()
    wait_for(d, lambda: "(15 transactions)" not in text(d, "tx-page"), "the back-dated deposit listed")
    rows = d.find_elements(By.CSS_SELECTOR, "#tx-table tbody tr")
    check(rows[0].find_elements(By.TAG_NAME, "td")[4].text != "old", "the back-dated record is first")
    while not by_id(d, "tx-next").get_property("disabled"):
        by_id(d, "tx-next").click()
    last = d.find_elements(By.CSS_SELECTOR, "#tx-table tbody tr")[-1].find_elements(By.TAG_NAME, "td")
    check(last[0].text.startswith("2020-01-02") and last[4].text == "old", f"last row: {[c.text for c in last]}")

    # ---- the chart is drawn with this month's income
    wait_for(d, lambda: d.find_elements(By.CSS_SELECTOR, "#chart canvas"), "chart canvas")
    wait_for(d, lambda: "income 1,006.00" in text(d, "chart-sum"), "chart sums")  # 2020's is outside
    Select(by_id(d, "chart-range")).select_by_value("365")
    wait_for(d, lambda: "per month" in text(d, "chart-sum"), "monthly chart")

    # ---- import a bank statement: preview, choose an envelope, commit, import again
    work = tempfile.mkdtemp(prefix="pfm-import-")
    check(Select(by_id(d, "imp-acc")).first_selected_option.get_property("textContent").startswith("Main ("),
          "the import's account is not Main by default")
    # Too large for an import: said before anything is sent.
    big = os.path.join(work, "huge.ofx")
    with open(big, "wb") as f:
        f.truncate(9 * 1024 * 1024)
    import_file(d, big)
    wait_for(d, lambda: "at most 8 MiB" in form_error(d, "import-form"), "the too-large file refused in the page")
    # A file the server cannot read: its error, naming the line, under the form.
    bad = os.path.join(work, "bad.ofx")
    with open(bad, "w") as f:
        f.write(ofx("<STMTTRN>\n<TRNTYPE>DEBIT\n<DTPOSTED>20251345\n<TRNAMT>-1.00\n<FITID>X\n</STMTTRN>\n"))
    import_file(d, bad)
    want = "line 27: `20251345` is not a date"
    wait_for(d, lambda: form_error(d, "import-form") == want, f"inline error {want!r}")
    check(not by_id(d, "import-commit").is_displayed(), "a refused file left a preview to commit")
    # A CSV file needs a mapping: the mapping field opens.
    csv = os.path.join(work, "bank.csv")
    with open(csv, "w") as f:
        f.write("Date,Amount,Payee\n2025-11-03,10.00,Someone\n")
    check(not by_id(d, "imp-mapping").is_displayed(), "the mapping field is open before it is needed")
    import_file(d, csv)
    wait_for(d, lambda: "mapping" in form_error(d, "import-form"), "a CSV without a mapping refused")
    check(by_id(d, "imp-mapping").is_displayed(), "the mapping field did not open")
    check(by_id(d, "imp-mapping").get_attribute("aria-invalid") == "true", "the mapping is not marked invalid")
    # The statement: every line shown as text, the script-like payee included. Main splits its
    # money further, so a debit waits for an envelope; "2027" (allocation 0, so out of every
    # deposit's way) holds 100.00 to pay them from.
    api(d, "POST", "/change_account_status", {"uuid": uuid_of(d, "2027"), "status": "active"})
    api(d, "POST", "/move_balance", {"from_uuid": uuid_of(d, "Main"), "to_uuid": uuid_of(d, "2027"), "amount": "100"})
    by_id(d, "refresh").click()
    wait_for(d, lambda: node_balance(d, "2027") == "100.00", "2027 holds 100.00")
    path = os.path.join(work, "statement.ofx")
    with open(path, "w") as f:
        f.write(STATEMENT)
    import_file(d, path)
    wait_for(d, lambda: len(import_rows(d)) == 3, "the preview's three lines")
    check(form_error(d, "import-form") == "", f"preview error: {form_error(d, 'import-form')}")
    rows = import_rows(d)
    got = [(r["date"], r["amount"], r["action"]) for r in rows]
    want = [("2025-11-03", "+250.00", "deposit"), ("2025-11-05", "-12.34", "needs_attention"),
            ("2025-11-07", "-45.00", "needs_attention")]
    check(got == want, f"preview rows: {got}")
    check(rows[1]["payee"] == XSS and rows[1]["memo"] == "coffee & cake", f"payee and memo as text: {rows[1]}")
    check(d.find_elements(By.CSS_SELECTOR, "#import img") == [], "an <img> was injected by the statement")
    check(all(r["envelope"].startswith("imp-env-") for r in rows), "a line to import offers no envelope")
    check(rows[0]["chosen"].strip().startswith("Main ("), f"the deposit's envelope shown is {rows[0]['chosen']!r}")
    check(rows[2]["chosen"] == "(not chosen)" and "no envelope chosen" in rows[2]["why"], f"the debit: {rows[2]}")
    check("Nothing has changed yet" in text(d, "imp-summary"), text(d, "imp-summary"))
    shot(d, "import-preview")
    # Pay both debits from "2027": each choice previews again, the focus staying on it.
    for row in rows[1:]:
        sel = by_id(d, row["envelope"])
        check(d.execute_script("return arguments[0].labels.length", sel) == 1, "an envelope choice has no label")
        d.execute_script("arguments[0].focus()", sel)
        choose(d, row["envelope"], "2027")
        wait_for(d, lambda: import_idle(d), "the preview with the chosen envelope")
        error = by_id(d, "import-commit").find_element(By.CSS_SELECTOR, "[data-error]").get_property("textContent")
        check(error == "", f"the envelope's preview failed: {error}")
        check(focused_id(d) == row["envelope"], f"focus after a new preview is on {focused_id(d)}")
    rows = import_rows(d)
    check([r["action"] for r in rows] == ["deposit", "withdraw", "withdraw"], f"after the choices: {rows}")
    check(all(r["chosen"].strip().startswith("2027 (") for r in rows[1:]), f"the envelopes shown: {rows}")
    check("A commit makes 1 deposit and 2 withdrawals, net +192.66." in text(d, "imp-summary"), text(d, "imp-summary"))
    check(node_balance(d, "2027") == "100.00", "a preview moved money")
    total_before = money_of(text(d, "t-balance"))
    # Commit by keyboard: the debits come out of 2027, the credit flows down from Main.
    by_id(d, "imp-commit-btn").send_keys(Keys.ENTER)
    wait_for(d, lambda: text(d, "imp-h") == "Imported", "the import committed")
    check(focused_id(d) == "imp-h", f"focus after the commit is on {focused_id(d)}")
    check(text(d, "imp-summary") == "Imported from the OFX file: 1 deposit and 2 withdrawals, net +192.66.",
          text(d, "imp-summary"))
    check([r["envelope"] for r in import_rows(d)] == ["Main", "2027", "2027"], f"applied: {import_rows(d)}")
    check(not by_id(d, "imp-commit-btn").is_displayed(), "Commit offered again after the commit")
    wait_for(d, lambda: money_of(text(d, "t-balance")) == round(total_before + 192.66, 2),
             f"total balance {total_before} + 192.66 after the import")
    wait_for(d, lambda: node_balance(d, "2027") == "42.66", "both debits paid from 2027 (100.00 - 12.34 - 45.00)")
    # The same file again: every line is a duplicate, and there is nothing to commit.
    submit(d, "import-form")
    wait_for(d, lambda: text(d, "imp-h") == "Preview", "the second preview")
    wait_for(d, lambda: [r["action"] for r in import_rows(d)] == ["duplicate"] * 3, "every line a duplicate")
    check(not by_id(d, "imp-commit-btn").is_displayed(), "Commit offered for duplicates only")
    want = "3 lines in this OFX file, nothing to import. Not imported: 3 duplicates."
    check(text(d, "imp-summary") == want, text(d, "imp-summary"))
    check(money_of(text(d, "t-balance")) == round(total_before + 192.66, 2), "a preview changed the balance")
    shot(d, "import-duplicates")

    # ---- scheduled transactions, what is coming, the forecast
    schedules_walk(d)
    shot(d, "schedules-done")

    # ---- access tokens and webhooks
    developer_walk(d)

    # ---- delete with a confirmation that says where the money goes
    select_account(d, "Food")
    food = node_balance(d, "Food")
    needs_before = float(node_balance(d, "Needs").replace(",", ""))
    check("goes back to Needs" in text(d, "delete-where"), f"delete text: {text(d, 'delete-where')!r}")
    submit(d, "delete-form")
    wait_for(d, lambda: by_id(d, "confirm").is_displayed(), "confirmation dialog")
    check(f"{food} in total, goes back to Needs" in text(d, "confirm-text"), text(d, "confirm-text"))
    shot(d, "delete-confirm")
    by_id(d, "confirm-cancel").click()
    time.sleep(0.3)
    check(node(d, "Food") is not None, "Cancel deleted the account")
    check(focused_id(d) == "delete-form", f"focus after Cancel is on {focused_id(d)}")
    submit(d, "delete-form")
    wait_for(d, lambda: by_id(d, "confirm").is_displayed(), "confirmation dialog again")
    by_id(d, "confirm-ok").click()
    wait_notice(d, r"Deleted Food; its money went to Needs\.", "delete-form")
    wait_for(d, lambda: node(d, "Food") is None, "Food gone")
    want_needs = needs_before + float(food.replace(",", ""))
    check(float(node_balance(d, "Needs").replace(",", "")) == want_needs, "Food's money went back to Needs")
    check(text(d, "acct-name") == "Needs", "the parent is selected after a delete")
    shot(d, "desktop")

    # ---- keyboard: a tree toggle and an account button work with Enter
    press(d, "Needs", ".toggle", Keys.ENTER)
    wait_for(d, lambda: node(d, "Rent") is None, "Needs collapsed by keyboard")
    press(d, "Needs", ".toggle", Keys.ENTER)
    wait_for(d, lambda: node(d, "Rent") is not None, "Needs expanded by keyboard")
    press(d, "Rent", ".acc-name", Keys.ENTER)
    wait_for(d, lambda: text(d, "acct-name") == "Rent", "Rent selected by keyboard")

    # ---- phone width: nothing wider than the screen, a long one-word name included
    add_sub(d, "Main", LONG, "0")
    select_account(d, LONG)
    d.set_window_size(390, 844)
    time.sleep(0.4)
    overflow = d.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    wide = d.execute_script(
        "return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1"
        ").slice(0, 12).map(e => e.tagName + '#' + e.id + '.' + e.className)"
    )
    check(overflow <= 0, f"page is {overflow}px wider than a phone screen: {wide}")
    d.execute_script("window.scrollTo(0, document.getElementById('tree').offsetTop - 120)")
    d.save_screenshot(os.path.join(SHOTS, "phone-screen.png"))
    by_id(d, "developer").screenshot(os.path.join(SHOTS, "developer-phone.png"))
    shot(d, "phone")

    # ---- no token in any URL the page requested
    token = json.loads(d.execute_script("return sessionStorage.getItem('pfm.session')"))["token"]
    urls = d.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    check(urls and all(token not in u and "token=" not in u for u in urls), "a token appeared in a URL")

    # ---- the previous person's action, answered after they logged out, leaves the next alone
    req = urllib.request.Request(
        BASE + "/register", method="POST", data=json.dumps({"user_id": "bob_web", "password": PASSWORD}).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).read()
    slow = {"offline": False, "latency": 1200, "downloadThroughput": -1, "uploadThroughput": -1}
    d.execute_cdp_cmd("Network.enable", {})
    d.execute_cdp_cmd("Network.emulateNetworkConditions", slow)
    choose(d, "dep-acc", "Main")
    fill(d, "dep-amount", "1")
    submit(d, "deposit-form")
    by_id(d, "logout").click()
    fill(d, "login-user", "bob_web")
    by_id(d, "login-pass").send_keys(PASSWORD + Keys.ENTER)
    wait_for(d, lambda: by_id(d, "app").is_displayed() and text(d, "who-name") == "bob_web", "the next person signed in")
    check("Pocket money" not in by_id(d, "schedules").get_property("textContent"), "the previous person's schedules shown")
    fill(d, "dep-amount", "7")
    time.sleep(4)
    check(by_id(d, "app").is_displayed(), f"the next person was signed out: {text(d, 'notice')!r}")
    check(by_id(d, "dep-amount").get_property("value") == "7", "the next person's typing was wiped")
    d.execute_cdp_cmd("Network.emulateNetworkConditions", dict(slow, latency=0))
    by_id(d, "logout").click()
    fill(d, "login-user", USER)
    by_id(d, "login-pass").send_keys(PASSWORD + Keys.ENTER)
    wait_for(d, lambda: by_id(d, "app").is_displayed() and text(d, "who-name") == USER, "signed in as the first person")

    # ---- a deposit with no answer keeps its Idempotency-Key for the retry, across a reload
    slot = "pfm.pending/deposit"
    choose(d, "dep-acc", "Main")
    fill(d, "dep-amount", "3")
    d.execute_cdp_cmd("Network.emulateNetworkConditions", dict(slow, offline=True, latency=0))
    submit(d, "deposit-form")
    wait_for(d, lambda: "Cannot reach the server" in form_error(d, "deposit-form"), "no answer")
    d.execute_cdp_cmd("Network.emulateNetworkConditions", dict(slow, latency=0))
    kept = d.execute_script("return sessionStorage.getItem(arguments[0])", slot)
    check(kept and json.loads(kept)["key"].startswith("web-"), f"no key kept: {kept!r}")
    before = text(d, "t-balance")
    d.refresh()
    wait_for(d, lambda: by_id(d, "app").is_displayed() and text(d, "t-balance") == before, "reloaded")
    check(d.execute_script("return sessionStorage.getItem(arguments[0])", slot) == kept, "the key was lost in the reload")
    # ...and across an expired session of the same person.
    d.execute_script("sessionStorage.setItem('pfm.session', JSON.stringify({token: 'expired.token.y', user: arguments[0]}))", USER)
    d.refresh()
    wait_for(d, lambda: by_id(d, "auth").is_displayed(), "the expired session ended")
    fill(d, "login-user", USER)
    by_id(d, "login-pass").send_keys(PASSWORD + Keys.ENTER)
    wait_for(d, lambda: by_id(d, "app").is_displayed() and text(d, "t-balance") == before, "signed in again")
    check(d.execute_script("return sessionStorage.getItem(arguments[0])", slot) == kept, "the key was lost with the session")
    choose(d, "dep-acc", "Main")
    fill(d, "dep-amount", "3")
    submit(d, "deposit-form")
    wait_notice(d, r"Deposited 3\.00 into Main", "deposit-form")
    check(d.execute_script("return sessionStorage.getItem(arguments[0])", slot) is None, "the key outlived its answer")

    # ---- deleting Main deletes the user, and the page says so
    d.set_window_size(1280, 900)
    select_account(d, "Main")
    submit(d, "delete-form")
    wait_for(d, lambda: by_id(d, "confirm").is_displayed(), "confirmation for Main")
    check(f'deletes your user "{USER}"' in text(d, "confirm-text"), text(d, "confirm-text"))
    by_id(d, "confirm-ok").click()
    wait_for(d, lambda: by_id(d, "auth").is_displayed(), "signed out after deleting the user")
    wait_for(d, lambda: f"Account for user_id '{USER}' deleted successfully." in text(d, "notice"), "deletion notice")

    # ---- a token the server no longer accepts sends the person back to the log-in form
    d.execute_script("sessionStorage.setItem('pfm.session', JSON.stringify({token: 'expired.token.x', user: 'x'}))")
    d.refresh()
    wait_for(d, lambda: by_id(d, "auth").is_displayed(), "log-in form after a rejected token")
    wait_for(d, lambda: "session has ended" in text(d, "notice"), "session-ended notice")
    check(d.execute_script("return sessionStorage.getItem('pfm.session')") is None, "rejected token kept")
    # The same token again at once meets the failed-authentication backoff (429): as dead.
    d.execute_script("sessionStorage.setItem('pfm.session', JSON.stringify({token: 'expired.token.x', user: 'x'}))")
    d.refresh()
    wait_for(d, lambda: by_id(d, "auth").is_displayed(), "log-in form after a token in backoff")
    wait_for(d, lambda: "session has ended" in text(d, "notice"), "session-ended notice after the backoff")

    # ---- the console: no errors except the deliberate 4xx answers
    bad, seen = [], set()
    for entry in d.get_log("browser"):
        msg = entry.get("message", "")
        if "Content Security Policy" in msg or "Refused to" in msg:
            bad.append(entry)
        elif entry.get("level") == "SEVERE":
            hit = [p for p in EXPECTED_NETWORK_ERRORS if p.search(msg)]
            if entry.get("source") == "network" and hit:
                seen.update(p.pattern for p in hit)
                continue
            bad.append(entry)
    check(not bad, f"console errors: {bad}")
    # The deliberate failures must show up, or the log capture itself is broken.
    missing = [p.pattern for p in EXPECTED_NETWORK_ERRORS if p.pattern not in seen]
    check(not missing, f"console log did not capture the expected entries: {missing}")


def main():
    os.makedirs(SHOTS, exist_ok=True)
    signal.alarm(180)  # never hang CI
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    profile = tempfile.mkdtemp(prefix="pfm-chromium-")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--lang=en-US",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    d = webdriver.Chrome(options=opts, service=service)
    # Far from UTC, where a page working in UTC dates shows the wrong day and month.
    d.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Pacific/Auckland"})
    try:
        run(d)
    except Exception:
        try:
            shot(d, "FAILED")
        except Exception:
            pass
        raise
    finally:
        d.quit()
    print("browser test passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
