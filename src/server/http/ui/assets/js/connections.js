// RelayMQ management UI: the Connections and Channels pages, and a connection's page
// (its channels, force close with a reason).
'use strict';

(() => {
  const { html, set, $, get, api, seg, num, rate, link, attempt, onSubmit } = R;

  const connectionColumns = [
    { label: 'Name', sort: 'name', wrap: true, cell: (c) => html`<a href="${link('connections', c.name)}">${c.name}</a>${c.user_provided_name ? html`<br><small>${c.user_provided_name}</small>` : ''}` },
    { label: 'Virtual host', sort: 'vhost', cell: (c) => c.vhost },
    { label: 'User name', sort: 'user', cell: (c) => c.user },
    { label: 'State', sort: 'state', cell: (c) => html`<span class="state ${c.state}">${c.state}</span>` },
    { label: 'TLS', cell: (c) => (c.ssl ? '●' : '○') },
    { label: 'Protocol', sort: 'protocol', cell: (c) => c.protocol },
    { label: 'Channels', sort: 'channels', num: true, cell: (c) => num(c.channels) },
    { label: 'From client', sort: 'recv_oct_details.rate', num: true, cell: (c) => R.bytes((c.recv_oct_details || {}).rate || 0) + '/s' },
    { label: 'To client', sort: 'send_oct_details.rate', num: true, cell: (c) => R.bytes((c.send_oct_details || {}).rate || 0) + '/s' },
  ];

  const channelColumns = [
    { label: 'Channel', sort: 'name', cell: (c) => html`<a href="${link('connections', (c.connection_details || {}).name || '')}">${c.name}</a>` },
    { label: 'Virtual host', sort: 'vhost', cell: (c) => c.vhost },
    { label: 'User name', sort: 'user', cell: (c) => c.user },
    { label: 'Mode', cell: (c) => html`${c.confirm ? html`<abbr title="Confirm">C</abbr>` : ''}${c.transactional ? html`<abbr title="Transactional">T</abbr>` : ''}` },
    { label: 'State', sort: 'state', cell: (c) => c.state },
    { label: 'Unconfirmed', num: true, cell: (c) => num(c.messages_unconfirmed) },
    { label: 'Prefetch', num: true, cell: (c) => num(c.prefetch_count) },
    { label: 'Unacked', sort: 'messages_unacknowledged', num: true, cell: (c) => num(c.messages_unacknowledged) },
    { label: 'Publish', num: true, cell: (c) => rate((c.message_stats || {}).publish_details) },
    { label: 'Confirm', num: true, cell: (c) => rate((c.message_stats || {}).confirm_details) },
    { label: 'Deliver / get', num: true, cell: (c) => rate((c.message_stats || {}).deliver_get_details) },
    { label: 'Ack', num: true, cell: (c) => rate((c.message_stats || {}).ack_details) },
  ];

  R.page('connections', {
    title: 'Connections',
    async mount(main, args) {
      if (args.length > 0) return connectionPage(main, args[0]);
      set(main, html`<h1>Connections</h1><div id="list"></div>`);
      const list = R.pagedList($('#list'), { id: 'connections', path: () => R.listPath('connections'), columns_def: connectionColumns, empty: 'No connections.' });
      await list.refresh();
      return list;
    },
  });

  R.page('channels', {
    title: 'Channels',
    async mount(main) {
      set(main, html`<h1>Channels</h1><div id="list"></div>`);
      const list = R.pagedList($('#list'), { id: 'channels', path: () => R.listPath('channels'), columns_def: channelColumns, empty: 'No channels.' });
      await list.refresh();
      return list;
    },
  });

  async function connectionPage(main, name) {
    set(main, html`<h1>Connection <span class="name">${name}</span><span id="c-name"></span></h1>
      <section><h2>Overview</h2><div id="c-overview"></div></section>
      <section><h2>Channels</h2><div id="c-channels"></div></section>
      <section><h2>Client properties</h2><div id="c-props"></div></section>
      <section><h2>Close this connection</h2>
        <form id="close-form" class="inline"><label>Reason <input name="reason" size="40" value="Closed via management plugin"></label>
        <button type="submit" class="danger">Force Close</button></form></section>`);
    onSubmit($('#close-form'), async (v) => {
      if (!R.sure(`Force close connection ${name}?`)) return;
      // A header carries bytes: the reason goes as its UTF-8 bytes (fetch refuses
      // characters past U+00FF), which the broker reads back as UTF-8.
      const reason = unescape(encodeURIComponent(v.reason));
      const ok = await attempt(() => api('DELETE', 'connections/' + seg(name), undefined, { headers: { 'x-reason': reason } }).then(() => true), 'Connection closed.');
      if (ok) location.hash = '#/connections';
    });
    async function refresh() {
      let c;
      try {
        c = await get('connections/' + seg(name));
      } catch (e) {
        set($('#c-overview'), html`<p class="error">${e.status === 404 ? 'This connection is closed.' : e.message}</p>`);
        if (e.status === 404) $('#close-form').closest('section').hidden = true;
        return;
      }
      if (c.user_provided_name) set($('#c-name'), html` <small>${c.user_provided_name}</small>`);
      set($('#c-overview'), html`<dl class="facts">
        <dt>Virtual host</dt><dd>${c.vhost}</dd><dt>User name</dt><dd>${c.user}</dd>
        <dt>Protocol</dt><dd>${c.protocol}</dd><dt>State</dt><dd>${c.state}</dd>
        <dt>Client</dt><dd>${c.peer_host}:${c.peer_port}</dd><dt>TLS</dt><dd>${c.ssl ? 'yes' : 'no'}</dd>
        <dt>Channels</dt><dd>${num(c.channels)} (max ${num(c.channel_max)})</dd>
        <dt>Frame max</dt><dd>${num(c.frame_max)} bytes</dd><dt>Heartbeat</dt><dd>${num(c.timeout)} s</dd>
        <dt>From client</dt><dd>${R.bytes((c.recv_oct_details || {}).rate || 0)}/s</dd>
        <dt>To client</dt><dd>${R.bytes((c.send_oct_details || {}).rate || 0)}/s</dd></dl>`);
      const props = c.client_properties || {};
      set($('#c-props'), html`<dl class="facts">${Object.keys(props).sort().map((k) => html`<dt>${k}</dt><dd>${typeof props[k] === 'object' ? JSON.stringify(props[k]) : String(props[k])}</dd>`)}</dl>`);
      const channels = await get('connections/' + seg(name) + '/channels');
      set($('#c-channels'), R.table(channelColumns, channels || [], null, 'No channels.'));
    }
    await refresh();
    return { refresh };
  }
})();
