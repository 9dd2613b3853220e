// The live view: renders a snapshot of GET /view/snapshot at once, then
// each one the WebSocket at /view/ws pushes; reconnects when it drops.
'use strict';
(function () {
  const byId = (id) => document.getElementById(id);
  const decoder = new TextDecoder();
  const palette = ['#2563eb', '#16a34a', '#d97706', '#7c3aed', '#db2777', '#0891b2', '#65a30d', '#ea580c'];

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  function fill(table, list, columns, row) {
    const body = byId(table).tBodies[0];
    body.replaceChildren();
    if (list.length === 0) {
      body.append(el('tr', {}, el('td', { class: 'empty', colSpan: columns }, 'none')));
      return;
    }
    for (const item of list) body.append(row(item));
  }

  function counters(id, pairs) {
    byId(id).replaceChildren(...pairs.map(([label, value]) =>
      el('div', { class: 'counter' }, el('b', {}, value), label)));
  }

  function percent(x) { return (100 * x).toFixed(1) + ' %'; }
  function bytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return (i === 0 ? n : n.toFixed(1)) + ' ' + units[i];
  }

  function render(s) {
    byId('cluster').textContent = s.cluster ? 'cluster ' + s.cluster : 'node';
    byId('updated').textContent = 'as of ' + new Date(s.at_ms).toLocaleTimeString();
    byId('node').textContent = s.this ? s.this + ' (node ' + s.node + ')' : 'node ' + s.node;
    byId('scope').textContent = s.scope + '.';

    const shares = new Map(((s.ring && s.ring.shares) || []).map((r) => [r.address, r.share]));
    const colour = new Map();
    s.members.forEach((m, i) => colour.set(m.address, palette[i % palette.length]));
    const counts = {};
    for (const m of s.members) counts[m.state] = (counts[m.state] || 0) + 1;
    byId('summary').textContent = Object.entries(counts).map(([k, n]) => n + ' ' + k).join(', ');
    fill('members', s.members, 6, (m) => el('tr',
      { class: m.address === s.this ? 'this' : '', 'data-address': m.address, 'data-state': m.state },
      el('td', {}, m.address),
      el('td', {}, el('span', { class: 'state state-' + m.state }, m.state)),
      el('td', {}, m.incarnation),
      el('td', {}, m.up_number || '-'),
      el('td', {}, m.weight),
      el('td', {}, shares.has(m.address) ? percent(shares.get(m.address)) : '-')));

    const ring = byId('ring');
    ring.replaceChildren();
    if (s.ring && s.ring.shares.length > 0) {
      for (const r of s.ring.shares) {
        ring.append(el('div', {
          title: r.address + ': ' + percent(r.share),
          style: 'width:' + (100 * r.share) + '%;background:' + (colour.get(r.address) || '#6b7280'),
        }, r.address));
      }
      byId('ring-note').textContent = s.ring.vnodes + ' virtual nodes; shares estimated from ' +
        s.ring.sampled_keys + ' keys';
    } else {
      byId('ring-note').textContent = 'no member owns keys';
    }

    const a = s.actors;
    const m = s.membership || {};
    counters('counters', [
      ['live actors', a.live], ['registered names', a.registered], ['published', a.published],
      ['dead letters', s.dead_letters], ['gossip packets sent', m.packets_sent ?? '-'],
      ['gossip bytes sent', m.bytes_sent === undefined ? '-' : bytes(m.bytes_sent)],
      ['suspicions raised', m.suspicions_raised ?? '-'], ['refutations', m.refutations ?? '-'],
    ]);
    fill('links', s.links, 6, (l) => el('tr', {},
      el('td', {}, l.node), el('td', {}, l.scheme), el('td', {}, l.peer), el('td', {}, l.dropped),
      el('td', {}, l.encrypted ? 'yes' : 'no'), el('td', {}, l.send_buffer_full)));
    fill('lanes', s.lanes, 4, (l) => el('tr', {},
      el('td', {}, l.node), el('td', {}, l.lane), el('td', {}, l.frames),
      el('td', {}, l.carriers.map((c) => c.scheme + ' ' + percent(c.share) +
        (c.goodput_bytes_per_s == null ? '' : ', ' + bytes(c.goodput_bytes_per_s) + '/s') +
        (c.delay_ms == null ? '' : ', ' + c.delay_ms.toFixed(1) + ' ms') +
        (c.queued_bytes ? ', ' + bytes(c.queued_bytes) + ' queued' : '')).join('; '))));
    fill('mailboxes', a.deepest, 2, (d) => el('tr', {}, el('td', {}, d.actor), el('td', {}, d.queued)));
    const r = s.replicator;
    if (r) {
      counters('replicator', [
        ['keys', r.keys], ['members', r.members], ['packets sent', r.packets_sent],
        ['bytes sent', bytes(r.bytes_sent)], ['packets received', r.packets_received],
        ['bytes received', bytes(r.bytes_received)], ['merges', r.entries_merged],
        ['anti-entropy rounds', r.anti_entropy_rounds],
      ]);
    } else {
      byId('replicator').textContent = 'no replicator on this node';
    }
  }

  function socketState(state) {
    document.body.dataset.socket = state;
    byId('socket').textContent = state;
  }

  let retry = 500;
  function connect() {
    const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
    const ws = new WebSocket(scheme + location.host + '/view/ws');
    ws.binaryType = 'arraybuffer';
    ws.onmessage = (event) => {
      const text = typeof event.data === 'string' ? event.data : decoder.decode(event.data);
      render(JSON.parse(text));
      retry = 500;
      socketState('live');
    };
    ws.onclose = () => {
      socketState('reconnecting');
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 5000);
    };
  }

  fetch('/view/snapshot')
    .then((r) => r.json())
    .then(render)
    .catch(() => {})
    .finally(connect);
})();
