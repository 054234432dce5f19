// pfm web page: plain JavaScript over the JSON API (SPEC.md). No framework, no build step.
// Rules kept throughout: user-supplied text goes into the page only through textContent (never
// parsed as HTML); the token lives in sessionStorage and travels only in the Authorization header.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const SESSION_KEY = 'pfm.session';
  const TX_PAGE = 10;

  const state = {
    token: null,
    user: null,
    tree: null, // the minimal tree of the main account
    nodes: new Map(), // uuid -> {node, parent, depth}
    selected: null, // uuid
    expanded: new Set(),
    tx: { all: [], shown: [], page: 0 },
    chart: null,
    loadSeq: 0,
  };

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  // Calls one endpoint. GET parameters go in the query string; everything else as a JSON body.
  // Fails with the API's own error text.
  async function api(method, path, params) {
    const opts = { method, headers: { Accept: 'application/json' } };
    let url = path;
    if (method === 'GET') {
      const q = new URLSearchParams(params || {}).toString();
      if (q) url += '?' + q;
    } else {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(params || {});
    }
    if (state.token) opts.headers.Authorization = 'Bearer ' + state.token;
    let res;
    try {
      res = await fetch(url, opts);
    } catch (e) {
      throw new ApiError('Cannot reach the server. Check your connection and try again.', 0);
    }
    let body = null;
    try {
      body = await res.json();
    } catch (e) {
      body = null;
    }
    if (!res.ok || !body || body.success === false) {
      const msg = body && typeof body.error === 'string' ? body.error : 'Request failed (HTTP ' + res.status + ')';
      if (res.status === 401 && state.token) {
        endSession('Your session has ended. Please log in again.');
      }
      throw new ApiError(msg, res.status);
    }
    return body;
  }

  // ---------------------------------------------------------------- formatting

  const moneyFmt = new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  const money = (v) => (v === null || v === undefined || v === '' ? '-' : moneyFmt.format(Number(v)));
  const pct = (v) => (v === null || v === undefined ? '-' : (Number(v) * 100).toFixed(Number(v) * 100 % 1 ? 1 : 0) + '%');

  function isoDay(d) {
    return d.toISOString().slice(0, 10);
  }
  function today() {
    return isoDay(new Date());
  }
  function daysAgo(n) {
    const d = new Date();
    d.setUTCDate(d.getUTCDate() - n);
    return isoDay(d);
  }

  // Creates an element with text content (never HTML) and optional class.
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function setNotice(text) {
    const n = $('notice');
    n.textContent = text || '';
    n.hidden = !text;
  }

  // ---------------------------------------------------------------- session

  function saveSession() {
    sessionStorage.setItem(SESSION_KEY, JSON.stringify({ token: state.token, user: state.user }));
  }

  function startSession(token, user) {
    state.token = token;
    state.user = user;
    state.selected = null;
    state.expanded = new Set();
    saveSession();
    showApp();
    load();
  }

  function endSession(message) {
    state.token = null;
    state.user = null;
    state.tree = null;
    state.nodes = new Map();
    sessionStorage.removeItem(SESSION_KEY);
    if (state.chart) {
      state.chart.destroy();
      state.chart = null;
    }
    showAuth();
    setNotice(message || '');
  }

  function showAuth() {
    $('app').hidden = true;
    $('who').hidden = true;
    $('auth').hidden = false;
  }

  function showApp() {
    $('auth').hidden = true;
    $('app').hidden = false;
    $('who').hidden = false;
    $('who-name').textContent = state.user;
  }

  // ---------------------------------------------------------------- forms

  // Wires a form: clears its error, runs `action(values)`, shows the API's error next to it.
  function onSubmit(form, action) {
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const errorEl = form.querySelector('[data-error]');
      errorEl.textContent = '';
      const button = form.querySelector('button[type=submit]');
      const values = {};
      for (const f of form.elements) {
        if (f.name && f.value.trim() !== '') values[f.name] = f.value.trim();
      }
      button.disabled = true;
      try {
        await action(values, form);
      } catch (e) {
        if (e instanceof ApiError) {
          errorEl.textContent = e.message;
        } else {
          errorEl.textContent = 'Something went wrong in the page: ' + e.message;
          throw e;
        }
      } finally {
        button.disabled = false;
      }
    });
  }

  function clearAmounts(form) {
    for (const f of form.querySelectorAll('input[name=amount]')) f.value = '';
  }

  // ---------------------------------------------------------------- loading

  function indexTree(node, parent, depth) {
    state.nodes.set(node.account_uuid, { node, parent, depth });
    for (const child of Object.values(node.child_accounts || {})) indexTree(child, node, depth + 1);
  }

  // The account's own amount due: its subtree's due minus its children's (the minimal tree only
  // carries subtree totals).
  function ownDue(node) {
    let d = Number(node.total_due);
    for (const c of Object.values(node.child_accounts || {})) d -= Number(c.total_due);
    return Math.round(d * 100) / 100;
  }

  async function load() {
    const seq = ++state.loadSeq;
    $('load-error').textContent = '';
    const t = today();
    let r;
    try {
      r = await api('GET', '/get_minimal_tree', { n: 30, start_date: t.slice(0, 8) + '01', end_date: t });
    } catch (e) {
      if (state.token) $('load-error').textContent = e.message;
      return;
    }
    if (seq !== state.loadSeq) return;
    state.tree = r.minimal_tree;
    state.nodes = new Map();
    indexTree(state.tree, null, 0);
    if (!state.selected || !state.nodes.has(state.selected)) state.selected = state.tree.account_uuid;
    if (state.expanded.size === 0) state.expanded.add(state.tree.account_uuid);
    renderTotals();
    renderTree();
    renderSelects();
    renderAccount();
    await Promise.all([loadTransactions(), loadChart()]);
  }

  function renderTotals() {
    const m = state.tree;
    $('t-balance').textContent = money(m.total_balance);
    $('t-due').textContent = money(m.total_due);
    $('t-due30').textContent = money(m.compute_total_due_within_n_days);
    $('t-income').textContent = money(m.total_income);
    $('t-spending').textContent = money(m.spending);
  }

  // ---------------------------------------------------------------- tree

  function envelopeBar(node) {
    const fixed = Number(node.fixed_amount || 0);
    if (node.account_class !== 'GrandchildAccount' || fixed <= 0) return null;
    const balance = Number(node.balance);
    const need = ownDue(node);
    const target = Math.max(balance + Math.max(need, 0), 0.01);
    const funded = need <= 0 ? 1 : Math.min(balance / target, 1);
    const wrap = el('div', null, 'envelope');
    const bar = document.createElement('progress');
    bar.max = 100;
    bar.value = Math.round(funded * 100);
    bar.setAttribute('aria-label', node.name + ' funded');
    const label = el('span', money(balance) + ' of ' + money(target) + ' (' + Math.round(funded * 100) + '% funded)');
    label.className = 'env-text';
    wrap.append(bar, label);
    if (node.due_date) wrap.append(el('span', 'due ' + node.due_date, 'due'));
    return wrap;
  }

  function treeItem(node, depth) {
    const li = el('li');
    li.dataset.uuid = node.account_uuid;
    const row = el('div', null, 'node' + (node.account_uuid === state.selected ? ' selected' : ''));
    const kids = Object.values(node.child_accounts || {});
    if (kids.length) {
      const open = state.expanded.has(node.account_uuid);
      const t = el('button', open ? '▾' : '▸', 'toggle');
      t.type = 'button';
      t.setAttribute('aria-expanded', String(open));
      t.setAttribute('aria-label', (open ? 'Collapse ' : 'Expand ') + node.name);
      t.addEventListener('click', () => {
        if (state.expanded.has(node.account_uuid)) state.expanded.delete(node.account_uuid);
        else state.expanded.add(node.account_uuid);
        renderTree();
        focusToggle(node.account_uuid);
      });
      row.append(t);
    } else {
      row.append(el('span', '', 'toggle-space'));
    }
    const name = el('button', node.name, 'acc-name');
    name.type = 'button';
    name.setAttribute('aria-pressed', String(node.account_uuid === state.selected));
    name.addEventListener('click', () => selectAccount(node.account_uuid));
    row.append(name);

    const info = el('span', null, 'info');
    info.append(el('span', money(node.balance), 'bal'));
    if (kids.length) info.append(el('span', 'total ' + money(node.total_balance), 'tot'));
    if (depth > 0) {
      const status = node.account_status;
      info.append(el('span', status, 'status st-' + (['active', 'inactive', 'closed'].includes(status) ? status : 'other')));
      info.append(el('span', 'alloc ' + pct(node.allocation), 'alloc'));
      info.append(el('span', 'prio ' + node.priority, 'prio'));
    }
    row.append(info);
    li.append(row);
    const bar = envelopeBar(node);
    if (bar) li.append(bar);
    if (kids.length && state.expanded.has(node.account_uuid)) {
      const ul = el('ul');
      for (const k of kids) ul.append(treeItem(k, depth + 1));
      li.append(ul);
    }
    return li;
  }

  function renderTree() {
    const ul = $('tree');
    ul.replaceChildren(treeItem(state.tree, 0));
  }

  function focusToggle(uuid) {
    const li = $('tree').querySelector('li[data-uuid="' + CSS.escape(uuid) + '"] > .node > .toggle');
    if (li) li.focus();
  }

  function selectAccount(uuid) {
    state.selected = uuid;
    // Make sure the chosen account is visible: open its ancestors.
    let cur = state.nodes.get(uuid);
    while (cur && cur.parent) {
      state.expanded.add(cur.parent.account_uuid);
      cur = state.nodes.get(cur.parent.account_uuid);
    }
    renderTree();
    for (const id of ['dep-acc', 'wd-acc', 'ds-acc', 'mv-from']) $(id).value = uuid;
    renderAccount();
    const btn = $('tree').querySelector('li[data-uuid="' + CSS.escape(uuid) + '"] > .node > .acc-name');
    if (btn) btn.focus();
    loadTransactions();
    loadChart();
  }

  function renderSelects() {
    const order = [];
    const walk = (node, depth) => {
      order.push({ node, depth });
      for (const c of Object.values(node.child_accounts || {})) walk(c, depth + 1);
    };
    walk(state.tree, 0);
    for (const sel of document.querySelectorAll('select[data-accounts]')) {
      const prev = sel.value;
      sel.replaceChildren();
      for (const { node, depth } of order) {
        const o = el('option', '\u00a0\u00a0'.repeat(depth) + node.name + ' (' + money(node.balance) + ')');
        o.value = node.account_uuid;
        sel.append(o);
      }
      if (prev && state.nodes.has(prev)) sel.value = prev;
      else if (sel.id === 'mv-to') sel.value = (order.find((o) => o.node.account_uuid !== state.selected) || order[0]).node.account_uuid;
      else sel.value = state.selected;
    }
  }

  // ---------------------------------------------------------------- account panel

  function countDescendants(node) {
    let n = 0;
    for (const c of Object.values(node.child_accounts || {})) n += 1 + countDescendants(c);
    return n;
  }

  function renderAccount() {
    const entry = state.nodes.get(state.selected);
    if (!entry) return;
    const n = entry.node;
    const isMain = entry.depth === 0;
    $('acct-name').textContent = n.name;
    $('chart-acc').textContent = n.name;
    const facts = $('acct-facts');
    facts.replaceChildren();
    const fact = (k, v) => {
      const d = el('div');
      d.append(el('dt', k), el('dd', v));
      facts.append(d);
    };
    fact('Kind', n.account_class);
    fact('Balance', money(n.balance));
    fact('With sub-accounts', money(n.total_balance));
    fact('Due', money(n.total_due));
    if (!isMain) {
      fact('Status', n.account_status);
      fact('Allocation', pct(n.allocation));
      fact('Priority', String(n.priority));
      fact('Parent', n.parent_name);
    }
    if (n.account_class === 'GrandchildAccount') {
      fact('Fixed amount', money(n.fixed_amount));
      fact('Due date', n.due_date || 'none');
      fact('Type', n.account_type);
      fact('Repeats every', n.account_freq === null ? '-' : n.account_freq + ' days');
      fact('Periods', String(n.account_periods));
    }
    const isEnvelope = n.account_class === 'GrandchildAccount';
    for (const e of document.querySelectorAll('.envelope-only')) e.hidden = !isEnvelope;
    if (isEnvelope) {
      $('env-fixed').value = n.fixed_amount;
      $('env-due').value = n.due_date ? String(n.due_date).slice(0, 10) : '';
      $('env-type').value = n.account_type;
      $('env-freq').value = n.account_freq === null ? '' : n.account_freq;
    }
    for (const e of document.querySelectorAll('.child-only')) e.hidden = isMain;
    for (const e of document.querySelectorAll('.gc-only')) e.hidden = isMain;
    if (!isMain) {
      $('al-value').value = n.allocation;
      $('pr-value').value = n.priority;
      const st = $('st-value');
      st.value = ['active', 'inactive', 'closed'].includes(n.account_status) ? n.account_status : 'inactive';
    }
    for (const f of document.querySelectorAll('#account [data-error]')) f.textContent = '';
    $('delete-where').textContent = deleteText(entry);
  }

  // What deleting the selected account does to the money (SPEC 7.3).
  function deleteText(entry) {
    const n = entry.node;
    const subs = countDescendants(n);
    const total = Number(n.total_balance);
    if (entry.depth === 0) {
      return 'Deleting ' + n.name + ' deletes your user "' + state.user + '" with every account and transaction. ' +
        (total > 0 ? 'The ' + money(total) + ' still in your accounts is not moved anywhere: it leaves pfm with them. ' : '') +
        'You can register the same user id again afterwards.';
    }
    const what = subs ? n.name + ' and its ' + subs + ' sub-account' + (subs > 1 ? 's' : '') : n.name;
    const money_ = total > 0
      ? 'Their money, ' + money(total) + ' in total, goes back to ' + entry.parent.name + ' (no further distribution).'
      : 'No money is held there, so no money moves.';
    return 'Deleting removes ' + what + '. ' + money_;
  }

  // ---------------------------------------------------------------- transactions

  async function loadTransactions() {
    const uuid = state.selected;
    const body = $('tx-table').tBodies[0];
    try {
      const r = await api('GET', '/get_transactions', { uuid });
      if (uuid !== state.selected) return;
      state.tx.all = (r.transactions || []).slice().reverse(); // newest first
    } catch (e) {
      body.replaceChildren();
      const tr = el('tr');
      const td = el('td', e.message, 'error');
      td.colSpan = 7;
      tr.append(td);
      body.append(tr);
      return;
    }
    state.tx.page = 0;
    filterTransactions();
  }

  function filterTransactions() {
    const from = $('tx-from').value;
    const to = $('tx-to').value;
    state.tx.shown = state.tx.all.filter((t) => {
      const d = String(t.Date).slice(0, 10);
      return (!from || d >= from) && (!to || d <= to);
    });
    renderTransactions();
  }

  function renderTransactions() {
    const body = $('tx-table').tBodies[0];
    body.replaceChildren();
    const list = state.tx.shown;
    const pages = Math.max(1, Math.ceil(list.length / TX_PAGE));
    state.tx.page = Math.min(state.tx.page, pages - 1);
    const start = state.tx.page * TX_PAGE;
    for (const t of list.slice(start, start + TX_PAGE)) {
      const tr = el('tr', null, t.Type === 'Deposit' ? 'in' : 'out');
      tr.append(
        el('td', t.Date),
        el('td', t.Type),
        el('td', (t.Type === 'Deposit' ? '+' : '-') + money(t.Amount), 'num'),
        el('td', money(t.Balance), 'num'),
        el('td', t.Channel),
        el('td', t.By),
        el('td', t.TransactionID, 'id'),
      );
      body.append(tr);
    }
    if (!list.length) {
      const tr = el('tr');
      const td = el('td', state.tx.all.length ? 'No transactions in these dates.' : 'No transactions yet.');
      td.colSpan = 7;
      tr.append(td);
      body.append(tr);
    }
    $('tx-page').textContent = 'Page ' + (state.tx.page + 1) + ' of ' + pages + ' (' + list.length + ' transaction' + (list.length === 1 ? '' : 's') + ')';
    $('tx-prev').disabled = state.tx.page === 0;
    $('tx-next').disabled = state.tx.page >= pages - 1;
  }

  // ---------------------------------------------------------------- chart

  async function loadChart() {
    const uuid = state.selected;
    const days = Number($('chart-range').value);
    const monthly = days > 100;
    let start;
    if (monthly) {
      const d = new Date();
      d.setUTCDate(1);
      d.setUTCMonth(d.getUTCMonth() - 11);
      start = isoDay(d);
    } else {
      start = daysAgo(days - 1);
    }
    $('chart-error').textContent = '';
    let r;
    try {
      r = await api('GET', '/get_minimal_tree', { uuid, start_date: start, end_date: today(), ts_data: 'true' });
    } catch (e) {
      $('chart-error').textContent = e.message;
      return;
    }
    if (uuid !== state.selected) return;
    const series = r.minimal_tree.time_series || [];
    const buckets = new Map();
    for (const p of series) {
      const key = monthly ? p.Date.slice(0, 7) + '-01' : p.Date;
      const b = buckets.get(key) || { income: 0, spending: 0, allocated: 0 };
      b.income += Number(p.Income);
      b.spending += Number(p.Spending);
      b.allocated += Number(p.Allocated);
      buckets.set(key, b);
    }
    const xs = [], inc = [], spd = [], alc = [];
    let ti = 0, ts = 0, ta = 0;
    for (const [k, b] of buckets) {
      xs.push(Date.parse(k + 'T00:00:00Z') / 1000);
      inc.push(Math.round(b.income * 100) / 100);
      spd.push(Math.round(b.spending * 100) / 100);
      alc.push(Math.round(b.allocated * 100) / 100);
      ti += b.income;
      ts += b.spending;
      ta += b.allocated;
    }
    $('chart-sum').textContent = 'In this period: income ' + money(ti) + ', spending ' + money(ts) + ', allocated ' + money(ta) + (monthly ? ' (one point per month).' : ' (one point per day).');
    drawChart([xs, inc, spd, alc], monthly);
  }

  function chartWidth() {
    return Math.max(260, $('chart').clientWidth || 600);
  }

  function drawChart(data, monthly) {
    if (typeof uPlot === 'undefined') {
      $('chart-error').textContent = 'The chart library did not load.';
      return;
    }
    if (state.chart) state.chart.destroy();
    const bars = monthly && uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.25, 40] }) : undefined;
    const line = (label, color) => ({
      label,
      stroke: color,
      width: 2,
      paths: bars,
      fill: monthly ? color + '55' : undefined,
      value: (u, v) => (v === null || v === undefined ? '-' : money(v)),
      points: { show: !monthly },
    });
    const opts = {
      width: chartWidth(),
      height: 260,
      // Pad the time axis by half a month so the first and last monthly bars are whole.
      scales: { x: { time: true, range: monthly ? (u, min, max) => [min - 16 * 86400, max + 16 * 86400] : undefined } },
      axes: [{}, { values: (u, vals) => vals.map((v) => moneyFmt.format(v)), size: 70 }],
      series: [{ label: monthly ? 'Month' : 'Day', value: (u, v) => (v == null ? '-' : new Date(v * 1000).toISOString().slice(0, monthly ? 7 : 10)) },
        line('Income', '#1b7f3b'), line('Spending', '#c0392b'), line('Allocated', '#2463b5')],
    };
    state.chart = new uPlot(opts, data, $('chart'));
  }

  // ---------------------------------------------------------------- wiring

  function wire() {
    onSubmit($('login-form'), async (v) => {
      const r = await api('POST', '/login', { user_id: v.user_id, password: v.password || '' });
      $('login-form').reset();
      setNotice('');
      startSession(r.token, r.user_id);
    });

    onSubmit($('register-form'), async (v) => {
      state.token = null; // password mode: no Authorization header (SPEC 5.2)
      const body = { user_id: v.user_id, password: v.password || '' };
      if (v.initial_balance) body.initial_balance = v.initial_balance;
      await api('POST', '/register', body);
      const r = await api('POST', '/login', { user_id: v.user_id, password: v.password });
      $('register-form').reset();
      setNotice('Welcome, ' + r.user_id + '. Your Main account is ready.');
      startSession(r.token, r.user_id);
    });

    $('logout').addEventListener('click', () => endSession('You are logged out.'));
    $('refresh').addEventListener('click', () => load());
    $('expand-all').addEventListener('click', () => {
      for (const k of state.nodes.keys()) state.expanded.add(k);
      renderTree();
    });
    $('collapse-all').addEventListener('click', () => {
      state.expanded = new Set(state.tree ? [state.tree.account_uuid] : []);
      renderTree();
    });

    const nameOf = (uuid) => (state.nodes.get(uuid) ? state.nodes.get(uuid).node.name : uuid);

    onSubmit($('deposit-form'), async (v, f) => {
      const r = await api('POST', '/deposit', v);
      clearAmounts(f);
      setNotice('Deposited ' + money(r.amount) + ' into ' + nameOf(v.uuid) + '.');
      await load();
    });
    onSubmit($('withdraw-form'), async (v, f) => {
      await api('POST', '/withdraw', v);
      clearAmounts(f);
      setNotice('Withdrew ' + money(v.amount) + ' from ' + nameOf(v.uuid) + '.');
      await load();
    });
    onSubmit($('move-form'), async (v, f) => {
      const r = await api('POST', '/move_balance', v);
      clearAmounts(f);
      setNotice(r.message + '.');
      await load();
    });
    onSubmit($('distribute-form'), async (v, f) => {
      const r = await api('POST', '/distribute', v);
      clearAmounts(f);
      setNotice('Distributed ' + money(r.amount) + ' from ' + nameOf(v.uuid) + ' to its sub-accounts.');
      await load();
    });
    onSubmit($('add-form'), async (v, f) => {
      const body = Object.assign({ parent_uuid: state.selected }, v);
      const r = await api('POST', '/add_sub_account', body);
      f.reset();
      state.expanded.add(state.selected);
      setNotice(r.message + '.');
      await load();
    });
    onSubmit($('alloc-form'), async (v) => {
      const entry = state.nodes.get(state.selected);
      const r = await api('POST', '/set_child_allocation', {
        parent_uuid: entry.parent.account_uuid, child_name: entry.node.name, allocation: v.allocation || '',
      });
      setNotice(r.message + '.');
      await load();
    });
    onSubmit($('prio-form'), async (v) => {
      const r = await api('POST', '/set_priority', { uuid: state.selected, priority: v.priority || '' });
      setNotice(r.message + '.');
      await load();
    });
    // Saves only what changed, one setter per field; stops at the first refusal and shows it.
    onSubmit($('env-form'), async (v) => {
      const n = state.nodes.get(state.selected).node;
      const uuid = n.account_uuid;
      const done = [];
      try {
        await saveEnvelope(v, n, uuid, done);
      } finally {
        // Also after a refusal: the fields saved before it are real.
        if (done.length) await load();
      }
      setNotice(done.length ? 'Saved ' + done.join(', ') + ' for ' + n.name + '.' : 'Nothing changed for ' + n.name + '.');
    });
    async function saveEnvelope(v, n, uuid, done) {
      if ((v.fixed_amount || '') !== String(n.fixed_amount)) {
        await api('POST', '/set_fixed_amount', { uuid, fixed_amount: v.fixed_amount || '' });
        done.push('fixed amount');
      }
      const dueNow = n.due_date ? String(n.due_date).slice(0, 10) : '';
      if ((v.due_date || '') !== dueNow) {
        // No due_date at all clears it (SPEC 9.5).
        await api('POST', '/set_due_date', v.due_date ? { uuid, due_date: v.due_date } : { uuid });
        done.push('due date');
      }
      if ((v.account_type || '') !== n.account_type) {
        await api('POST', '/set_account_type', { uuid, account_type: v.account_type || '' });
        done.push('type');
      }
      const freqNow = n.account_freq === null ? '' : String(n.account_freq);
      if ((v.account_freq || '') !== freqNow) {
        await api('POST', '/set_account_freq', { uuid, account_freq: v.account_freq || '' });
        done.push('repeat period');
      }
    }
    onSubmit($('status-form'), async (v) => {
      const r = await api('POST', '/change_account_status', { uuid: state.selected, status: v.status });
      setNotice(r.message + '.');
      await load();
    });
    onSubmit($('delete-form'), async () => {
      const entry = state.nodes.get(state.selected);
      const ok = await confirmDelete(entry);
      if (!ok) return;
      const r = await api('DELETE', '/delete', { uuid: entry.node.account_uuid });
      if (entry.depth === 0) {
        endSession(r.message);
        return;
      }
      state.selected = entry.parent.account_uuid;
      setNotice(r.message);
      await load();
    });

    $('tx-filter').addEventListener('submit', (ev) => {
      ev.preventDefault();
      state.tx.page = 0;
      filterTransactions();
    });
    $('tx-clear').addEventListener('click', () => {
      $('tx-from').value = '';
      $('tx-to').value = '';
      state.tx.page = 0;
      filterTransactions();
    });
    $('tx-prev').addEventListener('click', () => {
      state.tx.page -= 1;
      renderTransactions();
    });
    $('tx-next').addEventListener('click', () => {
      state.tx.page += 1;
      renderTransactions();
    });
    $('chart-range').addEventListener('change', () => loadChart());
    let resizeTimer = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        if (state.chart) state.chart.setSize({ width: chartWidth(), height: 260 });
      }, 150);
    });
  }

  // A modal that says where the money goes; resolves true only on an explicit "Delete".
  function confirmDelete(entry) {
    const dlg = $('confirm');
    $('confirm-h').textContent = 'Delete ' + entry.node.name + '?';
    $('confirm-text').textContent = deleteText(entry);
    return new Promise((resolve) => {
      dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true });
      dlg.returnValue = 'cancel';
      dlg.showModal();
      $('confirm-cancel').focus();
    });
  }

  function init() {
    wire();
    let saved = null;
    try {
      saved = JSON.parse(sessionStorage.getItem(SESSION_KEY) || 'null');
    } catch (e) {
      saved = null;
    }
    if (saved && saved.token && saved.user) {
      state.token = saved.token;
      state.user = saved.user;
      showApp();
      load();
    } else {
      showAuth();
    }
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
