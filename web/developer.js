// pfm web page: API access for programs, personal access tokens (docs/tokens.md) and webhooks
// (docs/webhooks.md). Loaded before app.js, which calls `PfmDeveloper(helpers)` with its own API
// client, form wiring and session state, like schedules.js: user text only through textContent,
// answers of an older session dropped. A token's text and a webhook's secret are shown once, in
// the page only (never stored, never in a URL), and go when hidden or the session ends.
'use strict';

window.PfmDeveloper = function (h) {
  const { $, api, ApiError, el, state } = h;
  const EVENTS = ['transaction.recorded', 'account.created', 'account.changed', 'account.deleted', 'envelope.funded', 'bill.due'];
  // While a delivery shown still waits, the log is read again between these two delays.
  const POLL_MS = 1500;
  const MAX_POLL_MS = 60000;

  const s = {
    seq: 0,
    tokens: new Map(), // id -> token, from GET /tokens
    hooks: new Map(), // id -> webhook, from GET /webhooks
    wd: null, // the webhook whose deliveries are open: its id
    wdSeq: 0,
    wdTimer: null,
    busy: false,
  };

  const pad = (n) => String(n).padStart(2, '0');
  // An API time (`2025-07-10T08:50:15.000Z`, or UTC `2025-07-10 08:50:15`) in the person's own
  // calendar, `YYYY-MM-DD HH:MM`.
  function when(t) {
    if (t === null || t === undefined || t === '') return '-';
    const iso = String(t).replace(' ', 'T');
    const ms = Date.parse(/[zZ]$|[+-]\d\d:\d\d$/.test(iso) ? iso : iso + 'Z');
    if (Number.isNaN(ms)) return String(t);
    const d = new Date(ms);
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + pad(d.getHours()) + ':' + pad(d.getMinutes());
  }

  // A cell of a table that turns into a card of labelled values at phone width (as schedules.js).
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

  function actButton(text, act, id, label, extra) {
    const b = el('button', text, act === 'revoke' || act === 'delete' ? 'danger small' : 'small');
    b.type = 'button';
    b.dataset.act = act;
    b.dataset.id = String(id);
    if (extra) b.dataset.event = extra;
    b.setAttribute('aria-label', label);
    return b;
  }

  // The button of `body` holding the keyboard focus, as what it does and to what.
  function focusKey(body) {
    const b = body.contains(document.activeElement) ? document.activeElement : null;
    return b && b.dataset.act ? { act: b.dataset.act, id: b.dataset.id, event: b.dataset.event } : null;
  }

  // After a redraw the focus goes back to the same button (an enable becomes a disable), else
  // to the list's heading.
  function restoreFocus(body, key, heading) {
    if (!key) return;
    const flip = { enable: 'disable', disable: 'enable' };
    let sel = 'button[data-id="' + CSS.escape(key.id) + '"]';
    if (key.event) sel += '[data-event="' + CSS.escape(key.event) + '"]';
    const b = body.querySelector(sel + '[data-act="' + key.act + '"]') ||
      (flip[key.act] && body.querySelector(sel + '[data-act="' + flip[key.act] + '"]'));
    if (b) b.focus();
    else $(heading).focus();
  }

  // ---------------------------------------------------------------- forms

  function syncTokenForm() {
    const v = $('tk-expiry').value;
    for (const box of $('token-form').querySelectorAll('[data-for-expiry]')) box.hidden = box.dataset.forExpiry !== v;
  }

  // "all" stands for every type, those added later too: the single types are then not chosen.
  function syncEvents() {
    const all = $('wh-ev-all').checked;
    for (const c of $('wh-events').querySelectorAll('input[type=checkbox]')) {
      if (c.id !== 'wh-ev-all') c.disabled = all;
    }
  }

  // Shows a one-time text (a token, a secret) with its copy button, focus on its heading.
  function showOnce(prefix, text, what) {
    $(prefix + '-new-text').value = text;
    $(prefix + '-new-' + (prefix === 'tk' ? 'name' : 'url')).textContent = what;
    $(prefix + '-copied').textContent = '';
    $(prefix + '-new').hidden = false;
    $(prefix + '-new-h').focus();
  }

  function hideOnce(prefix) {
    $(prefix + '-new-text').value = '';
    $(prefix + '-copied').textContent = '';
    $(prefix + '-new').hidden = true;
  }

  // Copies the shown text; where the clipboard is not allowed, selects it for Ctrl+C instead.
  async function copy(button) {
    const input = $(button.dataset.copy);
    const said = $(button.id.replace('-copy', '-copied'));
    try {
      await navigator.clipboard.writeText(input.value);
      said.textContent = 'Copied to the clipboard.';
    } catch (e) {
      input.focus();
      input.select();
      said.textContent = 'The page may not use the clipboard here: the text is selected, press Ctrl+C (or ⌘C) to copy it.';
    }
  }

  function wire() {
    $('tk-expiry').addEventListener('change', syncTokenForm);
    $('token-form').addEventListener('reset', () => setTimeout(syncTokenForm, 0));
    syncTokenForm();
    h.onSubmit($('token-form'), async (v, f, alive) => {
      if (v.expires_in_days === 'date') delete v.expires_in_days;
      hideOnce('tk');
      const r = await api('POST', '/create_token', v);
      if (!alive()) return '';
      $('tk-name').value = '';
      showOnce('tk', r.token, '(' + r.name + ')');
      load();
      return 'Created the token ' + r.name + (r.expires ? ', expiring ' + when(r.expires) : ', never expiring') + '.';
    });
    $('wh-ev-all').addEventListener('change', syncEvents);
    $('webhook-form').addEventListener('reset', () => setTimeout(syncEvents, 0));
    syncEvents();
    h.onSubmit($('webhook-form'), async (v, f, alive) => {
      const chosen = $('wh-ev-all').checked
        ? ['all']
        : [...$('wh-events').querySelectorAll('input[type=checkbox]:checked')].map((c) => c.value);
      if (chosen.length) v.events = chosen.join(',');
      hideOnce('wh');
      const r = await api('POST', '/create_webhook', v);
      if (!alive()) return '';
      for (const id of ['wh-url', 'wh-desc']) $(id).value = '';
      const w = r.webhook || {};
      showOnce('wh', r.secret, '(' + w.url + ')');
      load();
      return 'Created the webhook ' + w.url + ' for ' + (w.events || []).join(', ') + '.';
    });
    for (const p of ['tk', 'wh']) {
      $(p + '-copy').addEventListener('click', (ev) => copy(ev.currentTarget));
      $(p + '-hide').addEventListener('click', () => {
        hideOnce(p);
        $(p === 'tk' ? 'tk-h' : 'wh-h').focus();
      });
    }
    for (const id of ['tk-table', 'wh-table', 'wd-table']) {
      $(id).addEventListener('click', (ev) => {
        const b = ev.target.closest('button[data-act]');
        if (b) act(b);
      });
    }
    $('wd-state').addEventListener('change', () => loadDeliveries());
    $('wd-refresh').addEventListener('click', () => loadDeliveries());
    $('wd-close').addEventListener('click', () => {
      closeDeliveries();
      $('wh-h').focus();
    });
  }

  // ---------------------------------------------------------------- lists

  // Loads the tokens and webhooks (and the open delivery log) and shows them. Only the latest
  // call shows its answer, and none from an older session.
  async function load() {
    const gen = state.gen;
    const seq = ++s.seq;
    let tk, wh;
    try {
      [tk, wh] = await Promise.all([api('GET', '/tokens'), api('GET', '/webhooks')]);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (gen === state.gen && seq === s.seq) {
        $('tk-error').textContent = e.message;
        s.busy = false;
      }
      return;
    }
    if (gen !== state.gen || seq !== s.seq) return;
    s.busy = false;
    s.tokens = new Map((tk.tokens || []).map((t) => [t.id, t]));
    s.hooks = new Map((wh.webhooks || []).map((w) => [w.id, w]));
    renderTokens();
    renderHooks();
    if (s.wd !== null) {
      if (s.hooks.has(s.wd)) loadDeliveries();
      else closeDeliveries();
    }
  }

  function scopeText(t) {
    return (t.scopes || []).includes('write') ? 'write' : 'read';
  }

  function renderTokens() {
    const body = $('tk-table').tBodies[0];
    const focus = focusKey(body);
    body.replaceChildren();
    for (const t of s.tokens.values()) {
      const tr = el('tr', null, t.expired ? 'expired' : '');
      tr.dataset.token = String(t.id);
      cell(tr, 'Name', t.name, 'wrap name');
      cell(tr, 'Scope', scopeText(t), 'scope');
      cell(tr, 'Created', when(t.created));
      cell(tr, 'Last used', t.last_used ? when(t.last_used) : 'never');
      cell(tr, 'Expires', t.expires ? when(t.expires) + (t.expired ? ' (expired)' : '') : 'never', 'wrap');
      cell(tr, 'Revoke', null, 'acts').append(actButton('Revoke', 'revoke', t.id, 'Revoke the token ' + t.name));
      body.append(tr);
    }
    if (!s.tokens.size) emptyRow(body, 6, 'No access tokens yet: create one below.');
    restoreFocus(body, focus, 'tk-h');
  }

  function hookName(w) {
    return w.description ? w.url + ' (' + w.description + ')' : w.url;
  }

  function renderHooks() {
    const body = $('wh-table').tBodies[0];
    const focus = focusKey(body);
    body.replaceChildren();
    for (const w of s.hooks.values()) {
      const tr = el('tr', null, w.enabled ? '' : 'off');
      tr.dataset.webhook = String(w.id);
      const url = cell(tr, 'URL', null, 'wrap url');
      url.append(el('span', w.url, 'hook-url'));
      if (w.description) url.append(el('span', w.description, 'why'));
      const events = (w.events || []).length === EVENTS.length ? 'all' : (w.events || []).join(', ');
      cell(tr, 'Events', events, 'wrap events');
      const st = cell(tr, 'State', null, 'wrap state');
      st.append(el('span', w.enabled ? 'enabled' : 'disabled', 'state'));
      if (!w.enabled && w.disabled_reason) st.append(el('span', w.disabled_reason, 'why'));
      if (w.failing_since) st.append(el('span', 'failing since ' + when(w.failing_since), 'why'));
      cell(tr, 'Waiting', String(w.waiting), 'num waiting');
      cell(tr, 'Failed', String(w.failed), 'num failed');
      const acts = cell(tr, 'Actions', null, 'acts');
      acts.append(
        actButton('Deliveries', 'deliveries', w.id, 'Recent deliveries of ' + w.url),
        w.enabled
          ? actButton('Disable', 'disable', w.id, 'Disable the webhook ' + w.url)
          : actButton('Enable', 'enable', w.id, 'Enable the webhook ' + w.url),
        actButton('Delete', 'delete', w.id, 'Delete the webhook ' + w.url),
      );
      body.append(tr);
    }
    if (!s.hooks.size) emptyRow(body, 6, 'No webhooks yet: create one below.');
    restoreFocus(body, focus, 'wh-h');
  }

  // ---------------------------------------------------------------- deliveries

  function closeDeliveries() {
    s.wd = null;
    s.wdSeq += 1;
    clearTimeout(s.wdTimer);
    s.wdTimer = null;
    $('wd-panel').hidden = true;
    $('wd-table').tBodies[0].replaceChildren();
    for (const id of ['wd-url', 'wd-error', 'wd-ok']) $(id).textContent = '';
  }

  async function loadDeliveries() {
    if (s.wd === null) return;
    const gen = state.gen;
    const seq = ++s.wdSeq;
    const id = s.wd;
    clearTimeout(s.wdTimer);
    s.wdTimer = null;
    const params = { id };
    if ($('wd-state').value) params.state = $('wd-state').value;
    $('wd-panel').setAttribute('aria-busy', 'true');
    let r;
    try {
      r = await api('GET', '/webhook_deliveries', params);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (gen === state.gen && seq === s.wdSeq) {
        $('wd-error').textContent = e.message;
        $('wd-panel').removeAttribute('aria-busy');
      }
      return;
    }
    if (gen !== state.gen || seq !== s.wdSeq || id !== s.wd) return;
    $('wd-panel').removeAttribute('aria-busy');
    $('wd-error').textContent = '';
    const list = r.deliveries || [];
    renderDeliveries(id, list);
    // A waiting delivery is about to be sent (or retried): read the log again soon after its
    // next attempt is due, so what becomes of it shows without a press of Refresh.
    const due = list.filter((x) => x.state === 'waiting').map((x) => Date.parse(String(x.next_attempt).replace(' ', 'T') + 'Z'));
    if (due.length) {
      const next = Math.min(...due.map((t) => (Number.isNaN(t) ? 0 : t)));
      s.wdTimer = setTimeout(loadDeliveries, Math.min(Math.max(next - Date.now() + 500, POLL_MS), MAX_POLL_MS));
    }
  }

  function attemptText(a) {
    const parts = [when(a.at)];
    parts.push(a.status === null || a.status === undefined ? 'no answer' : 'HTTP ' + a.status);
    parts.push(a.latency_ms + ' ms');
    if (a.error) parts.push(a.error);
    return parts.join(' · ');
  }

  function renderDeliveries(id, list) {
    const body = $('wd-table').tBodies[0];
    const focus = focusKey(body);
    body.replaceChildren();
    for (const x of list) {
      const tr = el('tr', null, 'st-' + x.state);
      tr.dataset.event = x.event_id;
      tr.dataset.state = x.state;
      cell(tr, 'Event', x.event_id, 'wrap event-id');
      cell(tr, 'Type', x.type);
      cell(tr, 'Created', when(x.created));
      const st = cell(tr, 'State', null, 'wrap');
      st.append(el('span', x.state, 'state'));
      if (x.next_attempt) st.append(el('span', 'next attempt ' + when(x.next_attempt), 'why'));
      const tries = cell(tr, 'Attempts', null, 'wrap');
      const ul = el('ul', null, 'attempts');
      for (const a of x.attempts || []) {
        const li = el('li', attemptText(a));
        if (a.status !== null && a.status !== undefined) li.dataset.status = String(a.status);
        li.dataset.latency = String(a.latency_ms);
        ul.append(li);
      }
      if (!(x.attempts || []).length) ul.append(el('li', 'none yet'));
      tries.append(ul);
      cell(tr, 'Redeliver', null, 'acts').append(
        actButton('Redeliver', 'redeliver', id, 'Send ' + x.type + ' ' + x.event_id + ' again', x.event_id),
      );
      body.append(tr);
    }
    if (!list.length) emptyRow(body, 6, 'No deliveries' + ($('wd-state').value ? ' in this state.' : ' yet.'));
    restoreFocus(body, focus, 'wd-h');
  }

  // ---------------------------------------------------------------- actions

  async function act(b) {
    const what = b.dataset.act;
    const id = Number(b.dataset.id);
    if (what === 'deliveries') {
      const w = s.hooks.get(id);
      if (!w) return;
      s.wd = id;
      $('wd-url').textContent = w.url;
      $('wd-panel').hidden = false;
      $('wd-ok').textContent = '';
      $('wd-table').tBodies[0].replaceChildren();
      $('wd-h').focus();
      loadDeliveries();
      return;
    }
    if (s.busy) return;
    const gen = state.gen;
    const inDeliveries = what === 'redeliver';
    const msg = $(what === 'revoke' ? 'tk-ok' : inDeliveries ? 'wd-ok' : 'wh-ok');
    const err = $(what === 'revoke' ? 'tk-error' : inDeliveries ? 'wd-error' : 'wh-error');
    for (const e of document.querySelectorAll('#developer [data-ok], #developer [data-error]')) e.textContent = '';
    const t = s.tokens.get(id);
    const w = s.hooks.get(id);
    if (what === 'revoke' ? !t : !w) return;
    if (what === 'revoke') {
      const ok = await h.confirm('Revoke the token ' + t.name + '?',
        'Whatever uses it is refused from its next request on. This cannot be undone: a new token has new text.', 'Revoke', b);
      if (!ok || gen !== state.gen) return;
    } else if (what === 'delete') {
      const ok = await h.confirm('Delete the webhook ' + w.url + '?',
        'No more events are sent to it, and its waiting deliveries and delivery log are deleted with it.', 'Delete', b);
      if (!ok || gen !== state.gen) return;
    }
    s.busy = true;
    b.setAttribute('aria-disabled', 'true');
    let done = false;
    try {
      if (what === 'revoke') {
        await api('POST', '/revoke_token', { id });
        if (gen !== state.gen) return;
        msg.textContent = 'Revoked the token ' + t.name + ': it no longer works.';
        $('tk-h').focus();
      } else if (what === 'delete') {
        await api('POST', '/delete_webhook', { id });
        if (gen !== state.gen) return;
        msg.textContent = 'Deleted the webhook ' + w.url + '.';
        if (s.wd === id) closeDeliveries();
        $('wh-h').focus();
      } else if (what === 'enable' || what === 'disable') {
        await api('POST', '/update_webhook', { id, enabled: what === 'enable' ? 'true' : 'false' });
        if (gen !== state.gen) return;
        msg.textContent = (what === 'enable' ? 'Enabled' : 'Disabled') + ' the webhook ' + w.url +
          (what === 'enable' ? ': events are sent to it again.' : ': nothing is sent until it is enabled.');
      } else if (what === 'redeliver') {
        const r = await api('POST', '/redeliver_webhook', { id, event_id: b.dataset.event });
        if (gen !== state.gen) return;
        const dl = r.delivery || {};
        msg.textContent = 'Sending ' + (dl.type || '') + ' ' + b.dataset.event + ' again now.';
      }
      done = true;
      load();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (gen === state.gen) err.textContent = e.message;
    } finally {
      b.removeAttribute('aria-disabled');
      if (!done) s.busy = false;
    }
  }

  // Empties everything of the session (see clearPage in app.js), the one-time texts first.
  function clear() {
    s.seq += 1;
    s.tokens = new Map();
    s.hooks = new Map();
    s.busy = false;
    hideOnce('tk');
    hideOnce('wh');
    closeDeliveries();
    for (const id of ['tk-table', 'wh-table']) $(id).tBodies[0].replaceChildren();
    for (const id of ['tk-error', 'tk-ok', 'wh-error', 'wh-ok']) $(id).textContent = '';
    $('wd-state').value = '';
    setTimeout(() => {
      syncTokenForm();
      syncEvents();
    }, 0);
  }

  return { wire, load, clear };
};
