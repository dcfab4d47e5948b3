// RelayMQ management UI: the shared parts (escaping, API calls, routing, polling,
// tables, forms, formatting). Plain JavaScript, no build step; every page is a client
// of /api and nothing else (docs/ui.md).
//
// Escaping: every piece of markup is built with the `html` tagged template, which
// escapes each interpolated value unless it is itself the result of `html`. Nothing
// else ever reaches innerHTML, so a queue named `<img src=x onerror=alert(1)>` or a
// message body holding a script is shown as text. The server's
// Content-Security-Policy forbids inline scripts as a second line.
'use strict';

const R = (() => {
  const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

  /** Markup that is already escaped. */
  class Safe {
    constructor(s) { this.s = s; }
    toString() { return this.s; }
  }

  function esc(v) {
    return String(v).replace(/[&<>"'`]/g, (c) => ESCAPES[c]);
  }

  function render(v) {
    if (v instanceof Safe) return v.s;
    if (Array.isArray(v)) return v.map(render).join('');
    if (v === null || v === undefined || v === false) return '';
    return esc(v);
  }

  /** The tagged template every page builds its markup with. */
  function html(strings, ...values) {
    let out = strings[0];
    for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
    return new Safe(out);
  }

  /** Replaces the content of `el` with `markup` (the result of `html`). */
  function set(el, markup) {
    if (!el) return;
    if (!(markup instanceof Safe)) markup = html`${markup}`;
    el.innerHTML = markup.s;
  }

  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

  // ---- settings kept in the browser ------------------------------------------------
  const store = {
    get(k, d) { try { const v = localStorage.getItem('relaymq.' + k); return v === null ? d : v; } catch (e) { return d; } },
    put(k, v) { try { localStorage.setItem('relaymq.' + k, v); } catch (e) { /* private mode */ } },
  };

  // ---- the API ---------------------------------------------------------------------
  let credentials = sessionStorage.getItem('relaymq.auth');
  let whoami = null;

  class ApiError extends Error {
    constructor(status, reason, data) { super(reason); this.status = status; this.data = data; }
  }

  /**
   * Encodes one path segment (a vhost `/` is `%2F`). A segment `.` or `..` cannot be
   * sent: URL rules turn it into a path step, whatever its encoding.
   */
  const seg = (s) => {
    if (s === '.' || s === '..') {
      throw new ApiError(0, `The name "${s}" cannot be used over HTTP (URL rules read it as a path step); use relaymq-cli for it.`, null);
    }
    return encodeURIComponent(s);
  };

  /**
   * Calls the API: `method`, `path` under /api/, an optional JSON `body`. Resolves with
   * the decoded JSON (or null); rejects with an ApiError carrying the API's `reason`.
   */
  async function api(method, path, body, opts = {}) {
    const headers = { authorization: 'Basic ' + (opts.credentials || credentials) };
    const init = { method, headers, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    Object.assign(headers, opts.headers || {});
    let r;
    try {
      r = await fetch('api/' + path, init);
    } catch (e) {
      throw new ApiError(0, 'The request could not be sent or the broker did not answer: ' + e.message, null);
    }
    const text = await r.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (e) { data = text; }
    }
    if (!r.ok) {
      let reason = (data && (data.reason || data.error)) || (r.status + ' ' + r.statusText);
      // RabbitMQ's Erlang-term reasons (`["unknown","pause"]`) read as words.
      if (Array.isArray(reason)) reason = reason.join(' ');
      if (r.status === 401 && reason === 'Access refused.') {
        reason += " Your user's permissions in this virtual host do not allow it.";
      }
      // 401 `not_authorized` (or no body): the credentials no longer work (password
      // changed, user deleted); 401 `not_authorised` is a refused permission or tag,
      // shown like any other error.
      const badLogin = r.status === 401 && (!data || data.error === 'not_authorized');
      if (badLogin && !opts.credentials) logout('Logged out: the broker no longer accepts this user name and password.');
      throw new ApiError(r.status, String(reason), data);
    }
    if (opts.raw) return { data, text };
    return data;
  }

  const get = (path) => api('GET', path);

  // ---- formatting ------------------------------------------------------------------
  function num(n) {
    if (n === undefined || n === null || n === '') return '';
    if (typeof n !== 'number') return String(n);
    return n.toLocaleString('en-US');
  }
  function rate(d) {
    const r = d && typeof d.rate === 'number' ? d.rate : 0;
    return (r >= 100 ? Math.round(r) : Math.round(r * 10) / 10).toLocaleString('en-US') + '/s';
  }
  function bytes(n) {
    if (typeof n !== 'number') return '';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(n >= 100 ? 0 : 1)) + ' ' + units[i];
  }
  function duration(ms) {
    if (typeof ms !== 'number') return '';
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + 's';
    const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (d > 0) return d + 'd ' + (h % 24) + 'h';
    if (h > 0) return h + 'h ' + (m % 60) + 'm';
    return m + 'm ' + (s % 60) + 's';
  }
  /**
   * The API path of a list narrowed to the header's chosen vhost: `queues/{v}` and
   * `exchanges/{v}`, but `vhosts/{v}/connections` and `vhosts/{v}/channels` (RabbitMQ's
   * paths); the whole list for "All".
   */
  function listPath(kind) {
    const v = store.get('vhost', '');
    if (!v) return kind;
    return kind === 'connections' || kind === 'channels' ? `vhosts/${seg(v)}/${kind}` : `${kind}/${seg(v)}`;
  }

  // ---- messages to the user ----------------------------------------------------------
  let flashTimer = null;
  let flashAt = 0;
  function flash(text, kind = 'ok') {
    const el = $('#flash');
    flashAt = Date.now();
    set(el, html`<p class="flash ${kind}">${text}</p>`);
    clearTimeout(flashTimer);
    if (kind === 'ok') flashTimer = setTimeout(() => set(el, ''), 6000);
  }
  const failed = (e) => flash(e.message || String(e), 'error');

  /** Runs `action`, shows `done` (a text or a function of the result) or the API's error. */
  async function attempt(action, done) {
    try {
      const result = await action();
      if (done) flash(typeof done === 'function' ? done(result) : done);
      return result;
    } catch (e) {
      failed(e);
      return undefined;
    }
  }

  /** Asks before a destructive step. */
  const sure = (question) => window.confirm(question);

  // ---- forms -------------------------------------------------------------------------
  /** Calls `handler(values, form)` on submit, with the form's fields by name. */
  function onSubmit(form, handler) {
    if (!form) return;
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const values = {};
      for (const el of form.elements) {
        if (!el.name) continue;
        if (el.type === 'checkbox') values[el.name] = el.checked;
        else if (el.type === 'radio') { if (el.checked) values[el.name] = el.value; }
        else values[el.name] = el.value;
      }
      const button = form.querySelector('[type=submit]');
      if (button) button.disabled = true;
      try { await handler(values, form); } finally { if (button) button.disabled = false; }
    });
  }

  /** Arguments rows (name, value, type) as RabbitMQ's forms offer them. */
  function argsEditor(id, addLabel = 'Add argument') {
    return html`<div class="args" id="${id}">
      <div class="args-rows"></div>
      <button type="button" class="small" data-add-arg>${addLabel}</button>
    </div>`;
  }
  /** Empties an arguments editor back to one blank row. */
  function clearArgs(editor) {
    set($('.args-rows', editor), '');
    addArgRow(editor);
  }
  function argRow(name = '', value = '', type = 'string') {
    const opt = (t, label) => html`<option value="${t}" ${t === type ? html`selected` : ''}>${label}</option>`;
    return html`<div class="arg-row">
      <input aria-label="Argument name" name="arg-name" value="${name}" placeholder="x-…">
      <input aria-label="Argument value" name="arg-value" value="${value}">
      <select aria-label="Argument type" name="arg-type">${opt('string', 'String')}${opt('number', 'Number')}${opt('boolean', 'Boolean')}${opt('list', 'List')}</select>
      <button type="button" class="small" data-remove-arg aria-label="Remove argument">✕</button>
    </div>`;
  }
  function addArgRow(editor, name, value, type) {
    const t = document.createElement('template');
    t.innerHTML = argRow(name, value, type).s;
    $('.args-rows', editor).appendChild(t.content);
  }
  function wireArgs(editor) {
    if (!editor) return;
    editor.addEventListener('click', (ev) => {
      if (ev.target.matches('[data-add-arg]')) addArgRow(editor);
      if (ev.target.matches('[data-remove-arg]')) ev.target.closest('.arg-row').remove();
    });
    if (!$('.arg-row', editor)) addArgRow(editor);
  }
  /**
   * Makes the buttons `[data-arg]` (with `data-type`, `data-value`) inside `root` add
   * that argument to `editor`, in place of an empty first row (the "Add …" shortcuts of
   * RabbitMQ's forms).
   */
  function wireArgShortcuts(root, editor) {
    root.addEventListener('click', (ev) => {
      const a = ev.target.closest('[data-arg]');
      if (!a || !root.contains(a)) return;
      const first = $('.arg-row [name=arg-name]', editor);
      if (first && first.value === '') first.closest('.arg-row').remove();
      addArgRow(editor, a.getAttribute('data-arg'), a.getAttribute('data-value') || '', a.getAttribute('data-type') || 'string');
    });
  }

  /** The arguments object of an editor, typed; throws on a bad number or list. */
  function readArgs(editor) {
    const args = {};
    for (const row of $$('.arg-row', editor)) {
      const name = $('[name=arg-name]', row).value.trim();
      const value = $('[name=arg-value]', row).value;
      const type = $('[name=arg-type]', row).value;
      if (!name) continue;
      if (type === 'number') {
        const n = Number(value);
        if (value.trim() === '' || !Number.isFinite(n)) throw new Error(`Argument ${name}: "${value}" is not a number`);
        args[name] = n;
      } else if (type === 'boolean') {
        const b = value.trim().toLowerCase();
        if (b !== 'true' && b !== 'false') throw new Error(`Argument ${name}: "${value}" is not true or false`);
        args[name] = b === 'true';
      } else if (type === 'list') {
        // Comma-separated, or a JSON array.
        if (value.trim().startsWith('[')) {
          let list;
          try { list = JSON.parse(value); } catch (e) { throw new Error(`Argument ${name}: "${value}" is not a JSON list`); }
          if (!Array.isArray(list)) throw new Error(`Argument ${name}: "${value}" is not a list`);
          args[name] = list;
        } else {
          args[name] = value.split(',').map((s) => s.trim()).filter((s) => s);
        }
      } else {
        args[name] = value;
      }
    }
    return args;
  }

  // ---- tables ------------------------------------------------------------------------
  /**
   * A table: `columns` [{key, label, sort (server sort key or false), cell(row) → markup,
   * num (right-aligned)}], `rows`, and the current `sort` {key, reverse}; headers with a
   * sort key are buttons that call `onSort(key)`.
   */
  function table(columns, rows, sort, empty = 'Nothing to show.') {
    const head = columns.map((c) => {
      if (!c.sort) return html`<th scope="col" class="${c.num ? 'num' : ''}">${c.label}</th>`;
      const active = sort && sort.key === c.sort;
      const dir = active ? (sort.reverse ? 'descending' : 'ascending') : 'none';
      const mark = active ? (sort.reverse ? ' ▼' : ' ▲') : '';
      return html`<th scope="col" class="${c.num ? 'num' : ''}" aria-sort="${dir}"><button type="button" class="sort" data-sort="${c.sort}">${c.label}${mark}</button></th>`;
    });
    const body = rows.length === 0
      ? html`<tr><td colspan="${columns.length}" class="empty">${empty}</td></tr>`
      : rows.map((r) => html`<tr>${columns.map((c) => html`<td class="${c.num ? 'num' : ''} ${c.wrap ? 'wrap' : ''}">${c.cell(r)}</td>`)}</tr>`);
    return html`<div class="table-wrap"><table><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table></div>`;
  }

  /**
   * A server-side paged, filtered, sorted list (RabbitMQ's `page`, `page_size`, `name`,
   * `use_regex`, `sort`, `sort_reverse`): renders into `el`, re-fetching on each change
   * and on `refresh()`.
   */
  function pagedList(el, opts) {
    const key = 'list.' + opts.id;
    const state = {
      page: 1,
      page_size: Number(store.get(key + '.page_size', opts.pageSize || 100)),
      name: '',
      use_regex: false,
      sort: opts.sort || 'name',
      reverse: false,
    };
    set(el, html`<div class="list-controls">
        <label>Filter <input type="search" name="filter" placeholder="name" aria-label="Filter by name"></label>
        <label><input type="checkbox" name="regex"> Regex</label>
        <label>Page size <select name="page_size">${[20, 50, 100, 500].map((n) => html`<option ${n === state.page_size ? html`selected` : ''}>${n}</option>`)}</select></label>
        <span class="pager"></span>
      </div>
      <div class="list-body" aria-live="polite"></div>`);
    const body = $('.list-body', el);
    let timer = null;
    $('[name=filter]', el).addEventListener('input', (ev) => {
      clearTimeout(timer);
      timer = setTimeout(() => { state.name = ev.target.value; state.page = 1; refresh(); }, 250);
    });
    $('[name=regex]', el).addEventListener('change', (ev) => { state.use_regex = ev.target.checked; state.page = 1; refresh(); });
    $('[name=page_size]', el).addEventListener('change', (ev) => {
      state.page_size = Number(ev.target.value); store.put(key + '.page_size', state.page_size); state.page = 1; refresh();
    });
    el.addEventListener('click', (ev) => {
      const s = ev.target.closest('[data-sort]');
      if (s && el.contains(s)) {
        const k = s.getAttribute('data-sort');
        if (state.sort === k) state.reverse = !state.reverse; else { state.sort = k; state.reverse = false; }
        refresh();
      }
      const p = ev.target.closest('[data-page]');
      if (p && el.contains(p)) { state.page = Number(p.getAttribute('data-page')); refresh(); }
    });
    let seq = 0;
    async function refresh() {
      const mine = ++seq;
      const q = new URLSearchParams({
        page: state.page, page_size: state.page_size, name: state.name,
        use_regex: state.use_regex, sort: state.sort, sort_reverse: state.reverse,
        pagination: 'true',
      });
      if (opts.columns) q.set('columns', opts.columns);
      let data;
      try {
        data = await get(opts.path() + '?' + q.toString());
      } catch (e) {
        if (mine === seq) set(body, html`<p class="error">${e.message}</p>`);
        return;
      }
      if (mine !== seq) return;
      if (data.page_count > 0 && state.page > data.page_count) { state.page = data.page_count; refresh(); return; }
      set(body, table(opts.columns_def, data.items, { key: state.sort, reverse: state.reverse }, opts.empty));
      const pages = [];
      if (data.page_count > 1) {
        if (state.page > 1) pages.push(html`<button type="button" class="small" data-page="${state.page - 1}" aria-label="Previous page">‹</button>`);
        pages.push(html` Page ${state.page} of ${data.page_count} `);
        if (state.page < data.page_count) pages.push(html`<button type="button" class="small" data-page="${state.page + 1}" aria-label="Next page">›</button>`);
      }
      set($('.pager', el), html`${pages} <span class="count">${num(data.filtered_count)} of ${num(data.total_count)} shown</span>`);
      if (opts.after) opts.after(data);
    }
    return { refresh, state };
  }

  // ---- routing and polling ----------------------------------------------------------
  const pages = {};
  let current = null;

  /** Registers a page: `name` is the first hash segment; `def` {tab, mount(el, args)}. */
  function page(name, def) { pages[name] = def; }

  function parseHash() {
    const h = location.hash.replace(/^#\/?/, '');
    return h === '' ? ['overview'] : h.split('/').map((s) => { try { return decodeURIComponent(s); } catch (e) { return s; } });
  }

  /** The hash of a page: `link('queues', vhost, name)`. */
  const link = (...parts) => '#/' + parts.map(encodeURIComponent).join('/');

  async function route() {
    if (!credentials) { showLogin(); return; }
    const [name, ...args] = parseHash();
    const def = pages[name] || pages.overview;
    if (def.admin && !canSee(def.admin)) { location.hash = '#/overview'; return; }
    current = null;
    const main = $('#main');
    delete main.dataset.ready;
    // A message stays for the page an action led to (a delete goes to the list), not after.
    if (flashAt === 0 || Date.now() - flashAt > 3000) set($('#flash'), '');
    flashAt = 0;
    set(main, html`<p class="loading">Loading…</p>`);
    $$('#tabs a').forEach((a) => a.setAttribute('aria-current', a.dataset.tab === (def.tab || name) ? 'page' : 'false'));
    try {
      current = await def.mount(main, args);
    } catch (e) {
      set(main, html`<h1>Error</h1><p class="error">${e.message}</p>`);
    }
    document.title = 'RelayMQ: ' + (def.title || name);
    // For tests and scripts: the page of this hash is shown.
    main.dataset.ready = location.hash;
  }

  let pollTimer = null;
  function pollEvery() { return Number(store.get('poll', '5000')); }
  function schedule() {
    clearTimeout(pollTimer);
    const every = pollEvery();
    if (every <= 0 || document.hidden || !credentials) return;
    pollTimer = setTimeout(tick, every);
  }
  async function tick() {
    try {
      if (current && current.refresh) await current.refresh();
      await refreshAlarms();
    } catch (e) { /* shown by the page */ }
    schedule();
  }
  document.addEventListener('visibilitychange', () => { if (!document.hidden) tick(); else clearTimeout(pollTimer); });

  async function refreshAlarms() {
    if (!canSee('monitoring')) return;
    const nodes = await get('nodes?columns=name,mem_alarm,disk_free_alarm');
    const alarms = [];
    for (const n of nodes || []) {
      if (n.mem_alarm) alarms.push(html`<strong>Memory alarm</strong> on ${n.name}: publishers are blocked until memory use falls below the watermark. `);
      if (n.disk_free_alarm) alarms.push(html`<strong>Disk alarm</strong> on ${n.name}: publishers are blocked until free disk space rises above the limit. `);
    }
    set($('#alarms'), alarms.length ? html`<div class="alarm" role="alert">${alarms}</div>` : '');
  }

  // ---- who is logged in -------------------------------------------------------------
  function canSee(level) {
    const tags = (whoami && whoami.tags) || [];
    const has = (t) => tags.includes(t);
    if (level === 'administrator') return has('administrator');
    if (level === 'policymaker') return has('administrator') || has('policymaker');
    if (level === 'monitoring') return has('administrator') || has('monitoring');
    return true;
  }

  function showLogin(message) {
    $('#header').hidden = true;
    $('#tabs').hidden = true;
    set($('#alarms'), '');
    const main = $('#main');
    set(main, html`<section class="login">
      <h1>RelayMQ</h1>
      <form id="login-form">
        <label>Username <input name="username" autocomplete="username" required autofocus></label>
        <label>Password <input name="password" type="password" autocomplete="current-password"></label>
        <button type="submit">Login</button>
        <p class="error" id="login-error">${message || ''}</p>
      </form></section>`);
    onSubmit($('#login-form'), async (v) => {
      const token = btoa(unescape(encodeURIComponent(v.username + ':' + v.password)));
      try {
        whoami = await api('GET', 'whoami', undefined, { credentials: token });
      } catch (e) {
        set($('#login-error'), e.status === 401
          ? 'Login failed: wrong user name or password. After repeated failures, logins from this address are refused for a few seconds.'
          : e.message);
        return;
      }
      credentials = token;
      sessionStorage.setItem('relaymq.auth', token);
      await start();
    });
    const u = $('#login-form [name=username]');
    if (u) u.focus();
  }

  function logout(message) {
    credentials = null;
    whoami = null;
    sessionStorage.removeItem('relaymq.auth');
    clearTimeout(pollTimer);
    current = null;
    showLogin(message);
  }

  async function start() {
    try {
      whoami = await get('whoami');
    } catch (e) {
      if (e.status !== 401) showLogin(e.message);
      return;
    }
    $('#header').hidden = false;
    $('#tabs').hidden = false;
    set($('#who'), html`User <strong>${whoami.name}</strong>`);
    $$('#tabs [data-admin]').forEach((a) => { a.parentElement.hidden = !canSee('policymaker'); });
    try {
      const o = await get('overview?columns=cluster_name,product_version');
      set($('#cluster'), html`Cluster <strong>${o.cluster_name}</strong> · RelayMQ ${o.product_version}`);
    } catch (e) { /* shown elsewhere */ }
    if (!location.hash) location.hash = '#/overview';
    await route();
    refreshAlarms().catch(() => {});
    schedule();
  }

  function init() {
    // A refresh after an action can fail (the object went, the login changed): show it
    // rather than leave an uncaught error.
    window.addEventListener('unhandledrejection', (ev) => {
      ev.preventDefault();
      failed(ev.reason instanceof Error ? ev.reason : new Error(String(ev.reason)));
    });
    // Theme: the saved choice, else the system's.
    const theme = store.get('theme', '');
    if (theme) document.documentElement.dataset.theme = theme;
    $('#theme').addEventListener('click', () => {
      const dark = document.documentElement.dataset.theme === 'dark'
        || (!document.documentElement.dataset.theme && matchMedia('(prefers-color-scheme: dark)').matches);
      const next = dark ? 'light' : 'dark';
      document.documentElement.dataset.theme = next;
      store.put('theme', next);
    });
    const poll = $('#poll');
    poll.value = String(pollEvery());
    poll.addEventListener('change', () => { store.put('poll', poll.value); schedule(); });
    $('#logout').addEventListener('click', () => logout('Logged out.'));
    window.addEventListener('hashchange', () => { if (credentials) { route(); schedule(); } });
    if (credentials) start(); else showLogin();
  }

  return {
    html, set, esc, $, $$, store, api, get, seg, listPath, num, rate, bytes, duration,
    flash, failed, attempt, sure, onSubmit, argsEditor, wireArgs, wireArgShortcuts, readArgs, addArgRow, clearArgs,
    table, pagedList, page, link, route, canSee, init,
    user: () => whoami,
  };
})();
