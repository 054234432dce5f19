// pfm web page: scheduled transactions, what is coming, and the forecast (docs/web.md,
// docs/schedules.md). Loaded before app.js, which calls `PfmSchedules(helpers)` with its own API
// client, form wiring and session state, so both files follow the same rules: user text only
// through textContent, answers of an older session dropped.
'use strict';

window.PfmSchedules = function (h) {
  const { $, api, ApiError, el, money, state } = h;
  const SVG = 'http://www.w3.org/2000/svg';
  const STATES = { scheduled: 'scheduled', due: 'due: waits for approval', posted: 'posted', skipped: 'skipped', failed: 'failed' };
  const WEEKDAYS = { mon: 'Monday', tue: 'Tuesday', wed: 'Wednesday', thu: 'Thursday', fri: 'Friday', sat: 'Saturday', sun: 'Sunday' };
  const NTH = { 1: '1st', 2: '2nd', 3: '3rd', 4: '4th', 5: '5th', '-1': 'last' };

  const s = {
    list: [], // GET /schedules
    byId: new Map(),
    seq: 0,
    fcSeq: 0,
    fc: null, // the forecast shown: {answer, uuid}
    // An action of the lists is on its way, or its lists are not redrawn yet: a second press
    // of a button already used would act on the schedule's following occurrence.
    busy: false,
    loadFailed: false,
  };

  // An account's name as the tree has it (the answer's name when the tree does not know it).
  function accName(uuid, given) {
    const e = state.nodes.get(uuid);
    return e ? e.node.name : given || String(uuid);
  }

  // `YYYY-MM-DD` plus `n` days, in the API's (UTC) calendar.
  function addDays(day, n) {
    const t = Date.parse(day + 'T00:00:00Z') + n * 86400000;
    return new Date(t).toISOString().slice(0, 10);
  }

  // ---------------------------------------------------------------- the form

  // Shows the fields that the chosen type, unit, day rule and end need; hidden ones are not
  // sent (see onSubmit in app.js).
  function syncForm() {
    const pick = { type: $('sc-type').value, unit: $('sc-unit').value, on: $('sc-on').value, end: $('sc-end').value };
    for (const box of $('sched-form').querySelectorAll('[data-for-type], [data-for-unit], [data-for-on], [data-for-end]')) {
      let show = true;
      for (const k of Object.keys(pick)) {
        const want = box.dataset['for' + k[0].toUpperCase() + k.slice(1)];
        if (want !== undefined && !want.split(' ').includes(pick[k])) show = false;
      }
      box.hidden = !show;
    }
  }

  function wire() {
    const form = $('sched-form');
    for (const ev of ['change', 'input']) form.addEventListener(ev, syncForm);
    form.addEventListener('reset', () => setTimeout(syncForm, 0));
    syncForm();
    h.onSubmit(form, async (v, f, alive) => {
      // "The last day of the month" is a month day of its own; the first day's day is the
      // API's default, so nothing is sent for it.
      if ($('sc-on').value === 'last' && !$('sc-on').closest('[hidden]')) v.month_day = 'last';
      const r = await api('POST', '/create_schedule', v);
      if (!alive()) return '';
      for (const id of ['sc-name', 'sc-amount']) $(id).value = '';
      h.reload();
      const sc = r.schedule || {};
      const next = sc.next ? ' Next: ' + sc.next.date + ' (' + (STATES[sc.next.state] || sc.next.state) + ').' : '';
      return 'Created the schedule ' + (sc.name || v.name) + '.' + next;
    });
    $('up-days').addEventListener('change', () => load());
    $('fc-days').addEventListener('change', () => loadForecast());
    // Buttons of the two tables, one listener each (the rows are redrawn on every load).
    $('up-table').addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-act]');
      if (b) act(b);
    });
    $('sl-table').addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-act]');
      if (b) act(b);
    });
    let resizeTimer = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        if (s.fc) drawForecast(s.fc.answer, s.fc.uuid);
      }, 150);
    });
  }

  // ---------------------------------------------------------------- lists

  // Loads the schedules and what is coming, and shows them. Only the latest call shows its
  // answer, and none from an older session.
  async function load() {
    const gen = state.gen;
    const seq = ++s.seq;
    const days = $('up-days').value;
    let list, up;
    try {
      [list, up] = await Promise.all([api('GET', '/schedules'), api('GET', '/upcoming', { days })]);
    } catch (e) {
      if (gen === state.gen && seq === s.seq) {
        $('up-error').textContent = e.message;
        s.loadFailed = true;
        s.busy = false;
      }
      return;
    }
    if (gen !== state.gen || seq !== s.seq) return;
    s.busy = false;
    // A failed load's message goes once the lists are back (an action's refusal stays).
    if (s.loadFailed) $('up-error').textContent = '';
    s.loadFailed = false;
    s.list = list.schedules || [];
    s.byId = new Map(s.list.map((x) => [x.id, x]));
    $('up-today').textContent = up.today || '-';
    renderUpcoming(up.occurrences || []);
    renderSchedules();
    // The forecast names refused occurrences by their schedule: names may have arrived late.
    if (s.fc) renderUnapplied(s.fc.answer);
  }

  // A cell of a table that turns into a card of labelled values at phone width.
  function cell(tr, label, text, cls) {
    const td = el('td', null, cls);
    td.dataset.label = label;
    const box = el('div', text);
    td.append(box);
    tr.append(td);
    return box;
  }

  function emptyRow(body, cols, text) {
    const tr = el('tr');
    const td = el('td', text);
    td.colSpan = cols;
    tr.append(td);
    body.append(tr);
  }

  function actButton(text, act, sc, o, label) {
    const b = el('button', text, act === 'delete' ? 'danger small' : 'small');
    b.type = 'button';
    b.dataset.act = act;
    b.dataset.id = String(sc.id);
    if (o) b.dataset.n = String(o.n);
    b.setAttribute('aria-label', label);
    return b;
  }

  function whereText(o) {
    if (o.type === 'move') return accName(o.uuid, o.account_name) + ' → ' + accName(o.to_uuid, o.to_name);
    return accName(o.uuid, o.account_name);
  }

  function renderUpcoming(occs) {
    const body = $('up-table').tBodies[0];
    const focus = focusKey(body);
    body.replaceChildren();
    for (const o of occs) {
      const st = String(o.state);
      const tr = el('tr', null, 'st-' + st);
      tr.dataset.schedule = String(o.schedule);
      tr.dataset.n = String(o.n);
      tr.dataset.state = st;
      cell(tr, 'Date', o.date);
      cell(tr, 'Schedule', o.name, 'wrap');
      cell(tr, 'Account', whereText(o), 'wrap');
      const amount = Number(o.amount);
      cell(tr, 'Amount', (o.type === 'move' ? '' : amount > 0 ? '+' : '') + money(amount), 'num' + (o.type === 'move' ? '' : amount > 0 ? ' in' : ' out'));
      const state_ = cell(tr, 'State', null, 'wrap');
      state_.append(el('span', STATES[st] || st, 'state'));
      if (o.reason) state_.append(el('span', o.reason, 'why'));
      const acts = cell(tr, 'Next occurrence', null, 'acts');
      // Skip and post act on a schedule's next open occurrence only (docs/schedules.md).
      const sc = s.byId.get(o.schedule);
      if (sc && sc.next && sc.next.n === o.n && ['scheduled', 'due', 'failed'].includes(st)) {
        const what = o.name + ' on ' + o.date;
        const post = st === 'scheduled' ? 'Pay now' : 'Approve';
        acts.append(
          actButton(post, 'post', sc, o, (st === 'scheduled' ? 'Pay now, ahead of its day: ' : 'Approve: post ') + what),
          actButton('Skip', 'skip', sc, o, 'Skip ' + what),
        );
      } else {
        acts.parentElement.classList.add('none');
      }
      body.append(tr);
    }
    if (!occs.length) emptyRow(body, 6, s.list.length ? 'Nothing in these days.' : 'No schedules yet: create one below.');
    restoreFocus(body, focus);
  }

  function ruleText(sc) {
    const every = Number(sc.every) === 1 ? 'every ' + sc.unit.replace(/s$/, '') : 'every ' + sc.every + ' ' + sc.unit;
    const parts = [every];
    if (sc.nth !== null && sc.nth !== undefined) parts.push('on the ' + (NTH[sc.nth] || sc.nth) + ' ' + (WEEKDAYS[sc.weekday] || sc.weekday));
    else if (sc.month_day === 'last') parts.push('on the last day');
    else if (sc.month_day) parts.push('on day ' + sc.month_day);
    parts.push('from ' + sc.start);
    if (sc.end_after) parts.push(sc.end_after + ' times');
    if (sc.end_date) parts.push('until ' + sc.end_date);
    if (sc.weekend === 'before') parts.push('weekends: the Friday before');
    if (sc.weekend === 'after') parts.push('weekends: the Monday after');
    parts.push(sc.auto ? 'posts by itself' : 'waits for approval');
    return parts.join(', ');
  }

  function renderSchedules() {
    const body = $('sl-table').tBodies[0];
    const focus = focusKey(body);
    body.replaceChildren();
    for (const sc of s.list) {
      const tr = el('tr');
      tr.dataset.schedule = String(sc.id);
      cell(tr, 'Name', sc.name, 'wrap');
      const what = sc.type === 'deposit' ? 'deposit into ' : sc.type === 'withdraw' ? 'withdraw from ' : 'move ';
      cell(tr, 'What', what + whereText(sc.type === 'move' ? { type: 'move', uuid: sc.from_uuid, to_uuid: sc.to_uuid } : sc), 'wrap');
      cell(tr, 'Amount', money(sc.amount), 'num');
      cell(tr, 'When', ruleText(sc), 'wrap');
      cell(tr, 'Next', sc.next ? sc.next.date + ' (' + (STATES[sc.next.state] || sc.next.state) + ')' : 'ended');
      cell(tr, 'Delete', null, 'acts').append(actButton('Delete', 'delete', sc, null, 'Delete the schedule ' + sc.name));
      body.append(tr);
    }
    if (!s.list.length) emptyRow(body, 6, 'No schedules yet.');
    restoreFocus(body, focus);
  }

  // The button of `body` holding the keyboard focus, as what it does and to which schedule.
  function focusKey(body) {
    const b = body.contains(document.activeElement) ? document.activeElement : null;
    return b && b.dataset.act ? { act: b.dataset.act, id: b.dataset.id } : null;
  }

  // After a redraw, the focus goes back to the same button of the same schedule (its next
  // occurrence now), so a keyboard user can go on skipping or approving.
  // Without one (the series left the window), to the list's heading.
  function restoreFocus(body, key) {
    if (!key) return;
    const b = body.querySelector('button[data-act="' + key.act + '"][data-id="' + CSS.escape(key.id) + '"]');
    if (b) b.focus();
    else $(body.closest('table').id === 'up-table' ? 'up-h' : 'sl-h').focus();
  }

  async function act(b) {
    if (s.busy) return;
    const sc = s.byId.get(Number(b.dataset.id));
    if (!sc) return;
    const gen = state.gen;
    const msg = $('up-ok');
    const err = $('up-error');
    msg.textContent = '';
    err.textContent = '';
    const act_ = b.dataset.act;
    if (act_ === 'delete') {
      const ok = await h.confirm(
        'Delete the schedule ' + sc.name + '?',
        'Nothing more will be posted for it. What it already posted stays in the accounts.',
        'Delete',
        b,
      );
      if (!ok || gen !== state.gen) return;
    }
    s.busy = true;
    b.setAttribute('aria-disabled', 'true');
    let done = false;
    try {
      const path = { post: '/post_schedule', skip: '/skip_schedule', delete: '/delete_schedule' }[act_];
      const r = await api('POST', path, { id: sc.id });
      if (gen !== state.gen) return;
      if (act_ === 'delete') {
        msg.textContent = 'Deleted the schedule ' + sc.name + '.';
        // Its button is gone with its row.
        $('sl-h').focus();
      } else if (act_ === 'skip') {
        msg.textContent = 'Skipped ' + sc.name + ' on ' + r.skipped.date + '.';
      } else {
        const p = r.posted;
        msg.textContent = 'Posted ' + sc.name + ' of ' + p.date + ': ' + money(Math.abs(Number(p.amount))) + ' (' + p.transaction_id + ').';
      }
      done = true;
      // The totals and tree, then these lists and the forecast again; the lists are also asked
      // for at once, so the buttons come back even if the tree does not.
      h.reload();
      load();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (gen === state.gen) err.textContent = e.message;
    } finally {
      b.removeAttribute('aria-disabled');
      if (!done) s.busy = false;
    }
  }

  // ---------------------------------------------------------------- forecast

  async function loadForecast() {
    const uuid = state.selected;
    if (!uuid) return;
    const gen = state.gen;
    const seq = ++s.fcSeq;
    const days = Number($('fc-days').value);
    $('fc-error').textContent = '';
    $('fc-acc').textContent = accName(uuid);
    let r;
    try {
      r = await api('GET', '/forecast', { days, uuid });
    } catch (e) {
      if (gen === state.gen && seq === s.fcSeq) $('fc-error').textContent = e.message;
      return;
    }
    if (gen !== state.gen || seq !== s.fcSeq || uuid !== state.selected) return;
    s.fc = { answer: r, uuid };
    drawForecast(r, uuid);
    renderBills(r);
    renderUnapplied(r);
  }

  // The balance at the end of each day of the window, from the days it changes (`points`).
  function daily(acc, days0, today) {
    const out = [];
    let i = 0;
    let bal = Number(acc.balance_today);
    const pts = acc.points || [];
    for (let d = 0; d < days0; d++) {
      const day = addDays(today, d);
      while (i < pts.length && pts[i].date <= day) bal = Number(pts[i++].balance);
      out.push(bal);
    }
    return out;
  }

  function niceStep(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const k of Object.keys(attrs || {})) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }

  // Draws the selected account's projected balance, one point per day (the window's days,
  // today and the last included), and, for an account with sub-accounts, their total dashed.
  // Bills' due dates are marked (red when short), and refused occurrences below the axis.
  function drawForecast(r, uuid) {
    const box = $('fc-chart');
    const accounts = r.accounts || [];
    const acc = accounts.find((a) => a.uuid === uuid);
    if (!acc) {
      box.replaceChildren();
      $('fc-sum').textContent = '';
      return;
    }
    const n = Number(r.days) + 1;
    const days = Array.from({ length: n }, (_, d) => addDays(r.today, d));
    const own = daily(acc, n, r.today);
    let total = null;
    if (accounts.length > 1) {
      total = new Array(n).fill(0);
      for (const a of accounts) daily(a, n, r.today).forEach((v, d) => (total[d] += v));
      total = total.map((v) => Math.round(v * 100) / 100);
    }
    // A scale from zero (or the lowest balance below it) in round steps: 1, 2 or 5 times a power of ten.
    const all = own.concat(total || []);
    const step = niceStep((Math.max(...all, 0) - Math.min(...all, 0)) / 4 || 1);
    const lo = Math.floor(Math.min(...all, 0) / step) * step;
    let hi = Math.ceil(Math.max(...all, 0) / step) * step;
    if (hi <= lo) hi = lo + step;
    const W = Math.max(260, box.clientWidth || 600);
    const H = 240;
    const L = W < 420 ? 58 : 76, R = 10, T = 10, B = 40;
    const x = (d) => L + (n === 1 ? 0 : (d * (W - L - R)) / (n - 1));
    const y = (v) => T + ((hi - v) * (H - T - B)) / (hi - lo);
    const name = accName(uuid, acc.name);
    const g = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, role: 'img', class: 'fc-svg' });
    g.setAttribute('aria-label', 'Projected balance of ' + name + ' for each day from ' + days[0] + ' to ' + days[n - 1] +
      ': ' + money(own[0]) + ' today, ' + money(own[n - 1]) + ' at the end');
    for (let i = 0; lo + i * step <= hi + step / 2; i++) {
      const v = lo + i * step;
      g.append(svg('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: Math.abs(v) < step / 2 ? 'fc-zero' : 'fc-grid' }));
      g.append(svg('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'fc-label' }, money(Math.round(v * 100) / 100)));
    }
    const xt = n > 2 ? [0, Math.floor((n - 1) / 2), n - 1] : [0, n - 1];
    for (const d of [...new Set(xt)]) {
      const anchor = d === 0 ? 'start' : d === n - 1 ? 'end' : 'middle';
      g.append(svg('text', { x: x(d), y: H - B + 16, 'text-anchor': anchor, class: 'fc-label' }, days[d]));
    }
    // Bills' due dates inside the window.
    for (const b of r.bills || []) {
      const d = days.indexOf(b.due_date);
      if (d < 0) continue;
      const short = Number(b.shortfall) > 0;
      const line = svg('line', { x1: x(d), x2: x(d), y1: T, y2: H - B, class: 'fc-bill' + (short ? ' short' : '') });
      line.dataset.date = b.due_date;
      line.append(svg('title', {}, accName(b.uuid, b.name) + ' due ' + b.due_date + (short ? ': short by ' + money(b.shortfall) : ': covered')));
      g.append(line);
    }
    // Refused occurrences: a mark under the axis on their day.
    for (const u of r.unapplied || []) {
      const d = days.indexOf(u.date);
      if (d < 0) continue;
      const m = svg('path', { d: 'M' + x(d) + ' ' + (H - B + 20) + ' l-5 9 h10 z', class: 'fc-refused' });
      m.dataset.date = u.date;
      m.append(svg('title', {}, u.date + ': ' + scheduleName(u.schedule) + ' would be refused: ' + u.reason));
      g.append(m);
    }
    const path = (vals) => vals.map((v, d) => (d ? 'L' : 'M') + x(d).toFixed(1) + ' ' + y(v).toFixed(1)).join(' ');
    if (total) g.append(svg('path', { d: path(total), class: 'fc-total' }));
    g.append(svg('path', { d: path(own), class: 'fc-line' }));
    // One point per day, each with its date and balance (a tooltip, and what tests read).
    const r_ = Math.max(1, Math.min(3.5, (W - L - R) / n / 2.5));
    for (let d = 0; d < n; d++) {
      const c = svg('circle', { cx: x(d), cy: y(own[d]), r: r_, class: 'fc-pt' });
      c.dataset.date = days[d];
      c.dataset.balance = own[d].toFixed(2);
      c.append(svg('title', {}, days[d] + ': ' + money(own[d])));
      g.append(c);
    }
    box.replaceChildren(g);
    // The words for it: start, end, lowest day.
    let low = 0;
    own.forEach((v, d) => {
      if (v < own[low]) low = d;
    });
    const bills = r.bills || [];
    const short = bills.filter((b) => Number(b.shortfall) > 0).length;
    const refused = (r.unapplied || []).length;
    $('fc-sum').textContent = name + ': ' + money(own[0]) + ' at the end of today, ' + money(own[n - 1]) + ' on ' + days[n - 1] +
      '; lowest ' + money(own[low]) + ' on ' + days[low] + '.' +
      (total ? ' With its sub-accounts: ' + money(total[0]) + ' today, ' + money(total[n - 1]) + ' at the end (dashed).' : '') +
      (bills.length ? ' ' + bills.length + ' bill due date' + (bills.length === 1 ? '' : 's') + (short ? ', ' + short + ' short' : ', all covered') + '.' : '') +
      (refused ? ' ' + refused + ' occurrence' + (refused === 1 ? '' : 's') + ' would be refused.' : '') +
      ' One point per day, days in UTC.';
  }

  function scheduleName(id) {
    const sc = s.byId.get(id);
    return sc ? sc.name : 'schedule #' + id;
  }

  function renderBills(r) {
    const bills = r.bills || [];
    const body = $('fc-bills').tBodies[0];
    body.replaceChildren();
    for (const b of bills) {
      const short = Number(b.shortfall) > 0;
      const tr = el('tr', null, short ? 'short' : '');
      cell(tr, 'Due', b.due_date);
      cell(tr, 'Bill', accName(b.uuid, b.name), 'wrap');
      cell(tr, 'Needs', money(b.amount_due), 'num');
      cell(tr, 'Paid that day', money(b.paid), 'num');
      cell(tr, 'Balance', money(b.balance), 'num');
      cell(tr, 'Short by', short ? money(b.shortfall) : '-', 'num');
      body.append(tr);
    }
    $('fc-bills').hidden = !bills.length;
    $('fc-bills-h').hidden = !bills.length;
  }

  function renderUnapplied(r) {
    const list = r.unapplied || [];
    const ul = $('fc-unapplied');
    ul.replaceChildren(...list.map((u) => el('li', u.date + ': ' + scheduleName(u.schedule) + ' would be refused: ' + u.reason)));
    ul.hidden = !list.length;
    $('fc-un-h').hidden = !list.length;
  }

  // Empties everything of the session (see clearPage in app.js).
  function clear() {
    s.seq += 1;
    s.fcSeq += 1;
    s.list = [];
    s.byId = new Map();
    s.fc = null;
    s.busy = false;
    s.loadFailed = false;
    for (const id of ['up-table', 'sl-table', 'fc-bills']) $(id).tBodies[0].replaceChildren();
    for (const id of ['fc-chart', 'fc-unapplied']) $(id).replaceChildren();
    for (const id of ['up-today', 'up-error', 'up-ok', 'fc-acc', 'fc-sum', 'fc-error']) $(id).textContent = '';
    for (const id of ['fc-bills', 'fc-bills-h', 'fc-unapplied', 'fc-un-h']) $(id).hidden = true;
    setTimeout(syncForm, 0);
  }

  return { wire, load, loadForecast, clear };
};
