// pfm web page: plain JavaScript over the JSON API (SPEC.md). No framework, no build step.
// Rules kept throughout: user-supplied text goes into the page only through textContent (never
// parsed as HTML); the token lives in sessionStorage and travels only in the Authorization header.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const SESSION_KEY = 'pfm.session';
  const PENDING = 'pfm.pending'; // + path: a money movement whose outcome is unknown
  const TX_PAGE = 10;

  const state = {
    token: null,
    user: null,
    tree: null, // the minimal tree of the main account
    nodes: new Map(), // uuid -> {node, parent, depth}
    selected: null, // uuid
    expanded: new Set(),
    tx: { all: [], shown: [], page: 0 },
    // The statement being imported: {req: what the preview sent, answer, committed}; see importCall.
    imp: null,
    impSeq: 0,
    txPages: new Map(), // uuid -> the account's log, as the API's pages (see fetchLog)
    chart: null,
    loadSeq: 0,
    txSeq: 0,
    chartSeq: 0,
    // Moves whenever a session starts or ends: an answer that arrives for an older session is
    // dropped, never shown to the next person on this tab.
    gen: 0,
  };
  // Schedules, what is coming and the forecast (schedules.js), made in init.
  let sched = null;
  // Access tokens and webhooks (developer.js), made in init.
  let dev = null;

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    // `uncertain`: no answer of the API's came back (no answer at all, a 5xx, an answer that
    // is not its JSON, "still running"), so a write may have been made.
    constructor(message, status, uncertain) {
      super(message);
      this.status = status;
      this.uncertain = Boolean(uncertain);
    }
  }

  // Calls one endpoint. GET parameters go in the query string; everything else as a JSON body.
  // Fails with the API's own error text. `extra`: more request headers. `raw`: a document sent
  // as the body as it is (a bank statement for /import), the parameters then in the query.
  async function api(method, path, params, extra, raw) {
    const opts = { method, headers: Object.assign({ Accept: 'application/json' }, extra || {}) };
    let url = path;
    if (method === 'GET' || raw !== undefined) {
      const q = new URLSearchParams(params || {}).toString();
      if (q) url += '?' + q;
    }
    if (raw !== undefined) {
      opts.headers['Content-Type'] = 'application/octet-stream';
      opts.body = raw;
    } else if (method !== 'GET') {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(params || {});
    }
    const token = state.token;
    if (token) opts.headers.Authorization = 'Bearer ' + token;
    let res;
    try {
      res = await fetch(url, opts);
    } catch (e) {
      throw new ApiError('Cannot reach the server. Check your connection and try again.', 0, true);
    }
    let body = null;
    try {
      const text = await res.text();
      // Only the tree's child order matters; logs parse faster natively.
      body = path === '/get_minimal_tree' ? parseOrdered(text) : JSON.parse(text);
    } catch (e) {
      body = null;
    }
    if (!res.ok || !body || body.success === false) {
      const msg = body && typeof body.error === 'string' ? body.error : 'Request failed (HTTP ' + res.status + ').';
      const uncertain = !body || res.status >= 500 || res.status === 409;
      // Only the session that sent the request ends: an answer for the previous person's
      // request must not log out the next one. A token refused again within the backoff
      // (SPEC 4.4) is answered 429 "Too many failed attempts", and is just as dead.
      const refused = res.status === 401 || (res.status === 429 && /^Too many failed attempts/.test(msg));
      if (refused && token && token === state.token) {
        endSession('Your session has ended. Please log in again.');
      }
      throw new ApiError(msg, res.status, uncertain);
    }
    return body;
  }

  // JSON.parse puts an object's integer-like keys ("2027", "10") before the others, and the API
  // keys children by name in their order (SPEC 10.18), which decides ties between equal
  // priorities. So answers are parsed here, keeping each object's key order under ORDER.
  const ORDER = Symbol('order');
  function parseOrdered(text) {
    let i = 0;
    const ws = () => {
      while (i < text.length && ' \t\r\n'.includes(text[i])) i++;
    };
    const fail = () => {
      throw new SyntaxError('bad JSON at ' + i);
    };
    function value() {
      ws();
      const c = text[i];
      if (c === '{') {
        i++;
        const o = {};
        const keys = [];
        Object.defineProperty(o, ORDER, { value: keys });
        items('}', () => {
          ws();
          if (text[i] !== '"') fail();
          const k = str();
          ws();
          if (text[i++] !== ':') fail();
          const v = value();
          if (!Object.prototype.hasOwnProperty.call(o, k)) keys.push(k);
          Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
        });
        return o;
      }
      if (c === '[') {
        i++;
        const a = [];
        items(']', () => a.push(value()));
        return a;
      }
      if (c === '"') return str();
      const m = /^(?:true|false|null|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)/.exec(text.slice(i, i + 64));
      if (!m) fail();
      i += m[0].length;
      return JSON.parse(m[0]);
    }
    // Reads `each` item, comma-separated, through the closing `close` (the opening is read).
    function items(close, each) {
      ws();
      if (text[i] === close) {
        i++;
        return;
      }
      for (;;) {
        each();
        ws();
        if (text[i] === ',') i++;
        else if (text[i++] === close) return;
        else fail();
      }
    }
    function str() {
      // From the opening quote to the closing one, escapes included; JSON.parse decodes it.
      const start = i++;
      while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
      if (i >= text.length) fail();
      i++;
      return JSON.parse(text.slice(start, i));
    }
    const v = value();
    ws();
    if (i !== text.length) fail();
    return v;
  }
  // An object's keys in the order the answer gave them.
  const keysOf = (o) => (o ? o[ORDER] || Object.keys(o) : []);
  const kids = (node) => keysOf(node.child_accounts).map((k) => node.child_accounts[k]);

  // ---------------------------------------------------------------- formatting

  // Amounts are shown as they are typed and as the API writes them: a dot before the cents and
  // no grouping ambiguity across languages ("1.000" is one, never a thousand).
  const moneyFmt = new Intl.NumberFormat('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  const money = (v) => (v === null || v === undefined || v === '' ? '-' : moneyFmt.format(Number(v)));
  // Allocations have up to 6 decimals (SPEC): a percentage with up to 4, without float noise.
  const pct = (v) => (v === null || v === undefined ? '-' : String(Math.round(Number(v) * 1e6) / 1e4) + '%');

  // Dates are the person's own calendar: the local day, sent with the local offset.
  const pad = (n) => String(n).padStart(2, '0');
  function localDay(d) {
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate());
  }
  function today() {
    return localDay(new Date());
  }
  // The first local instant of `d`'s day as the API reads it, `YYYY-MM-DDTHH:MM:00+HH:MM`:
  // midnight, or 01:00 where a daylight-saving change skips midnight (Santiago, Beirut).
  function midnight(d) {
    const m = new Date(d.getFullYear(), d.getMonth(), d.getDate());
    const off = -m.getTimezoneOffset();
    const sign = off < 0 ? '-' : '+';
    const a = Math.abs(off);
    return localDay(m) + 'T' + pad(m.getHours()) + ':' + pad(m.getMinutes()) + ':00' + sign + pad(Math.floor(a / 60)) + ':' + pad(a % 60);
  }
  // A `YYYY-MM-DD` picked in a date input, as local midnight.
  function pickedDay(v) {
    const [y, mo, d] = v.split('-').map(Number);
    return midnight(new Date(y, mo - 1, d));
  }
  const nowIso = () => new Date().toISOString();
  // A record's UTC `YYYY-MM-DD HH:MM:SS` as local time, `YYYY-MM-DD HH:MM`.
  function localTime(utc) {
    const t = Date.parse(String(utc).replace(' ', 'T') + 'Z');
    if (Number.isNaN(t)) return String(utc);
    const d = new Date(t);
    return localDay(d) + ' ' + pad(d.getHours()) + ':' + pad(d.getMinutes());
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
    clearPage();
    // A write of unknown outcome waits for its retry only for the same person.
    const mine = JSON.stringify([user]).slice(0, -1) + ','; // a signature's start: `["<user>",`
    dropPending((sig) => !sig.startsWith(mine));
    state.token = token;
    state.user = user;
    saveSession();
    showApp();
    // The log-in form just went away with the focus on it.
    $('totals-h').focus();
    load();
  }

  // `leaving`: the person logged out (or deleted their user); else the session merely ended
  // (an expired token), and a write of unknown outcome keeps its key for the retry.
  function endSession(message, leaving) {
    clearPage();
    if (leaving) dropPending(() => true);
    state.token = null;
    state.user = null;
    sessionStorage.removeItem(SESSION_KEY);
    showAuth();
    setNotice(message || '');
    $('login-user').focus();
  }

  // The attempt kept in sessionStorage under `slot` (see `keyed`), `{sig, key}`; null when
  // there is none or it does not read.
  function keptAt(slot) {
    try {
      const kept = JSON.parse(sessionStorage.getItem(slot) || 'null');
      return kept && typeof kept === 'object' ? kept : null;
    } catch (e) {
      return null;
    }
  }

  // Removes the kept Idempotency-Keys (see `keyed`) whose request signature `which` selects.
  function dropPending(which) {
    for (const k of Object.keys(sessionStorage)) {
      if (k.startsWith(PENDING) && which(String(keptAt(k)?.sig ?? ''))) sessionStorage.removeItem(k);
    }
  }

  // Empties everything a session showed or was typed into, so the next person on this tab sees
  // none of it, even for a moment or if their own data never arrives; answers still on their
  // way for the old session are dropped (`gen`).
  function clearPage() {
    state.gen += 1;
    state.txSeq += 1;
    state.chartSeq += 1;
    for (const b of document.querySelectorAll('[aria-disabled]')) b.removeAttribute('aria-disabled');
    state.loadSeq += 1;
    state.tree = null;
    state.nodes = new Map();
    state.selected = null;
    state.expanded = new Set();
    state.tx = { all: [], shown: [], page: 0 };
    state.txPages = new Map();
    if (state.chart) {
      state.chart.destroy();
      state.chart = null;
    }
    for (const id of ['t-balance', 't-due', 't-due30', 't-income', 't-spending']) $(id).textContent = '-';
    for (const id of ['tree', 'acct-facts', 'chart']) $(id).replaceChildren();
    for (const sel of document.querySelectorAll('select[data-accounts]')) sel.replaceChildren();
    $('tx-table').tBodies[0].replaceChildren();
    for (const id of ['acct-name', 'chart-acc', 'chart-sum', 'tx-page', 'delete-where', 'load-error', 'chart-error', 'tx-filter-error']) {
      $(id).textContent = '';
    }
    for (const f of document.querySelectorAll('#app form')) f.reset();
    for (const f of document.querySelectorAll('[data-filled]')) delete f.dataset.filled;
    for (const f of document.querySelectorAll('[aria-invalid]')) f.removeAttribute('aria-invalid');
    clearMessages(document);
    clearImport();
    $('imp-csv').open = false;
    if (sched) sched.clear();
    if (dev) dev.clear();
    setNotice('');
  }

  // Every form's error and success line under `root`.
  function clearMessages(root) {
    for (const e of root.querySelectorAll('[data-error], [data-ok]')) e.textContent = '';
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

  // Wires a form: runs `action(values, form)` and shows what came of it next to the form: the
  // message it returns, or the API's error. Hidden fields are not sent; passwords are sent as
  // typed, everything else trimmed. While it runs, further submits of the form are ignored;
  // its button stays focusable (a disabled button loses the keyboard focus to the page).
  function onSubmit(form, action) {
    const errorEl = form.querySelector('[data-error]');
    // Every field of the form is described by its error line; the field an error names is
    // marked invalid.
    errorEl.id = errorEl.id || form.id + '-error';
    const fields = [...form.elements].filter((f) => f.name);
    for (const f of fields) f.setAttribute('aria-describedby', errorEl.id);
    const okEl = el('p', null, 'ok');
    okEl.setAttribute('role', 'status');
    okEl.dataset.ok = '';
    errorEl.after(okEl);
    const button = form.querySelector('button[type=submit]');
    // The session a submit of this form is running in (another session's never blocks it).
    let busy = null;
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      if (busy === state.gen) return;
      errorEl.textContent = '';
      for (const f of fields) f.removeAttribute('aria-invalid');
      // Success lines of earlier actions, here or in other forms, would read as this one's.
      for (const e of document.querySelectorAll('[data-ok]')) e.textContent = '';
      setNotice('');
      const values = {};
      for (const f of form.elements) {
        if (!f.name || f.disabled || f.closest('[hidden]')) continue;
        let v = f.type === 'password' ? f.value : f.value.trim();
        // A number typed as the page shows them, `1,234.50`: its commas only group digits.
        if (f.inputMode === 'decimal' && /^[+-]?\d{1,3}(,\d{3})+(\.\d*)?$/.test(v)) v = v.replace(/,/g, '');
        if (v !== '') values[f.name] = v;
      }
      const gen = state.gen;
      busy = gen;
      button.setAttribute('aria-disabled', 'true');
      try {
        // `alive()`: still the session the action started in (else leave the page alone).
        const message = await action(values, form, () => gen === state.gen);
        if (message && gen === state.gen) {
          okEl.textContent = message;
          // The page may have grown or shrunk meanwhile (a deleted account's panel).
          okEl.scrollIntoView({ block: 'nearest' });
        }
      } catch (e) {
        if (e instanceof ApiError) {
          if (gen === state.gen) {
            errorEl.textContent = e.message;
            errorEl.scrollIntoView({ block: 'nearest' });
            // The field named last (a partial save names the saved ones first).
            const said = e.message.toLowerCase();
            const word = (w) => {
              const m = [...said.matchAll(new RegExp('(?:^|[^a-z_])' + w + '(?![a-z_])', 'g'))];
              return m.length ? m[m.length - 1].index : -1;
            };
            const at = (f) => Math.max(word(f.name), word(f.name.replace(/_/g, ' ')));
            const named = fields.filter((f) => at(f) >= 0).sort((a, b) => at(b) - at(a))[0];
            if (named) named.setAttribute('aria-invalid', 'true');
          }
        } else {
          errorEl.textContent = 'Something went wrong in the page: ' + e.message;
          throw e;
        }
      } finally {
        if (busy === gen) {
          busy = null;
          button.removeAttribute('aria-disabled');
        }
        if (!document.activeElement || document.activeElement === document.body) button.focus();
      }
    });
  }

  function clearAmounts(form) {
    for (const f of form.querySelectorAll('input[name=amount]')) f.value = '';
  }

  // ---------------------------------------------------------------- loading

  function indexTree(node, parent, depth) {
    state.nodes.set(node.account_uuid, { node, parent, depth });
    for (const child of kids(node)) indexTree(child, node, depth + 1);
  }

  // The account's own amount due: its subtree's due minus its children's (the minimal tree only
  // carries subtree totals).
  function ownDue(node) {
    let d = Number(node.total_due);
    for (const c of kids(node)) d -= Number(c.total_due);
    return Math.round(d * 100) / 100;
  }

  // Loads the tree and its figures (no logs: those are the selected account's alone, below) and
  // shows them; then the selected account's transactions and chart, without waiting for them.
  // `refill`: also refill the account forms' fields the person has edited.
  async function load(refill) {
    const seq = ++state.loadSeq;
    $('load-error').textContent = '';
    const now = new Date();
    let r;
    try {
      r = await api('GET', '/get_minimal_tree', {
        n: 30,
        start_date: midnight(new Date(now.getFullYear(), now.getMonth(), 1)),
        end_date: nowIso(),
        transactions: 'false',
      });
    } catch (e) {
      if (state.token && seq === state.loadSeq) $('load-error').textContent = e.message;
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
    renderAccount(refill);
    // A picked day in the future is most likely a slip: the pickers stop at today.
    for (const id of ['dep-date', 'wd-date']) $(id).max = today();
    loadTransactions();
    loadChart();
    // Only once the token has proved good: a dead one is refused once, by the tree's call.
    sched.load();
    sched.loadForecast();
    dev.load();
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
    if (node.due_date) {
      wrap.append(el('span', 'due ' + node.due_date, 'due'));
      // Past its due date and still short: the "due within 30 days" total no longer counts it.
      if (String(node.due_date).slice(0, 10) < today() && need > 0) wrap.append(el('span', 'overdue', 'overdue'));
    }
    return wrap;
  }

  function treeItem(node, depth) {
    const li = el('li');
    li.dataset.uuid = node.account_uuid;
    const row = el('div', null, 'node' + (node.account_uuid === state.selected ? ' selected' : ''));
    const children = kids(node);
    if (children.length) {
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
    if (children.length) info.append(el('span', 'total ' + money(node.total_balance), 'tot'));
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
    if (children.length && state.expanded.has(node.account_uuid)) {
      const ul = el('ul');
      for (const k of children) ul.append(treeItem(k, depth + 1));
      li.append(ul);
    }
    return li;
  }

  // Redraws the tree; the keyboard focus, if it was on a button of it, goes back to the same
  // button of the same account (a reload after an action must not drop it to the page).
  function renderTree() {
    const ul = $('tree');
    const had = ul.contains(document.activeElement) ? document.activeElement : null;
    const uuid = had && had.closest('li') ? had.closest('li').dataset.uuid : null;
    const part = had && had.classList.contains('toggle') ? '.toggle' : '.acc-name';
    ul.replaceChildren(treeItem(state.tree, 0));
    if (uuid) {
      const b = ul.querySelector('li[data-uuid="' + CSS.escape(uuid) + '"] > .node > ' + part);
      if (b) b.focus();
    }
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
    clearMessages($('account'));
    renderAccount(true);
    const btn = $('tree').querySelector('li[data-uuid="' + CSS.escape(uuid) + '"] > .node > .acc-name');
    if (btn) btn.focus();
    loadTransactions();
    loadChart();
    sched.loadForecast();
  }

  function renderSelects() {
    const order = [];
    const walk = (node, depth) => {
      order.push({ node, depth });
      for (const c of kids(node)) walk(c, depth + 1);
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
      // A statement is the main account's unless the person says otherwise.
      else if (sel.id === 'imp-acc') sel.value = state.tree.account_uuid;
      else if (sel.id === 'mv-to' || sel.id === 'sc-to') sel.value = (order.find((o) => o.node.account_uuid !== state.selected) || order[0]).node.account_uuid;
      else sel.value = state.selected;
    }
  }

  // ---------------------------------------------------------------- account panel

  function countDescendants(node) {
    let n = 0;
    for (const c of kids(node)) n += 1 + countDescendants(c);
    return n;
  }

  // Puts `value` in a form field, unless the person has edited the field since it was last
  // filled (a reload after some other action must not undo their typing) and `force` is off.
  function fill(field, value, force) {
    const v = value === null || value === undefined ? '' : String(value);
    if (force || field.dataset.filled === undefined || field.value === field.dataset.filled) field.value = v;
    field.dataset.filled = v;
  }

  function renderAccount(force) {
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
      fill($('env-fixed'), n.fixed_amount, force);
      fill($('env-due'), n.due_date ? String(n.due_date).slice(0, 10) : '', force);
      fill($('env-type'), n.account_type, force);
      fill($('env-freq'), n.account_freq, force);
    }
    for (const e of document.querySelectorAll('.child-only')) e.hidden = isMain;
    for (const e of document.querySelectorAll('.gc-only')) e.hidden = isMain;
    if (!isMain) {
      fill($('al-value'), n.allocation, force);
      fill($('pr-value'), n.priority, force);
      // A status label of the person's own (set through the API) is shown as it is.
      const st = $('st-value');
      for (const o of st.querySelectorAll('option[data-custom]')) o.remove();
      if (!['active', 'inactive', 'closed'].includes(n.account_status)) {
        const o = el('option', n.account_status + ' (current)');
        o.value = n.account_status;
        o.dataset.custom = '';
        st.append(o);
      }
      fill(st, n.account_status, force);
    }
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

  // An account's log as pages of the API (`limit`/`cursor`, in recording order), kept while
  // the session lasts: a reload asks again only from the last page on, so an action costs the
  // records written since (and at most one page already seen), not the whole history.
  const TX_API_PAGE = 1000;
  async function fetchLog(uuid) {
    const gen = state.gen;
    const cache = state.txPages.get(uuid) || [];
    let from = Math.max(cache.length - 1, 0);
    for (let tries = 0; ; tries++) {
      const pages = cache.slice(0, from);
      let cursor = from > 0 ? cache[from].cursor : null;
      try {
        for (;;) {
          const q = { uuid, limit: TX_API_PAGE };
          if (cursor) q.cursor = cursor;
          const r = await api('GET', '/get_transactions', q);
          pages.push({ cursor, records: r.transactions || [] });
          if (!r.next_cursor) break;
          cursor = r.next_cursor;
        }
        // Pages older than what the cache holds (a slower, earlier call) are not kept.
        const now = state.txPages.get(uuid) || [];
        const count = (ps) => ps.reduce((n, p) => n + p.records.length, 0);
        if (gen === state.gen && count(pages) >= count(now)) state.txPages.set(uuid, pages);
        return pages.flatMap((p) => p.records);
      } catch (e) {
        // A cursor the server no longer knows (the account was replaced): read it all again.
        if (e.status !== 400 || from === 0 || tries > 0) throw e;
        from = 0;
      }
    }
  }

  async function loadTransactions() {
    const uuid = state.selected;
    const gen = state.gen;
    // Only the latest call shows its answer: an earlier one answered late holds older records.
    const seq = ++state.txSeq;
    const body = $('tx-table').tBodies[0];
    try {
      const records = await fetchLog(uuid);
      if (uuid !== state.selected || gen !== state.gen || seq !== state.txSeq) return;
      // Newest first by date (a back-dated record sorts by its date), then latest recorded.
      const list = records.map((t, i) => ({ t, i, local: localTime(t.Date) }));
      list.sort((a, b) => (a.t.Date < b.t.Date ? 1 : a.t.Date > b.t.Date ? -1 : b.i - a.i));
      state.tx.all = list;
      // The same account again (a reload after an action) stays on its page.
      if (state.tx.uuid !== uuid) state.tx.page = 0;
      state.tx.uuid = uuid;
    } catch (e) {
      if (uuid !== state.selected || gen !== state.gen || seq !== state.txSeq) return;
      body.replaceChildren();
      const tr = el('tr');
      const td = el('td', e.message, 'error');
      td.colSpan = 7;
      tr.append(td);
      body.append(tr);
      return;
    }
    filterTransactions();
  }

  function filterTransactions() {
    const from = $('tx-from').value;
    const to = $('tx-to').value;
    $('tx-filter-error').textContent = from && to && from > to ? '"From" is after "To": no day is in between.' : '';
    state.tx.shown = state.tx.all.filter((x) => {
      const d = x.local.slice(0, 10);
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
    for (const { t, local } of list.slice(start, start + TX_PAGE)) {
      const tr = el('tr', null, t.Type === 'Deposit' ? 'in' : 'out');
      tr.append(
        el('td', local),
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

  // ---------------------------------------------------------------- import

  // import::MAX_FILE_BYTES. The server answers 413 to more, but only after the upload (or it
  // closes the connection midway, which reads as "cannot reach the server"): say it before.
  const MAX_IMPORT_BYTES = 8 * 1024 * 1024;
  const FORMAT_NAMES = { ofx: 'OFX', qfx: 'QFX', camt053: 'CAMT.053', mt940: 'MT940', csv: 'CSV' };
  const ACTION_TEXT = {
    deposit: 'deposit',
    withdraw: 'withdraw',
    duplicate: 'duplicate (imported before)',
    matched: 'matched',
    needs_attention: 'needs attention',
  };
  // Lines whose envelope the person may choose: the ones a commit applies, and the ones a
  // choice could make applicable (a debit with no envelope yet, or larger than its envelope).
  const CHOOSABLE = ['deposit', 'withdraw', 'needs_attention'];

  // Sends the statement of `req` ({bytes, uuid, mapping, envelopes}): a preview, or the commit.
  // The same bytes as the preview are committed, whatever happened to the file on disk since.
  function importCall(req, commit) {
    const q = {};
    if (req.uuid) q.uuid = req.uuid;
    if (req.mapping) q.mapping = req.mapping;
    if (Object.keys(req.envelopes).length) q.envelopes = JSON.stringify(req.envelopes);
    if (commit) q.commit = 'true';
    return api('POST', '/import', q, null, req.bytes);
  }

  // Forgets the statement: a preview no longer matching the form is never committed.
  function clearImport() {
    state.imp = null;
    state.impSeq += 1;
    $('import-commit').hidden = true;
    $('import-commit').removeAttribute('aria-busy');
    $('imp-table').tBodies[0].replaceChildren();
    $('imp-summary').textContent = '';
    clearMessages($('import-commit'));
  }

  const plural = (n, one, many) => n + ' ' + (n === 1 ? one : many);
  const signed = (v) => (Number(v) > 0 ? '+' : '') + money(v);

  function importSummary(r) {
    const s = r.summary || {};
    const n = (k) => Number(s[k] || 0);
    const what = FORMAT_NAMES[r.format] || String(r.format || '');
    const made = [plural(n('deposit'), 'deposit', 'deposits'), plural(n('withdraw'), 'withdrawal', 'withdrawals')];
    const list = (xs) => (xs.length > 1 ? xs.slice(0, -1).join(', ') + ' and ' + xs[xs.length - 1] : xs[0]);
    // Lines a commit leaves alone.
    const out = [];
    if (n('duplicate')) out.push(plural(n('duplicate'), 'duplicate', 'duplicates'));
    if (n('matched')) out.push(n('matched') + ' matched to ' + (n('matched') === 1 ? 'a transaction' : 'transactions') + ' already recorded');
    if (n('needs_attention')) out.push(n('needs_attention') + ' needing attention');
    const left = out.length ? ' Not imported: ' + list(out) + '.' : '';
    if (r.committed) {
      return 'Imported from the ' + what + ' file: ' + list(made) + ', net ' + signed(s.net_amount) + '.' + left;
    }
    const lines = plural(n('lines'), 'line', 'lines') + ' in this ' + what + ' file';
    if (n('deposit') + n('withdraw') === 0) return lines + ', nothing to import.' + left;
    return lines + '. A commit makes ' + list(made) + ', net ' + signed(s.net_amount) + '.' + left + ' Nothing has changed yet.';
  }

  // An account's name: as the answer gives it (`envelope_name`), else as the tree has it.
  function accountName(uuid, given) {
    if (given) return given;
    const e = state.nodes.get(uuid);
    return e ? e.node.name : String(uuid);
  }

  // The envelope <select> of one line: every account of the tree, and "not chosen" (the server
  // decides: an import rule, else the statement's account, else the line needs a choice).
  function envelopeSelect(line, chosen, i) {
    const sel = document.createElement('select');
    // By import id: several lines may share a line number (an OFX file written on one line).
    // Named by the row's place, which a new preview of the same file keeps (focus returns to it).
    sel.id = 'imp-env-' + i;
    sel.dataset.line = String(line.line);
    sel.dataset.importId = String(line.import_id);
    const none = el('option', '(not chosen)');
    none.value = '';
    sel.append(none);
    const walk = (node, depth) => {
      const o = el('option', '\u00a0\u00a0'.repeat(depth) + node.name + ' (' + money(node.balance) + ')');
      o.value = node.account_uuid;
      sel.append(o);
      for (const c of kids(node)) walk(c, depth + 1);
    };
    if (state.tree) walk(state.tree, 0);
    sel.value = chosen && state.nodes.has(chosen) ? chosen : '';
    const label = el('label', 'Envelope for line ' + line.line, 'visually-hidden');
    label.htmlFor = sel.id;
    return [label, sel];
  }

  function importRow(line, committed, i) {
    const action = String(line.action);
    const tr = el('tr', null, 'imp-' + action.replace(/_/g, '-'));
    tr.dataset.line = String(line.line);
    tr.dataset.action = action;
    // Each cell holds one box: at phone width a cell is a grid of its label and that box.
    const cell = (label, text, cls) => {
      const td = el('td', null, cls);
      td.dataset.label = label;
      const box = el('div', text);
      td.append(box);
      tr.append(td);
      return box;
    };
    cell('Date', line.date || '-');
    const who = cell('Payee / memo', null, 'imp-text');
    if (line.payee) who.append(el('span', line.payee, 'payee'));
    if (line.memo) who.append(el('span', line.memo, 'memo'));
    if (!line.payee && !line.memo) who.textContent = '-';
    // Money in green, out in red; a duplicate's in neither, as it moves nothing.
    const sign = action === 'duplicate' ? '' : Number(line.amount) > 0 ? ' in' : Number(line.amount) < 0 ? ' out' : '';
    cell('Amount', signed(line.amount), 'num' + sign);
    const act = cell('Action', null, 'imp-action');
    act.append(el('span', ACTION_TEXT[action] || action, 'act'));
    if (line.reason) act.append(el('span', line.reason, 'why'));
    if (line.matched) act.append(el('span', 'with ' + line.matched, 'why'));
    const env = cell('Envelope', null, 'imp-env');
    if (!committed && CHOOSABLE.includes(action)) {
      // The person's choice, else the one the answer made (an import rule's).
      const key = String(line.import_id);
      const mine = Object.prototype.hasOwnProperty.call(state.imp.req.envelopes, key);
      env.append(...envelopeSelect(line, mine ? state.imp.req.envelopes[key] : line.envelope, i));
    } else {
      // What the answer says the line went to or came from.
      env.append(el('span', line.envelope ? accountName(line.envelope, line.envelope_name) : '-'));
    }
    if (line.rule !== undefined && line.rule !== null) env.append(el('span', 'by rule ' + line.rule, 'why'));
    return tr;
  }

  // Shows an answer of /import; the keyboard focus stays on the envelope it was on.
  function renderImport(r) {
    const imp = state.imp;
    imp.answer = r;
    imp.committed = Boolean(r.committed);
    const body = $('imp-table').tBodies[0];
    const focused = body.contains(document.activeElement) ? document.activeElement.id : null;
    const rows = (r.lines || []).map((line, i) => importRow(line, imp.committed, i));
    if (!rows.length) {
      const tr = el('tr');
      const td = el('td', 'The file holds no transactions.');
      td.colSpan = 5;
      tr.append(td);
      rows.push(tr);
    }
    body.replaceChildren(...rows);
    $('imp-h').textContent = imp.committed ? 'Imported' : 'Preview';
    $('imp-summary').textContent = importSummary(r);
    const s = r.summary || {};
    $('imp-commit-btn').hidden = imp.committed || Number(s.deposit || 0) + Number(s.withdraw || 0) === 0;
    $('import-commit').hidden = false;
    if (focused && $(focused)) $(focused).focus();
  }

  // A changed envelope: preview again with every choice made so far. Only the latest answer
  // is shown, and none after a commit.
  async function repreview() {
    const imp = state.imp;
    const gen = state.gen;
    const seq = ++state.impSeq;
    const errorEl = $('import-commit').querySelector('[data-error]');
    clearMessages($('import-commit'));
    const current = () => imp === state.imp && gen === state.gen && seq === state.impSeq && !imp.committed;
    const result = $('import-commit');
    result.setAttribute('aria-busy', 'true');
    let r;
    try {
      r = await importCall(imp.req, false);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (current()) errorEl.textContent = e.message;
      return;
    } finally {
      if (seq === state.impSeq) result.removeAttribute('aria-busy');
    }
    if (current()) renderImport(r);
  }

  // ---------------------------------------------------------------- chart

  async function loadChart() {
    const uuid = state.selected;
    const gen = state.gen;
    const seq = ++state.chartSeq;
    const days = Number($('chart-range').value);
    const monthly = days > 100;
    const now = new Date();
    const start = monthly
      ? new Date(now.getFullYear(), now.getMonth() - 11, 1)
      : new Date(now.getFullYear(), now.getMonth(), now.getDate() - (days - 1));
    // The API's series is by UTC day: the range runs over the UTC days named like the local
    // ones (a 12-month chart has 12 months, a 30-day one 30 days), drawn on a UTC axis.
    $('chart-error').textContent = '';
    let r;
    try {
      r = await api('GET', '/get_minimal_tree', {
        uuid, start_date: localDay(start), end_date: localDay(now), ts_data: 'true', transactions: 'false',
      });
    } catch (e) {
      if (uuid === state.selected && gen === state.gen && seq === state.chartSeq) $('chart-error').textContent = e.message;
      return;
    }
    if (uuid !== state.selected || gen !== state.gen || seq !== state.chartSeq) return;
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
    $('chart-sum').textContent = 'In this period: income ' + money(ti) + ', spending ' + money(ts) + ', allocated ' + money(ta) + (monthly ? ' (one point per month' : ' (one point per day') + ', days in UTC).';
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
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
      width: chartWidth(),
      height: 260,
      // Pad the time axis by half a month so the first and last monthly bars are whole.
      scales: { x: { time: true, range: monthly ? (u, min, max) => [min - 16 * 86400, max + 16 * 86400] : undefined } },
      axes: [{}, { values: (u, vals) => vals.map((v) => moneyFmt.format(v)), size: 70 }],
      // Allocated is dashed: on the main account it often equals income, drawn over it.
      series: [{ label: monthly ? 'Month' : 'Day', value: (u, v) => (v == null ? '-' : new Date(v * 1000).toISOString().slice(0, monthly ? 7 : 10)) },
        line('Income', '#1b7f3b'), line('Spending', '#c0392b'), Object.assign(line('Allocated', '#2463b5'), { dash: [6, 4] })],
    };
    state.chart = new uPlot(opts, data, $('chart'));
  }

  // ---------------------------------------------------------------- wiring

  function wire() {
    // A password is required here: without one, /register would take the request as a token
    // registration and answer about a missing token.
    const needPassword = (v) => {
      if (!v.password) throw new ApiError('Password is required (8 to 128 characters).', 400);
    };
    onSubmit($('login-form'), async (v) => {
      needPassword(v);
      const r = await api('POST', '/login', { user_id: v.user_id || '', password: v.password });
      $('login-form').reset();
      startSession(r.token, r.user_id);
    });

    onSubmit($('register-form'), async (v) => {
      needPassword(v);
      state.token = null; // password mode: no Authorization header (SPEC 5.2)
      const body = { user_id: v.user_id || '', password: v.password };
      if (v.initial_balance) body.initial_balance = v.initial_balance;
      await api('POST', '/register', body);
      const r = await api('POST', '/login', { user_id: v.user_id, password: v.password });
      $('register-form').reset();
      startSession(r.token, r.user_id);
      setNotice('Welcome, ' + r.user_id + '. Your Main account is ready.');
    });

    $('logout').addEventListener('click', () => endSession('You are logged out.', true));
    $('refresh').addEventListener('click', () => {
      clearMessages($('app'));
      load();
    });
    $('expand-all').addEventListener('click', () => {
      for (const k of state.nodes.keys()) state.expanded.add(k);
      renderTree();
    });
    $('collapse-all').addEventListener('click', () => {
      state.expanded = new Set(state.tree ? [state.tree.account_uuid] : []);
      renderTree();
    });

    const nameOf = (uuid) => (state.nodes.get(uuid) ? state.nodes.get(uuid).node.name : uuid);
    // A money movement carries an Idempotency-Key: sent again after "Cannot reach the server"
    // with the same values, it is answered from the first attempt instead of moving the money
    // twice. A new key once the values change or an answer came.
    // getRandomValues, unlike randomUUID, works on plain http from another host too.
    const randomHex = (n) => Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => pad(b.toString(16))).join('');
    // The attempt whose outcome is unknown is kept in sessionStorage too, so a reload of the
    // page does not lose it (logging out does: see clearPage).
    const keyed = (path) => {
      const slot = PENDING + path;
      return async (v) => {
        const sig = JSON.stringify([state.user, v]);
        let last = keptAt(slot);
        if (!last || last.sig !== sig) last = { sig, key: 'web-' + randomHex(16) };
        sessionStorage.setItem(slot, JSON.stringify(last));
        // Only this attempt's own key is removed: a late answer must not drop a later one's.
        // (A slot that does not read is removed too.)
        const done = () => {
          const kept = keptAt(slot);
          if (!kept || kept.key === last.key) sessionStorage.removeItem(slot);
        };
        try {
          const r = await api('POST', path, v, { 'Idempotency-Key': last.key });
          done();
          return r;
        } catch (e) {
          // A refusal in the API's words changed nothing: a new attempt is a new request. An
          // uncertain outcome (a gateway's timeout among them) may hide a write that was made:
          // the same key again replays it instead of making it twice.
          if (!e.uncertain) done();
          else if (e.status !== 0) {
            e.message = e.message.replace(/\.?$/, '.') + ' It may have been made: send it again unchanged to be sure, it is never made twice.';
          }
          throw e;
        }
      };
    };
    // The date picked for a deposit or withdrawal: today is "now"; another day its local midnight.
    const dated = (v) => {
      if (v.transaction_date) {
        if (v.transaction_date === today()) delete v.transaction_date;
        else v.transaction_date = pickedDay(v.transaction_date);
      }
      return v;
    };
    const deposit = keyed('/deposit');
    const withdraw = keyed('/withdraw');
    const move = keyed('/move_balance');
    const distribute = keyed('/distribute');

    onSubmit($('deposit-form'), async (v, f, alive) => {
      const r = await deposit(dated(v));
      if (!alive()) return '';
      clearAmounts(f);
      load();
      return 'Deposited ' + money(r.amount) + ' into ' + nameOf(v.uuid) + '.';
    });
    onSubmit($('withdraw-form'), async (v, f, alive) => {
      await withdraw(dated(v));
      if (!alive()) return '';
      clearAmounts(f);
      load();
      return 'Withdrew ' + money(v.amount) + ' from ' + nameOf(v.uuid) + '.';
    });
    onSubmit($('move-form'), async (v, f, alive) => {
      await move(v);
      if (!alive()) return '';
      clearAmounts(f);
      load();
      return 'Moved ' + money(v.amount) + ' from ' + nameOf(v.from_uuid) + ' to ' + nameOf(v.to_uuid) + '.';
    });
    onSubmit($('distribute-form'), async (v, f, alive) => {
      const r = await distribute(v);
      if (!alive()) return '';
      clearAmounts(f);
      load();
      return 'Distributed ' + money(r.amount) + ' from ' + nameOf(v.uuid) + ' to its sub-accounts.';
    });
    onSubmit($('add-form'), async (v, f, alive) => {
      const body = Object.assign({ parent_uuid: state.selected }, v);
      const r = await api('POST', '/add_sub_account', body);
      if (!alive()) return '';
      f.reset();
      state.expanded.add(state.selected);
      load();
      return r.message + '.';
    });
    onSubmit($('alloc-form'), async (v, f, alive) => {
      const entry = state.nodes.get(state.selected);
      const r = await api('POST', '/set_child_allocation', {
        parent_uuid: entry.parent.account_uuid, child_name: entry.node.name, allocation: v.allocation || '',
      });
      if (!alive()) return '';
      load();
      return r.message + '.';
    });
    onSubmit($('prio-form'), async (v, f, alive) => {
      const r = await api('POST', '/set_priority', { uuid: state.selected, priority: v.priority || '' });
      if (!alive()) return '';
      load();
      return r.message + '.';
    });
    // Saves only what changed, one setter per field; an empty field is left as it is (but for
    // the due date, where empty means none). Stops at the first refusal and says what was saved.
    onSubmit($('env-form'), async (v, f, alive) => {
      const n = state.nodes.get(state.selected).node;
      const uuid = n.account_uuid;
      const done = [];
      try {
        await saveEnvelope(v, n, uuid, done);
      } catch (e) {
        if (done.length && e instanceof ApiError) {
          throw new ApiError('Saved ' + done.join(', ') + '; not saved: ' + e.message, e.status);
        }
        throw e;
      } finally {
        // Also after a refusal: the fields saved before it are real.
        if (done.length && alive()) load();
      }
      return done.length ? 'Saved ' + done.join(', ') + ' for ' + n.name + '.' : 'Nothing changed for ' + n.name + '.';
    });
    async function saveEnvelope(v, n, uuid, done) {
      if (v.fixed_amount !== undefined && Number(v.fixed_amount) !== Number(n.fixed_amount)) {
        await api('POST', '/set_fixed_amount', { uuid, fixed_amount: v.fixed_amount });
        done.push('fixed amount');
      }
      const dueNow = n.due_date ? String(n.due_date).slice(0, 10) : '';
      if ((v.due_date || '') !== dueNow) {
        // No due_date at all clears it (SPEC 9.5).
        await api('POST', '/set_due_date', v.due_date ? { uuid, due_date: v.due_date } : { uuid });
        done.push('due date');
      }
      if (v.account_type !== undefined && v.account_type !== n.account_type) {
        await api('POST', '/set_account_type', { uuid, account_type: v.account_type });
        done.push('type');
      }
      const freqNow = n.account_freq === null ? '' : String(n.account_freq);
      if (v.account_freq !== undefined && !(freqNow !== '' && Number(v.account_freq) === Number(freqNow))) {
        await api('POST', '/set_account_freq', { uuid, account_freq: v.account_freq });
        done.push('repeat period');
      }
    }
    onSubmit($('status-form'), async (v, f, alive) => {
      const r = await api('POST', '/change_account_status', { uuid: state.selected, status: v.status });
      if (!alive()) return '';
      load();
      return r.message + '.';
    });
    onSubmit($('delete-form'), async (v, f, alive) => {
      const entry = state.nodes.get(state.selected);
      const ok = await confirmDelete(entry);
      if (!ok) return '';
      const r = await api('DELETE', '/delete', { uuid: entry.node.account_uuid });
      if (!alive()) return '';
      if (entry.depth === 0) {
        endSession(r.message, true);
        return '';
      }
      state.selected = entry.parent.account_uuid;
      await load(true);
      // Under the form (now the parent's), where the person is looking.
      return 'Deleted ' + entry.node.name + '; its money went to ' + entry.parent.name + '.';
    });

    // Import: preview the chosen file, change envelopes (each change previews again), commit.
    // A change to the file, account or mapping drops the preview shown, so what is committed
    // is always what was previewed.
    for (const ev of ['input', 'change']) $('import-form').addEventListener(ev, () => clearImport());
    onSubmit($('import-form'), async (v, f, alive) => {
      clearImport();
      const seq = state.impSeq;
      const file = $('imp-file').files[0];
      if (!file) throw new ApiError('Choose a statement file first.', 400);
      if (file.size > MAX_IMPORT_BYTES) {
        throw new ApiError('The file is ' + (file.size / 1048576).toFixed(1) + ' MiB: an import takes at most 8 MiB. Export a shorter period.', 413);
      }
      const req = { bytes: await file.arrayBuffer(), uuid: v.uuid, mapping: v.mapping, envelopes: {} };
      let r;
      try {
        r = await importCall(req, false);
      } catch (e) {
        // A CSV file without a (valid) mapping: show where it goes.
        if (e instanceof ApiError && /mapping/i.test(e.message)) $('imp-csv').open = true;
        throw e;
      }
      if (!alive() || seq !== state.impSeq) return '';
      state.imp = { req, answer: r, committed: false };
      renderImport(r);
      return '';
    });
    $('imp-table').addEventListener('change', (ev) => {
      const sel = ev.target.closest('select[data-line]');
      if (!sel || !state.imp || state.imp.committed) return;
      if (sel.value) state.imp.req.envelopes[sel.dataset.importId] = sel.value;
      else delete state.imp.req.envelopes[sel.dataset.importId];
      repreview();
    });
    onSubmit($('import-commit'), async (v, f, alive) => {
      const imp = state.imp;
      if (!imp || imp.committed) return '';
      // A preview answered after the commit would show the lines as duplicates.
      state.impSeq += 1;
      f.removeAttribute('aria-busy');
      let r;
      try {
        r = await importCall(imp.req, true);
      } catch (e) {
        // Lines are never imported twice (import ids), so the answer is one preview away.
        if (e instanceof ApiError && e.uncertain) {
          e.message = e.message.replace(/\.?$/, '.') + ' It may have been imported: preview the file again to see (imported lines show as duplicates).';
        }
        throw e;
      }
      if (!alive()) return '';
      load();
      // Unless the person has moved on to another file meanwhile, show what was done.
      if (imp === state.imp) {
        renderImport(r);
        // The Commit button is gone: the focus goes to what it did.
        $('imp-h').focus();
      }
      return '';
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
    return confirmAsk('Delete ' + entry.node.name + '?', deleteText(entry), 'Delete',
      $('delete-form').querySelector('button[type=submit]'));
  }

  // A modal question; resolves true only on an explicit `ok`. The focus starts on Cancel and
  // goes back to `opener` when it closes.
  function confirmAsk(title, text, ok, opener) {
    const dlg = $('confirm');
    $('confirm-h').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = ok;
    return new Promise((resolve) => {
      dlg.addEventListener('close', () => {
        resolve(dlg.returnValue === 'ok');
        // The dialog gives the focus back to the page, not to the button that opened it.
        if (opener && opener.isConnected) opener.focus();
      }, { once: true });
      dlg.returnValue = 'cancel';
      dlg.showModal();
      $('confirm-cancel').focus();
    });
  }

  function init() {
    sched = window.PfmSchedules({ $, api, ApiError, el, money, state, onSubmit, reload: () => load(), confirm: confirmAsk });
    wire();
    sched.wire();
    dev = window.PfmDeveloper({ $, api, ApiError, el, state, onSubmit, confirm: confirmAsk });
    dev.wire();
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
