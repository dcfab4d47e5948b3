// RelayMQ management UI: the Exchanges page, an exchange's page (bindings in and out,
// bind and unbind, publish, delete), and the forms shared with the queue page
// (publish a message, add a binding, a bindings table).
'use strict';

(() => {
  const { html, set, $, get, api, seg, num, rate, link, attempt, onSubmit } = R;
  const xname = (n) => (n === '' ? '(AMQP default)' : n);

  const PROPERTIES = ['content_type', 'content_encoding', 'correlation_id', 'reply_to', 'expiration', 'message_id', 'type', 'app_id', 'priority', 'timestamp'];

  /** The publish-message form (routing key shown when `withKey`). */
  R.publishForm = (id, withKey = true) => html`<form id="${id}" class="stack">
    ${withKey ? html`<label>Routing key <input name="routing_key"></label>` : ''}
    <label>Delivery mode <select name="delivery_mode"><option value="1">1 - Non-persistent</option><option value="2">2 - Persistent</option></select></label>
    <fieldset><legend>Headers</legend>${R.argsEditor(id + '-headers', 'Add header')}</fieldset>
    <fieldset><legend>Properties</legend><div class="props">${PROPERTIES.map((p) => html`<label>${p} <input name="prop-${p}"></label>`)}</div></fieldset>
    <label>Payload <textarea name="payload" rows="4"></textarea></label>
    <label>Payload encoding <select name="payload_encoding"><option value="string">String (default)</option><option value="base64">Base64</option></select></label>
    <button type="submit">Publish message</button></form>`;

  /** The publish request of a filled publish form. */
  R.readPublish = (v, form, id) => {
    const properties = { delivery_mode: Number(v.delivery_mode) };
    const headers = R.readArgs($('#' + id + '-headers', form));
    if (Object.keys(headers).length) properties.headers = headers;
    for (const p of PROPERTIES) {
      const val = (v['prop-' + p] || '').trim();
      if (val === '') continue;
      properties[p] = p === 'priority' || p === 'timestamp' ? Number(val) : val;
    }
    return { properties, routing_key: v.routing_key || '', payload: v.payload, payload_encoding: v.payload_encoding };
  };

  /** Wires a publish form to `exchange` of `vhost`; `key` fixes the routing key. */
  R.wirePublish = (form, vhost, exchange, key) => {
    R.wireArgs($('.args', form));
    onSubmit(form, async (v) => {
      let body;
      try { body = R.readPublish(v, form, form.id); } catch (e) { R.failed(e); return; }
      if (key !== undefined) body.routing_key = key;
      const exch = exchange === '' ? 'amq.default' : exchange;
      await attempt(() => api('POST', `exchanges/${seg(vhost)}/${seg(exch)}/publish`, body),
        (r) => (r && r.routed ? 'Message published.' : 'Message published, but not routed.'));
    });
  };

  /** A bindings table; `side` is 'source' (show destinations) or 'destination'. */
  R.bindingsTable = (bindings, side, canUnbind) => R.table([
    { label: side === 'source' ? 'To' : 'From', cell: (b) => {
      if (side === 'source') {
        const page = b.destination_type === 'queue' ? 'queues' : 'exchanges';
        return html`<a href="${link(page, b.vhost, b.destination)}">${b.destination}</a> <small>(${b.destination_type})</small>`;
      }
      return b.source === '' ? html`<em>(Default exchange binding)</em>` : html`<a href="${link('exchanges', b.vhost, b.source)}">${b.source}</a>`;
    } },
    { label: 'Routing key', cell: (b) => b.routing_key },
    { label: 'Arguments', cell: (b) => (Object.keys(b.arguments || {}).length ? JSON.stringify(b.arguments) : '') },
    { label: '', cell: (b) => (canUnbind && b.source !== ''
      ? html`<button type="button" class="small" data-unbind="${b.source}" data-dtype="${b.destination_type === 'queue' ? 'q' : 'e'}" data-dest="${b.destination}" data-props="${b.properties_key}">Unbind</button>` : '') },
  ], bindings, null, 'No bindings.');

  /** Handles the Unbind buttons inside `el` for `vhost`, then calls `after`. */
  R.wireUnbind = (el, vhost, after) => el.addEventListener('click', async (ev) => {
    const b = ev.target.closest('[data-unbind]');
    if (!b) return;
    const src = b.getAttribute('data-unbind'), t = b.getAttribute('data-dtype'), d = b.getAttribute('data-dest');
    if (!R.sure(`Remove the binding from ${src} to ${d}?`)) return;
    await attempt(() => api('DELETE', `bindings/${seg(vhost)}/e/${seg(src)}/${t}/${seg(d)}/${seg(b.getAttribute('data-props'))}`), 'Binding removed.');
    after();
  });

  /** The add-binding form: from this exchange to a queue or exchange, or the reverse. */
  R.bindForm = (id, toLabel) => html`<form id="${id}" class="stack">
    <label>${toLabel} <select name="dtype"><option value="q">To queue</option><option value="e">To exchange</option></select></label>
    <label>Name <input name="dest" required></label>
    <label>Routing key <input name="routing_key"></label>
    <fieldset><legend>Arguments</legend>${R.argsEditor(id + '-args')}</fieldset>
    <button type="submit">Bind</button></form>`;

  const listColumns = [
    { label: 'Virtual host', sort: 'vhost', cell: (x) => x.vhost },
    { label: 'Name', sort: 'name', wrap: true, cell: (x) => html`<a href="${link('exchanges', x.vhost, x.name === '' ? 'amq.default' : x.name)}">${xname(x.name)}</a>` },
    { label: 'Type', sort: 'type', cell: (x) => x.type },
    { label: 'Features', cell: (x) => html`${x.durable ? html`<abbr title="durable">D</abbr> ` : ''}${x.auto_delete ? html`<abbr title="auto-delete">AD</abbr> ` : ''}${x.internal ? html`<abbr title="internal">I</abbr> ` : ''}${Object.keys(x.arguments || {}).length ? html`<abbr title="${JSON.stringify(x.arguments)}">Args</abbr>` : ''}` },
    { label: 'Message rate in', num: true, cell: (x) => rate((x.message_stats || {}).publish_in_details) },
    { label: 'Message rate out', num: true, cell: (x) => rate((x.message_stats || {}).publish_out_details) },
  ];

  async function vhostOptions(selected) {
    const vhosts = await get('vhosts?columns=name');
    return vhosts.map((v) => html`<option ${v.name === selected ? html`selected` : ''}>${v.name}</option>`);
  }
  R.vhostOptions = vhostOptions;

  R.page('exchanges', {
    title: 'Exchanges',
    async mount(main, args) {
      if (args.length >= 2) return exchangePage(main, args[0], args[1]);
      const vhost = R.store.get('vhost', '');
      set(main, html`<h1>Exchanges</h1><div id="list"></div>
        <section><h2>Add a new exchange</h2>
        <form id="add-exchange" class="stack">
          <label>Virtual host <select name="vhost">${await vhostOptions(vhost || '/')}</select></label>
          <label>Name <input name="name" required></label>
          <label>Type <select name="type"><option>direct</option><option>fanout</option><option>headers</option><option>topic</option><option>x-consistent-hash</option><option>x-delayed-message</option></select></label>
          <label>Durability <select name="durable"><option value="true">Durable</option><option value="false">Transient</option></select></label>
          <label>Auto delete <select name="auto_delete"><option value="false">No</option><option value="true">Yes</option></select></label>
          <label>Internal <select name="internal"><option value="false">No</option><option value="true">Yes</option></select></label>
          <fieldset><legend>Arguments</legend>${R.argsEditor('add-exchange-args')}
            <p class="hint">Add <button type="button" class="link" data-arg="alternate-exchange">Alternate exchange</button> | x-consistent-hash: <button type="button" class="link" data-arg="hash-header">Hash header</button> <button type="button" class="link" data-arg="hash-property">Hash property</button> | x-delayed-message: <button type="button" class="link" data-arg="x-delayed-type">Delayed type</button></p></fieldset>
          <button type="submit">Add exchange</button></form></section>`);
      const list = R.pagedList($('#list'), {
        id: 'exchanges', path: () => R.listPath('exchanges'),
        columns_def: listColumns, empty: 'No exchanges.',
      });
      const editor = $('#add-exchange-args');
      R.wireArgs(editor);
      R.wireArgShortcuts($('#add-exchange'), editor);
      onSubmit($('#add-exchange'), async (v, form) => {
        let args;
        try { args = R.readArgs(editor); } catch (e) { R.failed(e); return; }
        const body = { type: v.type, durable: v.durable === 'true', auto_delete: v.auto_delete === 'true', internal: v.internal === 'true', arguments: args };
        const ok = await attempt(() => api('PUT', `exchanges/${seg(v.vhost)}/${seg(v.name)}`, body).then(() => true), `Exchange ${v.name} added.`);
        if (ok) { form.elements.name.value = ''; R.clearArgs(editor); list.refresh(); }
      });
      await list.refresh();
      return list;
    },
  });

  async function exchangePage(main, vhost, name) {
    const x = await get(`exchanges/${seg(vhost)}/${seg(name)}`);
    const isDefault = x.name === '';
    set(main, html`<h1>Exchange <span class="name">${xname(x.name)}</span> <small>in virtual host ${vhost}</small></h1>
      <section><h2>Overview</h2><div id="x-overview"></div></section>
      <section><h2>Bindings</h2>
        ${isDefault ? html`<p>The default exchange is implicitly bound to every queue, with a routing key equal to the queue name. It is not possible to explicitly bind to, or unbind from the default exchange.</p>` : ''}
        <h3>This exchange → destinations</h3><div id="x-out"></div>
        <h3>Sources → this exchange</h3><div id="x-in"></div>
        ${isDefault ? '' : html`<h3>Add binding from this exchange</h3>${R.bindForm('bind-form', 'Destination')}`}</section>
      <details class="panel" id="p-publish"><summary>Publish message</summary>${R.publishForm('publish-form')}</details>
      ${isDefault || x.name.startsWith('amq.') ? '' : html`<details class="panel" id="p-delete"><summary>Delete this exchange</summary><button type="button" class="danger" id="delete-x">Delete</button></details>`}`);
    R.wirePublish($('#publish-form'), vhost, x.name);
    const out = $('#x-out'), into = $('#x-in');
    async function refresh() {
      const y = await get(`exchanges/${seg(vhost)}/${seg(name)}?msg_rates_age=600&msg_rates_incr=5`);
      set($('#x-overview'), html`<dl class="facts"><dt>Type</dt><dd>${y.type}</dd>
        <dt>Features</dt><dd>${y.durable ? 'durable ' : 'transient '}${y.auto_delete ? 'auto-delete ' : ''}${y.internal ? 'internal ' : ''}</dd>
        <dt>Arguments</dt><dd>${JSON.stringify(y.arguments || {})}</dd><dt>Policy</dt><dd>${y.policy || ''}</dd>
        <dt>Message rate in</dt><dd>${rate((y.message_stats || {}).publish_in_details)}</dd>
        <dt>Message rate out</dt><dd>${rate((y.message_stats || {}).publish_out_details)}</dd>
        ${y.messages_delayed === undefined ? '' : html`<dt>Messages delayed</dt><dd id="x-delayed">${y.messages_delayed}</dd>
        <dt>Next due</dt><dd>${y.next_delayed_at ? new Date(y.next_delayed_at).toISOString() : ''}</dd>`}</dl>`);
      if (isDefault) return;
      const [src, dst] = await Promise.all([
        get(`exchanges/${seg(vhost)}/${seg(name)}/bindings/source`),
        get(`exchanges/${seg(vhost)}/${seg(name)}/bindings/destination`),
      ]);
      set(out, R.bindingsTable(src, 'source', true));
      set(into, R.bindingsTable(dst, 'destination', true));
    }
    R.wireUnbind(main, vhost, refresh);
    const bind = $('#bind-form');
    if (bind) {
      R.wireArgs($('.args', bind));
      onSubmit(bind, async (v) => {
        let args;
        try { args = R.readArgs($('.args', bind)); } catch (e) { R.failed(e); return; }
        const ok = await attempt(() => api('POST', `bindings/${seg(vhost)}/e/${seg(name)}/${v.dtype}/${seg(v.dest)}`, { routing_key: v.routing_key, arguments: args }).then(() => true), 'Binding added.');
        if (ok) { bind.reset(); R.clearArgs($('.args', bind)); refresh(); }
      });
    }
    const del = $('#delete-x');
    if (del) {
      del.addEventListener('click', async () => {
        if (!R.sure(`Delete exchange ${name}?`)) return;
        const ok = await attempt(() => api('DELETE', `exchanges/${seg(vhost)}/${seg(name)}`).then(() => true), 'Exchange deleted.');
        if (ok) location.hash = '#/exchanges';
      });
    }
    await refresh();
    return { refresh };
  }
})();
