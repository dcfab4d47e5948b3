// RelayMQ management UI: the Queues page (server-side paging, filter, sort, add) and a
// queue's page: charts, consumers, bindings, publish, get messages, and what RabbitMQ's
// UI cannot do: peek, search, the unacked browser, dead-letter replay, pause/resume.
'use strict';

(() => {
  const { html, set, $, get, api, seg, num, rate, link, attempt, onSubmit } = R;

  // The arguments RabbitMQ's add-queue form offers, with their types; the fourth field
  // names the one queue type an argument is for (the other refuses it).
  const QUEUE_ARGS = [
    ['x-expires', 'Auto expire', 'number'], ['x-message-ttl', 'Message TTL', 'number'],
    ['x-overflow', 'Overflow behaviour', 'string'], ['x-single-active-consumer', 'Single active consumer', 'boolean'],
    ['x-dead-letter-exchange', 'Dead letter exchange', 'string'], ['x-dead-letter-routing-key', 'Dead letter routing key', 'string'],
    ['x-max-length', 'Max length', 'number'], ['x-max-length-bytes', 'Max length bytes', 'number'],
    ['x-max-priority', 'Maximum priority', 'number', 'classic'], ['x-delivery-limit', 'Delivery limit', 'number'],
    ['x-consumer-timeout', 'Consumer timeout', 'number'], ['x-quorum-initial-group-size', 'Initial cluster size', 'number', 'quorum'],
    ['x-dead-letter-strategy', 'Dead letter strategy', 'string', 'quorum'],
  ];
  const shortcuts = (type) => QUEUE_ARGS.filter((a) => !a[3] || a[3] === (type === 'quorum' ? 'quorum' : 'classic'))
    .map(([k, label, t]) => html`<button type="button" class="link" data-arg="${k}" data-type="${t}" ${t === 'boolean' ? html`data-value="true"` : ''}>${label}</button> `);
  // RabbitMQ's abbreviations, in its order (its KNOWN_ARGS; CT is RelayMQ's).
  const FEATURE_ABBR = {
    'x-message-ttl': 'TTL', 'x-expires': 'Exp', 'x-max-length': 'Lim', 'x-max-length-bytes': 'Lim B',
    'x-delivery-limit': 'DlL', 'x-overflow': 'Ovfl', 'x-dead-letter-exchange': 'DLX', 'x-dead-letter-routing-key': 'DLK',
    'x-max-priority': 'Pri', 'x-single-active-consumer': 'SAC', 'x-consumer-timeout': 'CT',
  };

  function features(q) {
    const f = [];
    if (q.durable) f.push(html`<abbr title="durable: true">D</abbr>`);
    if (q.auto_delete) f.push(html`<abbr title="auto-delete: true">AD</abbr>`);
    if (q.exclusive) f.push(html`<abbr title="exclusive: true">Excl</abbr>`);
    const args = q.arguments || {};
    const abbr = (k, label) => html`<abbr title="${k}: ${JSON.stringify(args[k])}">${label}</abbr>`;
    // As RabbitMQ: no false SAC, and the other arguments as one "Args"; the Type column
    // shows x-queue-type.
    for (const [k, label] of Object.entries(FEATURE_ABBR)) if (k in args && !(k === 'x-single-active-consumer' && args[k] === false)) f.push(abbr(k, label));
    const other = Object.keys(args).filter((k) => !(k in FEATURE_ABBR) && k !== 'x-queue-type');
    if (other.length) f.push(html`<abbr title="${other.map((k) => `${k}: ${JSON.stringify(args[k])}`).join(', ')}">Args</abbr>`);
    if (q.policy) f.push(html`<span class="policy" title="policy">${q.policy}</span>`);
    return f.map((x) => html`${x} `);
  }
  const stats = (q) => q.message_stats || {};

  const listColumns = [
    { label: 'Virtual host', sort: 'vhost', cell: (q) => q.vhost },
    { label: 'Name', sort: 'name', wrap: true, cell: (q) => html`<a href="${link('queues', q.vhost, q.name)}">${q.name}</a>` },
    { label: 'Type', sort: 'type', cell: (q) => q.type },
    { label: 'Features', cell: features },
    { label: 'State', sort: 'state', cell: (q) => html`<span class="state ${q.state}">${q.state}</span>` },
    { label: 'Ready', sort: 'messages_ready', num: true, cell: (q) => num(q.messages_ready) },
    { label: 'Unacked', sort: 'messages_unacknowledged', num: true, cell: (q) => num(q.messages_unacknowledged) },
    { label: 'Total', sort: 'messages', num: true, cell: (q) => num(q.messages) },
    { label: 'Incoming', sort: 'message_stats.publish_details.rate', num: true, cell: (q) => rate(stats(q).publish_details) },
    { label: 'Deliver / get', sort: 'message_stats.deliver_get_details.rate', num: true, cell: (q) => rate(stats(q).deliver_get_details) },
    { label: 'Ack', sort: 'message_stats.ack_details.rate', num: true, cell: (q) => rate(stats(q).ack_details) },
  ];

  R.page('queues', {
    title: 'Queues',
    async mount(main, args) {
      if (args.length >= 2) return queuePage(main, args[0], args[1]);
      const vhost = R.store.get('vhost', '');
      set(main, html`<h1>Queues</h1><div id="list"></div>
        <section><h2>Add a new queue</h2>
        <form id="add-queue" class="stack">
          <label>Virtual host <select name="vhost">${await R.vhostOptions(vhost || '/')}</select></label>
          <label>Type <select name="type"><option value="">Default for virtual host</option><option value="classic">Classic</option><option value="quorum">Quorum</option></select></label>
          <label>Name <input name="name" required></label>
          <label>Durability <select name="durable"><option value="true">Durable</option><option value="false">Transient</option></select></label>
          <label>Auto delete <select name="auto_delete"><option value="false">No</option><option value="true">Yes</option></select></label>
          <fieldset><legend>Arguments</legend>${R.argsEditor('add-queue-args')}
            <p class="hint">Add <span id="add-queue-shortcuts">${shortcuts('')}</span></p></fieldset>
          <button type="submit">Add queue</button></form></section>`);
      const list = R.pagedList($('#list'), {
        id: 'queues',
        path: () => R.listPath('queues'),
        columns_def: listColumns, empty: 'No queues.',
      });
      const editor = $('#add-queue-args');
      R.wireArgs(editor);
      const add = $('#add-queue');
      R.wireArgShortcuts(add, editor);
      // A quorum queue is durable and not auto-delete (RabbitMQ's form sets both), and
      // takes its own arguments.
      add.elements.type.addEventListener('change', () => {
        const quorum = add.elements.type.value === 'quorum';
        for (const [field, value] of [['durable', 'true'], ['auto_delete', 'false']]) {
          if (quorum) add.elements[field].value = value;
          add.elements[field].disabled = quorum;
        }
        set($('#add-queue-shortcuts'), shortcuts(add.elements.type.value));
      });
      onSubmit(add, async (v, form) => {
        let args;
        try { args = R.readArgs(editor); } catch (e) { R.failed(e); return; }
        // As RabbitMQ's form: a chosen type is sent as x-queue-type.
        if (v.type) args['x-queue-type'] = v.type;
        const body = { durable: v.durable === 'true', auto_delete: v.auto_delete === 'true', arguments: args };
        const ok = await attempt(() => api('PUT', `queues/${seg(v.vhost)}/${seg(v.name)}`, body).then(() => true), `Queue ${v.name} added.`);
        if (ok) { form.elements.name.value = ''; R.clearArgs(editor); list.refresh(); }
      });
      await list.refresh();
      return list;
    },
  });

  /** A list of messages as /get, /peek and /search return them. */
  function messages(items, what) {
    if (!items || items.length === 0) return html`<p class="empty">${what}</p>`;
    return items.map((m, i) => html`<article class="message">
      <h4>Message ${m.position !== undefined ? html`at position ${m.position}` : i + 1}</h4>
      ${m.message_count !== undefined && m.position === undefined ? html`<p>The server reported ${num(m.message_count)} messages remaining.</p>` : ''}
      <dl class="facts"><dt>Exchange</dt><dd>${m.exchange === '' ? '(AMQP default)' : m.exchange}</dd>
      <dt>Routing Key</dt><dd>${m.routing_key}</dd><dt>Redelivered</dt><dd class="redelivered">${m.redelivered ? '●' : '○'}</dd>
      ${m.delivery_count !== undefined ? html`<dt>Delivery count</dt><dd>${num(m.delivery_count)}</dd>` : ''}
      <dt>Properties</dt><dd>${props(m.properties)}</dd>
      <dt>Payload</dt><dd>${num(m.payload_bytes)} ${m.payload_bytes === 1 ? 'byte' : 'bytes'}, encoding: ${m.payload_encoding}${m.payload.length < (m.payload_encoding === 'base64' ? Math.ceil(m.payload_bytes / 3) * 4 : m.payload_bytes) ? ' (truncated)' : ''}<pre class="payload">${m.payload}</pre></dd></dl></article>`);
  }
  function props(p) {
    if (!p || Object.keys(p).length === 0) return '';
    return html`<dl class="props-list">${Object.entries(p).map(([k, v]) => html`<dt>${k}</dt><dd>${typeof v === 'object' ? JSON.stringify(v) : String(v)}</dd>`)}</dl>`;
  }
  R.messages = messages;

  async function queuePage(main, vhost, name) {
    const base = `queues/${seg(vhost)}/${seg(name)}`;
    await get(base + '?columns=name');
    set(main, html`<h1>Queue <span class="name">${name}</span> <small>in virtual host ${vhost}</small></h1>
      <div class="charts" id="q-charts"></div>
      <section><h2>Details</h2><div id="q-details"></div>
        <p class="actions"><button type="button" id="pause">Pause deliveries</button> <button type="button" id="resume">Resume deliveries</button></p></section>
      <section><h2>Consumers</h2><div id="q-consumers"></div></section>
      <section><h2>Bindings</h2><div id="q-bindings"></div>
        <h3>Add binding to this queue</h3>
        <form id="bind-form" class="stack"><label>From exchange <input name="source" required></label>
          <label>Routing key <input name="routing_key"></label>
          <fieldset><legend>Arguments</legend>${R.argsEditor('q-bind-args')}</fieldset>
          <button type="submit">Bind</button></form></section>
      <details class="panel" id="p-publish"><summary>Publish message</summary><p class="hint">Message will be published to the default exchange with routing key <strong>${name}</strong>, routing it to this queue.</p>${R.publishForm('publish-form', false)}</details>
      <details class="panel" id="p-get"><summary>Get messages</summary><p class="hint">Getting messages from a queue is a destructive action: they are consumed. Use Peek to look without consuming.</p>
        <form id="get-form" class="inline">
          <label>Ack Mode <select name="ackmode"><option value="ack_requeue_true">Nack message requeue true</option><option value="ack_requeue_false">Automatic ack</option><option value="reject_requeue_true">Reject requeue true</option><option value="reject_requeue_false">Reject requeue false</option></select></label>
          <label>Encoding <select name="encoding"><option value="auto">Auto string / base64</option><option value="base64">base64</option></select></label>
          <label>Messages <input name="count" type="number" min="1" value="1" required></label>
          <label>Truncate <input name="truncate" type="number" min="1" value="50000" required> bytes</label>
          <button type="submit">Get Message(s)</button></form><div id="got"></div></details>
      <details class="panel" id="p-peek"><summary>Peek messages</summary><p class="hint">Shows ready messages without consuming them: nothing is redelivered, reordered or counted.</p>
        <form id="peek-form" class="inline"><label>From position <input name="offset" type="number" min="0" value="0" required></label>
          <label>Messages <input name="count" type="number" min="1" max="1000" value="10" required></label>
          <label>Encoding <select name="encoding"><option value="auto">Auto string / base64</option><option value="base64">base64</option></select></label>
          <label>Truncate <input name="truncate" type="number" min="1" value="50000" required> bytes</label>
          <button type="submit">Peek</button></form><div id="peeked"></div></details>
      <details class="panel" id="p-search"><summary>Search messages</summary>
        <form id="search-form" class="inline"><label>Text <input name="query" required></label>
          <label><input type="checkbox" name="body" checked> body</label><label><input type="checkbox" name="headers" checked> headers</label><label><input type="checkbox" name="properties" checked> properties</label>
          <label><input type="checkbox" name="ignore_case"> ignore case</label>
          <label>From position <input name="offset" type="number" min="0" value="0" required></label>
          <button type="submit">Search</button></form><div id="found"></div></details>
      <details class="panel" id="p-unacked"><summary>Unacknowledged messages</summary><p class="hint">Delivered and not yet acknowledged, per consumer, oldest first.</p>
        <button type="button" id="unacked-show">Show unacknowledged messages</button><div id="unacked"></div></details>
      <details class="panel" id="p-replay"><summary>Replay dead-lettered messages</summary><p class="hint">Moves messages from this queue back to the queue each was dead-lettered from (its first <code>x-death</code> entry), or to an exchange or queue you name. A message is removed from here only once its target has it.</p>
        <form id="replay-form" class="stack">
          <label>Target <select name="target"><option value="origin">The queue each message came from</option><option value="exchange">An exchange</option><option value="queue">A queue</option></select></label>
          <label data-for-target="exchange" hidden>Exchange <input name="exchange"></label><label data-for-target="exchange" hidden>Routing key <input name="routing_key"></label>
          <label data-for-target="queue" hidden>Queue <input name="queue"></label>
          <label>Positions <input name="positions" placeholder="all, or e.g. 0,3,4"></label>
          <button type="submit">Replay messages</button></form><p id="replayed" aria-live="polite"></p></details>
      <details class="panel" id="p-move"><summary>Move messages</summary><p class="hint">Move messages to another queue: use Replay with the target "A queue".</p></details>
      <details class="panel" id="p-delete"><summary>Delete</summary><button type="button" class="danger" id="delete-q">Delete Queue</button></details>
      <details class="panel" id="p-purge"><summary>Purge</summary><button type="button" class="danger" id="purge-q">Purge Messages</button></details>`);

    R.wirePublish($('#publish-form'), vhost, '', name);
    const bind = $('#bind-form');
    R.wireArgs($('.args', bind));
    async function refresh() {
      const q = await get(base + '?' + R.HISTORY);
      set($('#q-charts'), html`${R.lengthsChart(q)}${R.ratesChart(stats(q), [['Publish', 'publish'], ['Deliver / get', 'deliver_get'], ['Redelivered', 'redeliver'], ['Ack', 'ack']], {})}`);
      set($('#q-details'), html`<dl class="facts">
        <dt>Type</dt><dd id="q-type">${q.type}</dd><dt>Features</dt><dd>${features(q)}</dd>
        <dt>Policy</dt><dd>${q.policy || ''}</dd><dt>State</dt><dd><span class="state ${q.state}" id="q-state">${q.state}</span></dd>
        ${q.type === 'quorum' ? html`<dt>Leader</dt><dd>${q.leader}</dd><dt>Online</dt><dd>${(q.online || []).join(', ')}</dd>
          <dt>Members</dt><dd>${(q.members || []).join(', ')}</dd>
          <dt>Delivery limit</dt><dd id="q-delivery-limit">${q.delivery_limit < 0 ? 'unlimited' : num(q.delivery_limit)}</dd>
          <dt>Delayed retry</dt><dd id="q-delayed-retry">${q.delayed_retry}</dd>` : ''}
        ${(q.arguments || {})['x-single-active-consumer'] === true ? html`<dt>Single active consumer</dt><dd id="q-sac">${q.single_active_consumer_tag === null ? html`<em>none</em>` : q.single_active_consumer_tag}</dd>` : ''}
        <dt>Consumers</dt><dd>${num(q.consumers)}</dd><dt>Consumer utilisation</dt><dd>${q.consumer_utilisation === undefined || q.consumer_utilisation === null ? '' : Math.round(q.consumer_utilisation * 100) + '%'}</dd>
        <dt>Messages</dt><dd>${num(q.messages)} total · ${num(q.messages_ready)} ready · ${num(q.messages_unacknowledged)} unacked${q.messages_delayed ? html` · <span id="q-delayed">${num(q.messages_delayed)} waiting for their retry until ${new Date(q.next_delayed_at).toISOString()}</span>` : ''}</dd>
        <dt>Message body bytes</dt><dd>${R.bytes(q.message_bytes)}</dd><dt>Memory</dt><dd>${R.bytes(q.memory)}</dd></dl>`);
      $('#pause').hidden = q.state === 'paused';
      $('#resume').hidden = q.state !== 'paused';
      set($('#q-consumers'), R.table([
        { label: 'Channel', cell: (c) => html`<a href="${link('connections', (c.channel_details || {}).connection_name || '')}">${(c.channel_details || {}).name}</a>` },
        { label: 'Consumer tag', cell: (c) => c.consumer_tag },
        { label: 'Ack required', cell: (c) => (c.ack_required ? '●' : '○') },
        { label: 'Exclusive', cell: (c) => (c.exclusive ? '●' : '○') },
        { label: 'Prefetch count', num: true, cell: (c) => num(c.prefetch_count) },
        { label: 'Priority', num: true, cell: (c) => num(c.priority) },
        { label: 'Active', cell: (c) => (c.active === false ? '○' : '●') },
        { label: 'Activity status', cell: (c) => (c.activity_status || '').replace('_', ' ') },
        { label: 'Arguments', cell: (c) => (Object.keys(c.arguments || {}).length ? JSON.stringify(c.arguments) : '') },
      ], q.consumer_details || [], null, 'No consumers.'));
      const bindings = await get(base + '/bindings');
      set($('#q-bindings'), R.bindingsTable(bindings, 'destination', true));
    }
    R.wireUnbind($('#q-bindings'), vhost, refresh);
    onSubmit(bind, async (v) => {
      let args;
      try { args = R.readArgs($('.args', bind)); } catch (e) { R.failed(e); return; }
      const ok = await attempt(() => api('POST', `bindings/${seg(vhost)}/e/${seg(v.source)}/q/${seg(name)}`, { routing_key: v.routing_key, arguments: args }).then(() => true), 'Binding added.');
      if (ok) { bind.reset(); R.clearArgs($('.args', bind)); refresh(); }
    });
    onSubmit($('#get-form'), async (v) => {
      const got = await attempt(() => api('POST', base + '/get', { count: Number(v.count), ackmode: v.ackmode, encoding: v.encoding, truncate: Number(v.truncate) }));
      if (got) { set($('#got'), messages(got, 'Queue is empty')); refresh(); }
    });
    onSubmit($('#peek-form'), async (v) => {
      const got = await attempt(() => api('POST', base + '/peek', { count: Number(v.count), offset: Number(v.offset), encoding: v.encoding, truncate: Number(v.truncate) }));
      if (got) set($('#peeked'), messages(got, 'No messages at this position.'));
    });
    onSubmit($('#search-form'), async (v) => {
      const within = ['body', 'headers', 'properties'].filter((k) => v[k]);
      const r = await attempt(() => api('POST', base + '/search', { query: v.query, in: within, offset: Number(v.offset), limit: 20, ignore_case: v.ignore_case }));
      if (!r) return;
      set($('#found'), html`<p>${num(r.items.length)} found in ${num(r.scanned)} messages scanned of ${num(r.ready)} ready.
        ${r.next_offset === null || r.next_offset === undefined ? 'The scan reached the end of the queue.' : html`<button type="button" class="small" id="search-next" data-offset="${r.next_offset}">Continue from position ${r.next_offset}</button>`}</p>
        ${messages(r.items, 'No match.')}`);
      const next = $('#search-next');
      if (next) next.addEventListener('click', () => { $('#search-form').elements.offset.value = next.getAttribute('data-offset'); $('#search-form').requestSubmit(); });
    });
    $('#unacked-show').addEventListener('click', async () => {
      const list = await attempt(() => get(base + '/unacked?limit=100&truncate=2000'));
      if (!list) return;
      set($('#unacked'), R.table([
        { label: 'Consumer tag', cell: (u) => (u.consumer_tag === null ? html`<em>basic.get</em>` : u.consumer_tag) },
        { label: 'Channel', cell: (u) => (u.channel_details || {}).name },
        { label: 'Delivery tag', num: true, cell: (u) => num(u.delivery_tag) },
        { label: 'Out for', num: true, cell: (u) => R.duration(u.out_for_ms) },
        { label: 'Redelivered', cell: (u) => (u.redelivered ? '●' : '○') },
        { label: 'Routing key', cell: (u) => u.routing_key },
        { label: 'Payload', cell: (u) => html`<code class="payload-inline">${u.payload}</code>` },
      ], list, null, 'No unacknowledged messages.'));
    });
    const replayForm = $('#replay-form');
    replayForm.elements.target.addEventListener('change', () => {
      for (const l of replayForm.querySelectorAll('[data-for-target]')) l.hidden = l.dataset.forTarget !== replayForm.elements.target.value;
    });
    onSubmit(replayForm, async (v) => {
      const body = { target: v.target };
      if (v.target === 'exchange') { body.exchange = v.exchange; body.routing_key = v.routing_key; }
      if (v.target === 'queue') body.queue = v.queue;
      const positions = v.positions.trim();
      if (positions && positions !== 'all') {
        body.positions = positions.split(',').map((s) => Number(s.trim()));
        if (body.positions.some((n) => !Number.isInteger(n) || n < 0)) { R.failed(new Error('Positions are whole numbers from 0, separated by commas')); return; }
      }
      const to = { origin: 'the queue each came from', exchange: `exchange "${v.exchange}" with routing key "${v.routing_key}"`, queue: `queue "${v.queue}"` }[v.target];
      if (!R.sure(`Replay ${positions && positions !== 'all' ? `the messages at positions ${positions}` : 'every message'} of ${name} to ${to}?`)) return;
      const said = (x) => `${num(x.moved)} moved, ${num(x.skipped)} skipped${(x.errors || []).length ? ': ' + x.errors.map((e) => `position ${e.position}: ${e.reason}`).join('; ') : ''}.`;
      const r = await attempt(() => api('POST', base + '/replay', body), said);
      if (r) { set($('#replayed'), said(r)); refresh(); }
    });
    const action = (a, text) => async () => {
      const ok = await attempt(() => api('POST', base + '/actions', { action: a }).then(() => true), text);
      if (ok) refresh();
    };
    $('#pause').addEventListener('click', action('pause', 'Deliveries paused: consumers stay attached, nothing is delivered until resumed.'));
    $('#resume').addEventListener('click', action('resume', 'Deliveries resumed.'));
    $('#delete-q').addEventListener('click', async () => {
      if (!R.sure(`Delete queue ${name} and every message in it?`)) return;
      const ok = await attempt(() => api('DELETE', base).then(() => true), `Queue ${name} deleted.`);
      if (ok) location.hash = '#/queues';
    });
    $('#purge-q').addEventListener('click', async () => {
      if (!R.sure(`Purge every ready message of ${name}?`)) return;
      const ok = await attempt(() => api('DELETE', base + '/contents').then(() => true), `Queue ${name} purged.`);
      if (ok) refresh();
    });
    await refresh();
    return { refresh };
  }
})();
