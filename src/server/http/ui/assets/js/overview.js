// RelayMQ management UI: the Overview page (totals, charts, node, listeners,
// definitions export and import).
'use strict';

(() => {
  const { html, set, $, get, api, num, rate, bytes, duration, attempt, onSubmit } = R;

  // RabbitMQ's overview chart, in its words.
  const RATES = [
    ['Publish', 'publish'], ['Publisher confirm', 'confirm'], ['Deliver (manual ack)', 'deliver'],
    ['Deliver (auto ack)', 'deliver_no_ack'], ['Consumer ack', 'ack'], ['Redelivered', 'redeliver'],
    ['Get (manual ack)', 'get'], ['Get (auto ack)', 'get_no_ack'], ['Get (empty)', 'get_empty'],
    ['Unroutable (return)', 'return_unroutable'], ['Unroutable (drop)', 'drop_unroutable'],
  ];

  function bar(used, limit, label) {
    const pct = limit > 0 ? Math.min(100, Math.round((used / limit) * 100)) : 0;
    const cls = pct >= 100 ? 'over' : pct >= 80 ? 'near' : '';
    return html`<div class="bar ${cls}" role="meter" aria-valuemin="0" aria-valuemax="100" aria-valuenow="${pct}" aria-label="${label}">
      <span class="fill w${Math.round(pct / 5) * 5}"></span><span class="bar-text">${label}</span></div>`;
  }

  R.page('overview', {
    title: 'Overview',
    async mount(main) {
      const seen = {};
      set(main, html`<h1>Overview</h1>
        <section><h2>Totals</h2><div class="charts" id="ov-charts"></div><div id="ov-totals"></div></section>
        <section id="ov-node-section" hidden><h2>Nodes</h2><div id="ov-nodes"></div></section>
        <section id="ov-churn-section" hidden><h2>Churn statistics</h2><div id="ov-churn"></div></section>
        <section id="ov-listeners-section" hidden><h2>Ports and contexts</h2><div id="ov-listeners"></div></section>
        <section class="split" id="ov-definitions" hidden>
          <div><h2>Export definitions</h2>
            <p>The broker's definitions (users, virtual hosts, permissions, policies, queues, exchanges, bindings) as a JSON file.</p>
            <button type="button" id="export">Download broker definitions</button></div>
          <div><h2>Import definitions</h2>
            <form id="import-form"><label>Definitions file <input type="file" name="file" accept=".json,application/json" required></label>
            <button type="submit">Upload broker definitions</button></form></div>
        </section>`);
      // The definitions are the administrators' (the API refuses the others).
      $('#ov-definitions').hidden = !R.canSee('administrator');
      $('#ov-listeners-section').hidden = !R.canSee('monitoring');
      $('#export').addEventListener('click', () => attempt(async () => {
        const { text } = await api('GET', 'definitions', undefined, { raw: true });
        const a = document.createElement('a');
        a.href = URL.createObjectURL(new Blob([text], { type: 'application/json' }));
        a.download = 'relaymq-definitions-' + new Date().toISOString().slice(0, 10) + '.json';
        document.body.appendChild(a);
        a.click();
        a.remove();
      }, 'Definitions downloaded.'));
      onSubmit($('#import-form'), async (v, form) => {
        const file = form.elements.file.files[0];
        if (!file) return;
        let doc;
        try { doc = JSON.parse(await file.text()); } catch (e) { R.failed(new Error('Not a JSON file: ' + e.message)); return; }
        if (!R.sure(`Import the definitions of ${file.name}? Existing objects with the same names are overwritten.`)) return;
        await attempt(() => api('POST', 'definitions', doc), 'Definitions imported.');
      });

      async function refresh() {
        const o = await get('overview?' + R.HISTORY);
        set($('#ov-charts'), html`${R.lengthsChart(o.queue_totals || {})}${R.ratesChart(o.message_stats || {}, RATES, seen)}`);
        const t = o.object_totals || {};
        set($('#ov-totals'), html`<h3>Global counts</h3><ul class="totals">
          <li><a href="#/connections">Connections: <strong>${num(t.connections)}</strong></a></li>
          <li><a href="#/channels">Channels: <strong>${num(t.channels)}</strong></a></li>
          <li><a href="#/exchanges">Exchanges: <strong>${num(t.exchanges)}</strong></a></li>
          <li><a href="#/queues">Queues: <strong>${num(t.queues)}</strong></a></li>
          <li>Consumers: <strong>${num(t.consumers)}</strong></li></ul>`);
        set($('#ov-listeners'), R.table([
          { label: 'Protocol', cell: (l) => l.protocol },
          { label: 'Bound to', cell: (l) => l.ip_address },
          { label: 'Port', cell: (l) => l.port, num: true },
        ], o.listeners || []));
        const churn = o.churn_rates || {};
        if (R.canSee('monitoring')) {
          $('#ov-churn-section').hidden = false;
          const c = (k) => html`<td class="num">${num(churn[k])}</td><td class="num">${rate(churn[k + '_details'])}</td>`;
          set($('#ov-churn'), html`<div class="table-wrap"><table><thead><tr><th scope="col"></th><th scope="col" class="num">Created</th><th scope="col" class="num">Rate</th><th scope="col" class="num">Closed / deleted</th><th scope="col" class="num">Rate</th></tr></thead><tbody>
            <tr><th scope="row">Connections</th>${c('connection_created')}${c('connection_closed')}</tr>
            <tr><th scope="row">Channels</th>${c('channel_created')}${c('channel_closed')}</tr>
            <tr><th scope="row">Queues</th>${c('queue_created')}${c('queue_deleted')}</tr></tbody></table></div>`);
          const nodes = await get('nodes');
          $('#ov-node-section').hidden = false;
          set($('#ov-nodes'), R.table([
            { label: 'Name', cell: (n) => n.name },
            { label: 'File descriptors', cell: (n) => bar(n.fd_used, n.fd_total, `${num(n.fd_used)} / ${num(n.fd_total)}`) },
            { label: 'Socket descriptors', cell: (n) => bar(n.sockets_used, n.sockets_total, `${num(n.sockets_used)} / ${num(n.sockets_total)}`) },
            { label: 'Memory', cell: (n) => html`${bar(n.mem_used, n.mem_limit, `${bytes(n.mem_used)} / ${bytes(n.mem_limit)} high watermark`)}${n.mem_alarm ? html`<strong class="alarm-text">memory alarm</strong>` : ''}` },
            { label: 'Disk space', cell: (n) => html`${bar(n.disk_free_limit, n.disk_free, `${bytes(n.disk_free)} free / ${bytes(n.disk_free_limit)} low watermark`)}${n.disk_free_alarm ? html`<strong class="alarm-text">disk alarm</strong>` : ''}` },
            { label: 'Uptime', cell: (n) => duration(n.uptime) },
            { label: 'Info', cell: (n) => html`${n.type} · ${num(n.processors)} cores · ${n.running ? 'running' : 'stopped'}` },
          ], nodes || []));
        }
      }
      await refresh();
      return { refresh };
    },
  });
})();
