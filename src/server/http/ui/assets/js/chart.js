// RelayMQ management UI: line charts drawn as SVG from the API's `samples` (no
// charting library). A lengths chart draws the samples as they are; a rates chart
// draws the rate between consecutive cumulative samples, as RabbitMQ's UI does.
'use strict';

(() => {
  const { html, num } = R;
  const W = 600, H = 160, PAD_L = 48, PAD_B = 18, PAD_T = 8;

  /** Points [[ms, value]…], oldest first, of a `*_details` object's samples. */
  function points(details) {
    const s = (details && details.samples) || [];
    return s.map((x) => [x.timestamp, x.sample]).sort((a, b) => a[0] - b[0]);
  }

  /** Per-second rates between consecutive cumulative points. */
  function rates(pts) {
    const out = [];
    for (let i = 1; i < pts.length; i++) {
      const dt = (pts[i][0] - pts[i - 1][0]) / 1000;
      if (dt > 0) out.push([pts[i][0], Math.max(0, (pts[i][1] - pts[i - 1][1]) / dt)]);
    }
    return out;
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  /**
   * A chart of `series` [{label, points, last}] over the last `windowMs`; `unit` is
   * appended to the legend's values ('/s' for rates). Returns markup.
   */
  function chart(title, series, unit = '', windowMs = 600000) {
    const now = Date.now();
    const t0 = now - windowMs;
    const all = series.flatMap((s) => s.points.filter((p) => p[0] >= t0).map((p) => p[1]));
    const max = niceMax(Math.max(0, ...all));
    const x = (t) => PAD_L + ((t - t0) / windowMs) * (W - PAD_L - 4);
    const y = (v) => PAD_T + (1 - v / max) * (H - PAD_T - PAD_B);
    const fmt = (v) => (v >= 100 ? Math.round(v) : Math.round(v * 10) / 10);
    const grid = [0, 0.5, 1].map((f) => html`<line class="grid" x1="${PAD_L}" x2="${W - 4}" y1="${y(max * f)}" y2="${y(max * f)}"></line>
      <text class="axis" x="${PAD_L - 4}" y="${y(max * f) + 4}" text-anchor="end">${num(fmt(max * f))}</text>`);
    const lines = series.map((s, i) => {
      const pts = s.points.filter((p) => p[0] >= t0);
      if (pts.length === 0) return '';
      const d = pts.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ');
      return html`<polyline class="series s${i}" points="${d}"></polyline>`;
    });
    const legend = series.map((s, i) => {
      const last = s.last !== undefined ? s.last : (s.points.length ? s.points[s.points.length - 1][1] : 0);
      return html`<li><span class="swatch s${i}"></span>${s.label} <strong>${num(fmt(last))}${unit}</strong></li>`;
    });
    const minutes = Math.round(windowMs / 60000);
    return html`<figure class="chart"><figcaption>${title}</figcaption>
      <svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${title}, last ${minutes} minutes" preserveAspectRatio="none">
        ${grid}${lines}
        <text class="axis" x="${PAD_L}" y="${H - 4}">-${minutes} min</text>
        <text class="axis" x="${W - 4}" y="${H - 4}" text-anchor="end">now</text>
      </svg><ul class="legend">${legend}</ul></figure>`;
  }

  /** The queued-messages chart of an object with `messages_ready_details` etc. */
  function lengthsChart(o) {
    const s = (label, key) => ({ label, points: points(o[key + '_details']), last: o[key] || 0 });
    return chart('Queued messages', [
      s('Ready', 'messages_ready'),
      s('Unacked', 'messages_unacknowledged'),
      s('Total', 'messages'),
    ]);
  }

  /**
   * The message-rates chart of `stats` (`message_stats`): each rate drawn from its
   * samples when the API keeps a history for it, else from the values this page saw
   * (`seen`, a map kept by the caller across polls).
   */
  function ratesChart(stats, kinds, seen) {
    const now = Date.now();
    const series = kinds.map(([label, key]) => {
      const d = stats && stats[key + '_details'];
      const current = d && typeof d.rate === 'number' ? d.rate : 0;
      let pts;
      if (d && d.samples && d.samples.length > 1) {
        pts = rates(points(d));
      } else {
        const mine = seen[key] || (seen[key] = []);
        mine.push([now, current]);
        while (mine.length && mine[0][0] < now - 600000) mine.shift();
        pts = mine;
      }
      return { label, points: pts, last: current };
    });
    return chart('Message rates', series, '/s');
  }

  R.chart = chart;
  R.lengthsChart = lengthsChart;
  R.ratesChart = ratesChart;
  /** The history query RabbitMQ's UI sends: 10 minutes, one sample every 5 s. */
  R.HISTORY = 'lengths_age=600&lengths_incr=5&msg_rates_age=600&msg_rates_incr=5';
})();
