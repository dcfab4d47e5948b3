// RelayMQ management UI: start-up (the virtual host selector, the Admin tab's target)
// once every page is registered.
'use strict';

(() => {
  const { html, set, $, get } = R;

  /** Fills the header's virtual host selector ("All" or one vhost, kept in the browser). */
  R.refreshVhosts = async () => {
    const select = $('#vhost');
    const chosen = R.store.get('vhost', '');
    let vhosts = [];
    try { vhosts = await get('vhosts?columns=name'); } catch (e) { return; }
    set(select, html`<option value="">All</option>${vhosts.map((v) => html`<option value="${v.name}" ${v.name === chosen ? html`selected` : ''}>${v.name}</option>`)}`);
  };

  document.addEventListener('DOMContentLoaded', () => {
    const select = $('#vhost');
    select.addEventListener('change', () => { R.store.put('vhost', select.value); R.route(); });
    const admin = $('#tabs [data-admin]');
    admin.addEventListener('click', (ev) => {
      ev.preventDefault();
      location.hash = R.canSee('administrator') ? '#/users' : '#/policies';
    });
    new MutationObserver(() => { if (!$('#header').hidden) R.refreshVhosts(); })
      .observe($('#header'), { attributes: true, attributeFilter: ['hidden'] });
    R.init();
  });
})();
