// RelayMQ management UI: the Admin pages (users, virtual hosts with their limits,
// permissions, policies). Shown to administrators; policymakers see Policies.
'use strict';

(() => {
  const { html, set, $, get, api, seg, num, link, attempt, onSubmit } = R;

  const POLICY_KEYS = [
    ['max-length', 'number'], ['max-length-bytes', 'number'], ['overflow', 'string'],
    ['expires', 'number'], ['message-ttl', 'number'], ['dead-letter-exchange', 'string'],
    ['dead-letter-routing-key', 'string'], ['delivery-limit', 'number'],
  ];
  const TAGS = ['administrator', 'monitoring', 'policymaker', 'management', 'impersonator'];

  function adminNav(active) {
    const items = [['users', 'Users', 'administrator'], ['vhosts', 'Virtual Hosts', 'administrator'], ['policies', 'Policies', 'policymaker'], ['limits', 'Limits', 'administrator']];
    return html`<nav class="subnav" aria-label="Admin">${items.filter((i) => R.canSee(i[2])).map(([p, label]) => html`<a href="#/${p}" aria-current="${p === active ? 'page' : 'false'}">${label}</a>`)}</nav>`;
  }

  function tagButtons(input) {
    return html`<p class="hint">Set ${TAGS.map((t) => html`<button type="button" class="link" data-tag="${t}" data-for="${input}">${t}</button> `)}<button type="button" class="link" data-tag="" data-for="${input}">none</button></p>`;
  }
  function wireTags(root) {
    root.addEventListener('click', (ev) => {
      const b = ev.target.closest('[data-tag]');
      if (!b) return;
      const input = root.querySelector(`[name="${b.getAttribute('data-for')}"]`);
      const t = b.getAttribute('data-tag');
      if (t === '') { input.value = ''; return; }
      const have = input.value.split(',').map((s) => s.trim()).filter((s) => s);
      if (!have.includes(t)) have.push(t);
      input.value = have.join(', ');
    });
  }
  const tagList = (s) => s.split(',').map((x) => x.trim()).filter((x) => x);

  // ---- users -------------------------------------------------------------------------
  R.page('users', {
    title: 'Users', tab: 'admin', admin: 'administrator',
    async mount(main, args) {
      if (args.length > 0) return userPage(main, args[0]);
      set(main, html`<h1>Admin</h1>${adminNav('users')}<h2>All users</h2><div id="users"></div>
        <section><h2>Add a user</h2><form id="add-user" class="stack">
          <label>Username <input name="name" required autocomplete="off"></label>
          <label>Password <input name="password" type="password" autocomplete="new-password"></label>
          <label>Password (confirm) <input name="password2" type="password" autocomplete="new-password"></label>
          <label class="check"><input type="checkbox" name="no_password"> No password (the user cannot log in with a password)</label>
          <label>Tags <input name="tags" placeholder="administrator, monitoring"></label>${tagButtons('tags')}
          <button type="submit">Add user</button></form></section>`);
      wireTags(main);
      async function refresh() {
        const users = await get('users');
        set($('#users'), R.table([
          { label: 'Name', cell: (u) => html`<a href="${link('users', u.name)}">${u.name}</a>` },
          { label: 'Tags', cell: (u) => (u.tags || []).join(', ') },
          { label: 'Has password', cell: (u) => (u.password_hash ? '●' : '○') },
        ], users));
      }
      onSubmit($('#add-user'), async (v, form) => {
        if (!v.no_password && v.password === '') { R.failed(new Error('Type a password, or tick "No password"')); return; }
        if (!v.no_password && v.password !== v.password2) { R.failed(new Error('The passwords do not match')); return; }
        const exists = await get('users/' + seg(v.name)).then(() => true, (e) => (e.status === 404 ? false : Promise.reject(e))).catch((e) => { R.failed(e); return null; });
        if (exists === null) return;
        if (exists) { R.failed(new Error(`User ${v.name} already exists: change it on its page.`)); return; }
        const body = { tags: tagList(v.tags) };
        if (v.no_password) body.password_hash = ''; else body.password = v.password;
        const ok = await attempt(() => api('PUT', 'users/' + seg(v.name), body).then(() => true), `User ${v.name} added.`);
        if (ok) { form.reset(); refresh(); }
      });
      await refresh();
      return { refresh };
    },
  });

  async function permissionsForm(id, fixed) {
    const vhosts = fixed.vhost === undefined ? await get('vhosts?columns=name') : [];
    const users = fixed.user === undefined ? await get('users') : [];
    return html`<form id="${id}" class="stack">
      ${fixed.user === undefined ? html`<label>User <select name="user">${users.map((u) => html`<option>${u.name}</option>`)}</select></label>` : ''}
      ${fixed.vhost === undefined ? html`<label>Virtual host <select name="vhost">${vhosts.map((v) => html`<option>${v.name}</option>`)}</select></label>` : ''}
      <label>Configure regexp <input name="configure" value=".*"></label>
      <label>Write regexp <input name="write" value=".*"></label>
      <label>Read regexp <input name="read" value=".*"></label>
      <button type="submit">Set permission</button></form>`;
  }

  function permissionsTable(perms, show) {
    return R.table([
      show === 'vhost'
        ? { label: 'Virtual host', cell: (p) => html`<a href="${link('vhosts', p.vhost)}">${p.vhost}</a>` }
        : { label: 'User', cell: (p) => html`<a href="${link('users', p.user)}">${p.user}</a>` },
      { label: 'Configure regexp', cell: (p) => p.configure },
      { label: 'Write regexp', cell: (p) => p.write },
      { label: 'Read regexp', cell: (p) => p.read },
      { label: '', cell: (p) => html`<button type="button" class="small" data-clear-perm data-user="${p.user}" data-vhost="${p.vhost}">Clear</button>` },
    ], perms, null, 'No permissions.');
  }
  function wireClearPermissions(el, after) {
    el.addEventListener('click', async (ev) => {
      const b = ev.target.closest('[data-clear-perm]');
      if (!b) return;
      const u = b.getAttribute('data-user'), v = b.getAttribute('data-vhost');
      if (!R.sure(`Clear the permissions of ${u} in ${v}?`)) return;
      await attempt(() => api('DELETE', `permissions/${seg(v)}/${seg(u)}`), 'Permissions cleared.');
      after();
    });
  }

  async function userPage(main, name) {
    const u = await get('users/' + seg(name));
    set(main, html`<h1>User <span class="name">${u.name}</span></h1>${adminNav('users')}
      <section><h2>Overview</h2><dl class="facts"><dt>Tags</dt><dd>${(u.tags || []).join(', ')}</dd><dt>Can log in with password</dt><dd>${u.password_hash ? 'yes' : 'no'}</dd></dl></section>
      <section><h2>Permissions</h2><div id="perms"></div><h3>Set permission</h3>${await permissionsForm('perm-form', { user: name })}</section>
      <section><h2>Update this user</h2><form id="update-user" class="stack">
        <label>Password <input name="password" type="password" autocomplete="new-password"></label>
        <label>Password (confirm) <input name="password2" type="password" autocomplete="new-password"></label>
        <label>Tags <input name="tags" value="${(u.tags || []).join(', ')}"></label>${tagButtons('tags')}
        <button type="submit">Update user</button></form></section>
      <section><h2>Delete this user</h2><button type="button" class="danger" id="delete-user">Delete</button></section>`);
    wireTags(main);
    async function refresh() {
      set($('#perms'), permissionsTable(await get(`users/${seg(name)}/permissions`), 'vhost'));
    }
    wireClearPermissions($('#perms'), refresh);
    onSubmit($('#perm-form'), async (v) => {
      const ok = await attempt(() => api('PUT', `permissions/${seg(v.vhost)}/${seg(name)}`, { configure: v.configure, write: v.write, read: v.read }).then(() => true), 'Permission set.');
      if (ok) refresh();
    });
    onSubmit($('#update-user'), async (v) => {
      if (v.password !== v.password2) { R.failed(new Error('The passwords do not match')); return; }
      const body = { tags: tagList(v.tags) };
      if (v.password) body.password = v.password; else body.password_hash = u.password_hash;
      await attempt(() => api('PUT', 'users/' + seg(name), body), 'User updated.');
    });
    $('#delete-user').addEventListener('click', async () => {
      if (!R.sure(`Delete user ${name}?`)) return;
      const ok = await attempt(() => api('DELETE', 'users/' + seg(name)).then(() => true), `User ${name} deleted.`);
      if (ok) location.hash = '#/users';
    });
    await refresh();
    return { refresh };
  }

  // ---- virtual hosts ---------------------------------------------------------------
  R.page('vhosts', {
    title: 'Virtual Hosts', tab: 'admin', admin: 'administrator',
    async mount(main, args) {
      if (args.length > 0) return vhostPage(main, args[0]);
      set(main, html`<h1>Admin</h1>${adminNav('vhosts')}<h2>All virtual hosts</h2><div id="vhosts"></div>
        <section><h2>Add a new virtual host</h2><form id="add-vhost" class="stack">
          <label>Name <input name="name" required></label>
          <label>Description <input name="description"></label>
          <label>Tags <input name="tags"></label>
          <label>Default Queue Type <select name="default_queue_type"><option value="classic">Classic</option></select></label>
          <button type="submit">Add virtual host</button></form></section>`);
      async function refresh() {
        const vhosts = await get('vhosts');
        set($('#vhosts'), R.table([
          { label: 'Name', cell: (v) => html`<a href="${link('vhosts', v.name)}">${v.name}</a>` },
          { label: 'Description', cell: (v) => v.description || '' },
          { label: 'Tags', cell: (v) => (v.tags || []).join(', ') },
          { label: 'Ready', num: true, cell: (v) => num(v.messages_ready) },
          { label: 'Unacked', num: true, cell: (v) => num(v.messages_unacknowledged) },
          { label: 'Total', num: true, cell: (v) => num(v.messages) },
        ], vhosts));
      }
      onSubmit($('#add-vhost'), async (v, form) => {
        const body = { description: v.description, tags: tagList(v.tags).join(','), default_queue_type: v.default_queue_type };
        const ok = await attempt(() => api('PUT', 'vhosts/' + seg(v.name), body).then(() => true), `Virtual host ${v.name} added.`);
        if (ok) { form.reset(); refresh(); R.refreshVhosts(); }
      });
      await refresh();
      return { refresh };
    },
  });

  async function vhostPage(main, name) {
    await get('vhosts/' + seg(name));
    set(main, html`<h1>Virtual Host <span class="name">${name}</span></h1>${adminNav('vhosts')}
      <section><h2>Permissions</h2><div id="perms"></div><h3>Set permission</h3>${await permissionsForm('perm-form', { vhost: name })}</section>
      <section><h2>Virtual host limits</h2><div id="limits"></div>
        <form id="limit-form" class="inline"><label>Limit <select name="name"><option value="max-connections">max-connections</option><option value="max-queues">max-queues</option></select></label>
        <label>Value <input name="value" type="number" min="-1" required></label><button type="submit">Set limit</button></form></section>
      <section><h2>Delete this virtual host</h2><button type="button" class="danger" id="delete-vhost">Delete this virtual host</button></section>`);
    async function refresh() {
      set($('#perms'), permissionsTable(await get(`vhosts/${seg(name)}/permissions`), 'user'));
      const limits = await get('vhost-limits/' + seg(name));
      const rows = [];
      for (const l of limits || []) for (const [k, v] of Object.entries(l.value || {})) rows.push({ k, v });
      set($('#limits'), R.table([
        { label: 'Limit', cell: (r) => r.k }, { label: 'Value', num: true, cell: (r) => num(r.v) },
        { label: '', cell: (r) => html`<button type="button" class="small" data-clear-limit="${r.k}">Clear</button>` },
      ], rows, null, 'No limits.'));
    }
    wireClearPermissions($('#perms'), refresh);
    $('#limits').addEventListener('click', async (ev) => {
      const b = ev.target.closest('[data-clear-limit]');
      if (!b) return;
      await attempt(() => api('DELETE', `vhost-limits/${seg(name)}/${seg(b.getAttribute('data-clear-limit'))}`), 'Limit cleared.');
      refresh();
    });
    onSubmit($('#perm-form'), async (v) => {
      const ok = await attempt(() => api('PUT', `permissions/${seg(name)}/${seg(v.user)}`, { configure: v.configure, write: v.write, read: v.read }).then(() => true), 'Permission set.');
      if (ok) refresh();
    });
    onSubmit($('#limit-form'), async (v) => {
      const ok = await attempt(() => api('PUT', `vhost-limits/${seg(name)}/${seg(v.name)}`, { value: Number(v.value) }).then(() => true), 'Limit set.');
      if (ok) refresh();
    });
    $('#delete-vhost').addEventListener('click', async () => {
      if (!R.sure(`Delete virtual host ${name}, with every queue, exchange and message in it?`)) return;
      const ok = await attempt(() => api('DELETE', 'vhosts/' + seg(name)).then(() => true), `Virtual host ${name} deleted.`);
      if (ok) { location.hash = '#/vhosts'; R.refreshVhosts(); }
    });
    await refresh();
    return { refresh };
  }

  // ---- policies ----------------------------------------------------------------------
  R.page('policies', {
    title: 'Policies', tab: 'admin', admin: 'policymaker',
    async mount(main) {
      set(main, html`<h1>Admin</h1>${adminNav('policies')}<h2>User policies</h2><div id="policies"></div>
        <section><h2>Add / update a policy</h2><form id="policy-form" class="stack">
          <label>Virtual host <select name="vhost">${await R.vhostOptions(R.store.get('vhost', '') || '/')}</select></label>
          <label>Name <input name="name" required></label>
          <label>Pattern <input name="pattern" required placeholder="^amq\\."></label>
          <label>Apply to <select name="apply_to"><option value="all">Exchanges and queues</option><option value="exchanges">Exchanges</option><option value="queues">Queues</option></select></label>
          <label>Priority <input name="priority" type="number" value="0"></label>
          <fieldset><legend>Definition</legend>${R.argsEditor('policy-def')}
            <p class="hint">Add ${POLICY_KEYS.map(([k, t]) => html`<button type="button" class="link" data-arg="${k}" data-type="${t}">${k}</button> `)}</p></fieldset>
          <button type="submit">Add / update policy</button></form></section>`);
      const editor = $('#policy-def');
      R.wireArgs(editor);
      R.wireArgShortcuts($('#policy-form'), editor);
      let current = [];
      async function refresh() {
        current = await get('policies');
        set($('#policies'), R.table([
          { label: 'Virtual host', cell: (p) => p.vhost }, { label: 'Name', cell: (p) => p.name },
          { label: 'Pattern', cell: (p) => p.pattern }, { label: 'Apply to', cell: (p) => p['apply-to'] },
          { label: 'Definition', cell: (p) => JSON.stringify(p.definition) }, { label: 'Priority', num: true, cell: (p) => num(p.priority) },
          { label: '', cell: (p) => html`<button type="button" class="small" data-edit="${p.vhost}" data-name="${p.name}">Edit</button> <button type="button" class="small danger" data-delete="${p.vhost}" data-name="${p.name}">Delete</button>` },
        ], current, null, 'No policies.'));
      }
      $('#policies').addEventListener('click', async (ev) => {
        const del = ev.target.closest('[data-delete]');
        const edit = ev.target.closest('[data-edit]');
        if (del) {
          const v = del.getAttribute('data-delete'), n = del.getAttribute('data-name');
          if (!R.sure(`Delete policy ${n} in ${v}?`)) return;
          await attempt(() => api('DELETE', `policies/${seg(v)}/${seg(n)}`), 'Policy deleted.');
          refresh();
        } else if (edit) {
          const p = current.find((x) => x.vhost === edit.getAttribute('data-edit') && x.name === edit.getAttribute('data-name'));
          if (!p) return;
          const f = $('#policy-form');
          f.elements.vhost.value = p.vhost; f.elements.name.value = p.name; f.elements.pattern.value = p.pattern;
          f.elements.apply_to.value = p['apply-to']; f.elements.priority.value = p.priority;
          set($('.args-rows', editor), '');
          for (const [k, val] of Object.entries(p.definition || {})) R.addArgRow(editor, k, String(val), typeof val === 'number' ? 'number' : 'string');
          f.elements.name.focus();
        }
      });
      onSubmit($('#policy-form'), async (v) => {
        let def;
        try { def = R.readArgs(editor); } catch (e) { R.failed(e); return; }
        const body = { pattern: v.pattern, 'apply-to': v.apply_to, priority: Number(v.priority), definition: def };
        const ok = await attempt(() => api('PUT', `policies/${seg(v.vhost)}/${seg(v.name)}`, body).then(() => true), `Policy ${v.name} set.`);
        if (ok) refresh();
      });
      await refresh();
      return { refresh };
    },
  });

  // ---- limits --------------------------------------------------------------------------
  R.page('limits', {
    title: 'Limits', tab: 'admin', admin: 'administrator',
    async mount(main) {
      set(main, html`<h1>Admin</h1>${adminNav('limits')}
        <section><h2>Virtual host limits</h2><div id="vl"></div><p class="hint">Set them on a virtual host's page.</p></section>
        <section><h2>User limits</h2><div id="ul"></div>
          <form id="user-limit" class="inline"><label>User <select name="user">${(await get('users')).map((u) => html`<option>${u.name}</option>`)}</select></label>
          <label>Limit <select name="name"><option>max-connections</option><option>max-channels</option></select></label>
          <label>Value <input name="value" type="number" min="-1" required></label><button type="submit">Set limit</button></form></section>`);
      const flat = (list, who) => {
        const rows = [];
        for (const l of list || []) for (const [k, v] of Object.entries(l.value || {})) rows.push({ who: l[who], k, v });
        return rows;
      };
      async function refresh() {
        const [vl, ul] = await Promise.all([get('vhost-limits'), get('user-limits')]);
        set($('#vl'), R.table([{ label: 'Virtual host', cell: (r) => r.who }, { label: 'Limit', cell: (r) => r.k }, { label: 'Value', num: true, cell: (r) => num(r.v) }], flat(vl, 'vhost'), null, 'No limits.'));
        set($('#ul'), R.table([{ label: 'User', cell: (r) => r.who }, { label: 'Limit', cell: (r) => r.k }, { label: 'Value', num: true, cell: (r) => num(r.v) },
          { label: '', cell: (r) => html`<button type="button" class="small" data-user="${r.who}" data-limit="${r.k}">Clear</button>` }], flat(ul, 'user'), null, 'No limits.'));
      }
      $('#ul').addEventListener('click', async (ev) => {
        const b = ev.target.closest('[data-limit]');
        if (!b) return;
        await attempt(() => api('DELETE', `user-limits/${seg(b.getAttribute('data-user'))}/${seg(b.getAttribute('data-limit'))}`), 'Limit cleared.');
        refresh();
      });
      onSubmit($('#user-limit'), async (v) => {
        const ok = await attempt(() => api('PUT', `user-limits/${seg(v.user)}/${seg(v.name)}`, { value: Number(v.value) }).then(() => true), 'Limit set.');
        if (ok) refresh();
      });
      await refresh();
      return { refresh };
    },
  });
})();
