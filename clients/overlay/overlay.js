// Covercast live overlay: draws a scene and, live, the cover of the selected pair.
//
// It talks the Covercast protocol (docs/protocol.md) in JSON text frames, so no msgpack
// decoder is needed: hello (with the token from the URL fragment, asking for a viewer role
// and for annotations in the compact form, read back by compact.js), then scene.get and a
// subscription to every attack mode of the scene, filtered to the selected attacker's pairs
// (all it draws: the degree of every token against it, and the pair's panel), made again
// whenever the attacker changes. Every annotations
// push brings the scene to a new revision; the page then asks scene.get again (at most one
// in flight: a burst of moves costs one fetch) and cover.query with lines for the selected
// pair. Nothing here changes the scene: viewer roles cannot.
//
// Read-only debug state for tests and curious streamers: window.__covercastOverlay.
'use strict';

(function () {
  const query = new URLSearchParams(location.search);
  const fragment = new URLSearchParams(location.hash.slice(1));
  const MODES = ['melee', 'reach', 'ranged'];
  // The panel's width (px) grows with the screen: 340 at 720p, ~420 at 1080p; with its
  // padding and margins (overlay.css) it takes PANEL_MARGIN more.
  const PANEL_MARGIN = 52;
  const panelWidth = () => Math.round(Math.min(460, Math.max(340, window.innerWidth * 0.22)));
  const layout = query.get('layout') === 'card' ? 'card' : 'map';
  const CORNERS = ['bl', 'br', 'tl', 'tr'];
  const config = {
    layout,
    // The attack card is made to sit in a corner of an OBS scene: see-through by default.
    corner: CORNERS.includes(query.get('corner')) ? query.get('corner') : 'bl',
    follow: query.get('follow') !== '0',
    legend: query.get('legend') !== '0',
    scene: query.get('scene') || 'demo',
    token: fragment.get('token') || query.get('token') || null,
    role: query.get('role') || 'overlay',
    mode: MODES.includes(query.get('mode')) ? query.get('mode') : 'ranged',
    transparent: query.get('transparent') === '1'
      || (layout === 'card' && query.get('transparent') !== '0'),
    panel: query.get('panel') !== '0',
    grid: query.get('grid') !== '0',
  };
  if (query.get('token')) {
    // A token in the query string travels to the server (and its logs); say so once.
    console.warn('covercast overlay: put the token in the fragment (#token=...), not ?token=');
  }

  // Foundry's disposition colours: secret, hostile, neutral, friendly.
  const DISPOSITION = { '-2': '#a612d4', '-1': '#e72124', '0': '#f1d836', '1': '#43dfdf' };
  const DEGREE = {
    none: '#5cd65c', soft: '#9ad0ff', partial: '#ffe066', lesser: '#ffe066',
    cover: '#ffa94d', standard: '#ffa94d', improved: '#d291ff', greater: '#d291ff',
    three_quarters: '#d291ff',
    total: '#ff5c5c',
  };
  // Flags of the chosen mode's annotation worth a line in the panel (docs/protocol.md,
  // flags): [text, shown only with line of effect].
  const FLAG_NOTES = {
    can_hide: ['target may hide'],
    improved_evasion: ['improved evasion'],
    friendly_fire: ['a miss may hit someone else (friendly fire)'],
    cannot_act_toward_cover: ['target cannot act toward its cover'],
  };
  const REGION = {
    blocking: 'rgba(120, 124, 135, 0.9)', cover: 'rgba(160, 110, 60, 0.35)',
    improved: 'rgba(80, 140, 230, 0.35)', obscuring: 'rgba(180, 180, 180, 0.25)',
  };

  const canvas = document.getElementById('map');
  const panel = document.getElementById('panel');
  const card = document.getElementById('card');
  const legend = document.getElementById('legend');
  const statusBox = document.getElementById('status');
  document.documentElement.classList.add('layout-' + layout);
  card.classList.add('corner-' + config.corner);
  const ctx = canvas.getContext('2d');
  if (config.transparent) document.documentElement.classList.add('transparent');

  const state = {
    connected: false,
    role: null,
    compact: false, // the server sends annotations in the compact form (welcome.compact)
    problem: null,
    scene: null,            // the scene message's `scene` (documents), or null
    sceneRevision: 0,
    annotations: new Map(), // "attacker|target|mode" -> annotation
    annotationRevision: 0,
    subscribed: false,
    // The filter of the subscription last asked for (its JSON), or null: a new one is
    // asked for when the selected attacker changes.
    ask: null,
    sceneInFlight: false,
    queryInFlight: false,
    pairLines: null,        // {attacker, target, mode, revision, annotation} from cover.query
    attacker: query.get('attacker'),
    target: query.get('target'),
    mode: config.mode,
    bounds: null,           // grow-only scene rectangle, so the view does not jump
    view: { scale: 1, ox: 0, oy: 0 },
    draws: 0,
    // The last focus push (docs/protocol.md 3.18): when it came and when it was drawn.
    focus: null,
    focusPending: false,
    // Ids the URL asked for, checked once the scene arrives (a clear error if absent).
    urlPair: { attacker: query.get('attacker'), target: query.get('target') },
    labels: [],             // screen rectangles of the token names drawn last
    blockingWalls: [],
  };

  let ws = null;
  let nextId = 1;
  const pending = new Map(); // request id -> what it was for
  let backoff = 500;
  let retryTimer = null;

  // -- connection ------------------------------------------------------------------------

  function connect() {
    const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
    ws = new WebSocket(scheme + location.host + '/');
    setStatus('connecting to ' + location.host + '…');
    ws.onopen = () => {
      const hello = { type: 'hello', protocol: 1, client: 'covercast-overlay', role: config.role,
                      compact: true };
      if (config.token) hello.token = config.token;
      ws.send(JSON.stringify(hello));
    };
    ws.onmessage = (event) => {
      if (typeof event.data !== 'string') return; // we only send text: replies are JSON
      handle(window.CovercastCompact.expand(JSON.parse(event.data)));
    };
    ws.onclose = (event) => {
      state.connected = false;
      state.subscribed = false;
      state.ask = null;
      state.sceneInFlight = false;
      state.queryInFlight = false;
      pending.clear();
      const why = event.reason ? ' (' + event.reason + ')' : '';
      const wait = event.reason === 'access denied' ? 10000 : backoff;
      setStatus('disconnected' + why + '; retrying in ' + Math.round(wait / 1000) + ' s', true);
      backoff = Math.min(backoff * 2, 10000);
      // Jitter, so a room full of overlays does not reconnect in lockstep.
      setTimeout(connect, wait * (0.75 + Math.random() * 0.5));
      draw();
    };
  }

  function send(message, purpose) {
    if (!ws || ws.readyState !== WebSocket.OPEN) return;
    const id = nextId++;
    pending.set(id, purpose);
    ws.send(JSON.stringify(Object.assign({}, message, { id })));
  }

  function follow() {
    clearTimeout(retryTimer);
    subscribe();
    fetchScene();
  }

  /** What the page draws needs the selected attacker's pairs only: the server sends (and
   *  computes) no others, so a scene of a thousand tokens stays cheap to watch. With
   *  nobody selected, every pair (flanking marks for everyone, as the table shows). */
  function filter() {
    return state.attacker ? { attackers: [state.attacker] } : {};
  }

  function subscribe() {
    const ask = filter();
    state.ask = JSON.stringify(ask);
    send(Object.assign({ type: 'subscribe', scene: config.scene }, ask), 'subscribe');
  }

  /** Subscribe again when the selection asks for another filter (the server replaces
   *  the subscription and sends its full set). */
  function refollow() {
    if (state.connected && state.ask !== null && state.ask !== JSON.stringify(filter())) {
      subscribe();
    }
  }

  function fetchScene() {
    if (state.sceneInFlight) return;
    state.sceneInFlight = true;
    send({ type: 'scene.get', scene: config.scene }, 'scene');
  }

  function fetchPair() {
    const { attacker, target, mode } = state;
    if (!attacker || !target || state.queryInFlight || !state.scene) return;
    if (!tokenById(attacker) || !tokenById(target)) return;
    state.queryInFlight = true;
    send({ type: 'cover.query', scene: config.scene, attacker, target, attack: mode,
           lines: true }, 'pair');
  }

  function handle(msg) {
    const purpose = msg.id !== undefined ? pending.get(msg.id) : undefined;
    if (msg.id !== undefined) pending.delete(msg.id);
    switch (msg.type) {
      case 'welcome':
        state.connected = true;
        state.role = msg.role || 'gm';
        state.compact = msg.compact === true;
        state.problem = null;
        backoff = 500;
        follow();
        break;
      case 'scene':
        state.sceneInFlight = false;
        state.scene = msg.scene;
        state.sceneRevision = msg.revision;
        growBounds();
        checkUrlPair();
        if (state.annotationRevision > state.sceneRevision) fetchScene();
        fetchPair(); // the lines drawn stay until the new ones arrive: no flicker
        break;
      case 'annotations':
        onAnnotations(msg);
        break;
      case 'focus':
        onFocus(msg);
        break;
      case 'cover.result':
        state.queryInFlight = false;
        state.pairLines = {
          attacker: msg.annotation.attacker, target: msg.annotation.target,
          mode: msg.annotation.mode, revision: msg.revision, annotation: msg.annotation,
        };
        if (msg.revision < state.sceneRevision || msg.annotation.attacker !== state.attacker
            || msg.annotation.target !== state.target || msg.annotation.mode !== state.mode) {
          fetchPair(); // the selection or the scene moved on while it was asked
        }
        break;
      case 'error':
        onError(msg, purpose);
        break;
    }
    draw();
  }

  function onAnnotations(msg) {
    if (msg.full) {
      state.annotations.clear();
      if (msg.id === undefined) {
        // A full set nobody asked for: the scene was unloaded (section 3.14). Wait for it.
        state.scene = null;
        state.subscribed = false;
        problem('scene ' + config.scene + ' was unloaded; waiting for it');
        retryTimer = setTimeout(follow, 3000);
        return;
      }
      state.subscribed = true;
      state.problem = null;
    }
    for (const key of msg.removed || []) state.annotations.delete(key.join('|'));
    for (const a of msg.annotations) {
      state.annotations.set(a.attacker + '|' + a.target + '|' + a.mode, a);
    }
    state.annotationRevision = msg.revision;
    if (msg.revision > state.sceneRevision) fetchScene();
  }

  /** The gm's focus: the pair the table looks at now. Followed unless the URL says
   *  follow=0; a hidden token never arrives here (the server nulls it for viewers). */
  function onFocus(msg) {
    if (msg.scene !== config.scene) return;
    state.focus = { attacker: msg.attacker, target: msg.target, mode: msg.mode,
                    receivedAt: performance.now(), drawnAt: null };
    if (!config.follow) return;
    state.attacker = msg.attacker;
    state.target = msg.target;
    if (msg.mode && MODES.includes(msg.mode)) state.mode = msg.mode;
    state.urlPair = { attacker: null, target: null };
    state.pairLines = null;
    state.focusPending = true;
    fetchPair();
  }

  /** An overlay URL naming a token the scene does not have (or hides from viewers) says
   *  so, instead of silently showing nothing. */
  function checkUrlPair() {
    const missing = [];
    for (const side of ['attacker', 'target']) {
      const id = state.urlPair[side];
      if (id && !tokenById(id)) missing.push(side + ' ' + JSON.stringify(id));
    }
    if (!missing.length) {
      if (state.problem && state.problem.startsWith('the URL')) state.problem = null;
      return;
    }
    const names = state.scene.tokens.map((t) => t.id).sort().slice(0, 12).join(', ');
    problem('the URL names ' + missing.join(' and ') + ', not a token of scene '
            + config.scene + ' (its tokens: ' + (names || 'none') + ')');
  }

  function onError(msg, purpose) {
    if (purpose === 'scene') state.sceneInFlight = false;
    if (purpose === 'pair') {
      state.queryInFlight = false;
      state.pairLines = null;
      if (msg.code === 'unknown_token') {
        // The token left the scene (or was hidden from us): forget it.
        if (msg.path === '$.attacker') state.attacker = null;
        if (msg.path === '$.target') state.target = null;
      }
      return;
    }
    if (purpose === 'subscribe' && msg.code === 'unknown_token') {
      // The attacker left the scene (or was hidden) before the subscription reached it.
      state.attacker = null;
      refollow();
      return;
    }
    if (msg.code === 'unknown_scene' && (purpose === 'subscribe' || purpose === 'scene')) {
      state.scene = null;
      problem('no scene ' + config.scene + ' on the server yet; waiting for it');
      clearTimeout(retryTimer);
      retryTimer = setTimeout(follow, 3000);
      return;
    }
    problem(msg.message);
  }

  function problem(text) {
    state.problem = text;
  }

  function setStatus(text, bad) {
    statusBox.textContent = text;
    statusBox.classList.toggle('problem', !!bad);
  }

  // -- geometry helpers ---------------------------------------------------------------------

  function tokenById(id) {
    if (!state.scene) return null;
    return state.scene.tokens.find((t) => t.id === id) || null;
  }

  function gridSize() {
    return state.scene ? state.scene.grid.size || 100 : 100;
  }

  // The scene's hex layout (clients/overlay/hex.js), or null on a square (or gridless) scene.
  function hexLayout() {
    return state.scene ? window.CovercastHex.layout(state.scene.grid) : null;
  }

  function tokenRect(t) {
    const g = gridSize();
    return { x: t.x, y: t.y, w: (t.width || 1) * g, h: (t.height || 1) * g };
  }

  /** Foundry's token shape (v13 `shape`, v12 `hexagonalShape`; RECTANGLE_1 by default), as
   *  server/scene.py _token_shape reads it. */
  function tokenShapeId(t) {
    for (const v of [t.shape, t.hexagonalShape]) {
      if (Number.isInteger(v) && v >= 0 && v <= 5) return v;
    }
    return 4;
  }

  /** Where a token stands, as drawn and hit: on a square grid its rectangle and centre; on a
   *  hex grid its occupied hexes (geometry/hex.py footprint), their outline (the hex edges
   *  not shared by two of them), bounding box and Foundry's token centre. */
  function footprint(t) {
    const L = hexLayout();
    if (!L) {
      const r = tokenRect(t);
      return { hex: null, rect: r, centre: { x: r.x + r.w / 2, y: r.y + r.h / 2 } };
    }
    const H = window.CovercastHex;
    const fp = H.footprint(L, t.x, t.y, t.width || 1, t.height || 1, tokenShapeId(t));
    const hexes = fp.cells.map(([i, j]) => H.vertices(L, i, j));
    const edges = new Map(); // shared corners are bit-identical: exact string keys
    for (const v of hexes) {
      for (let k = 0; k < 6; k++) {
        const a = v[k], b = v[(k + 1) % 6];
        const ka = a.join(','), kb = b.join(',');
        const key = ka < kb ? ka + '|' + kb : kb + '|' + ka;
        edges.set(key, edges.has(key) ? null : [a, b]);
      }
    }
    const all = hexes.flat();
    const xs = all.map((p) => p[0]);
    const ys = all.map((p) => p[1]);
    const x0 = Math.min(...xs), y0 = Math.min(...ys);
    return {
      hex: { layout: L, cells: new Set(fp.cells.map((c) => c.join(','))), hexes,
             outline: Array.from(edges.values()).filter((e) => e) },
      rect: { x: x0, y: y0, w: Math.max(...xs) - x0, h: Math.max(...ys) - y0 },
      centre: { x: fp.centre[0], y: fp.centre[1] },
    };
  }

  /** Whether scene point p is on the token as drawn: its rectangle, or one of its hexes. */
  function hits(f, p) {
    if (f.hex) return f.hex.cells.has(window.CovercastHex.cellAt(f.hex.layout, p.x, p.y).join(','));
    const r = f.rect;
    return p.x >= r.x && p.x <= r.x + r.w && p.y >= r.y && p.y <= r.y + r.h;
  }

  function growBounds() {
    const s = state.scene;
    const xs = [];
    const ys = [];
    for (const w of s.walls) { xs.push(w.c[0], w.c[2]); ys.push(w.c[1], w.c[3]); }
    for (const t of s.tokens) {
      const r = footprint(t).rect;
      xs.push(r.x, r.x + r.w); ys.push(r.y, r.y + r.h);
    }
    for (const r of s.regions || []) {
      const pts = r.points || [];
      for (let i = 0; i + 1 < pts.length; i += 2) { xs.push(pts[i]); ys.push(pts[i + 1]); }
    }
    if (!xs.length) return;
    const pad = gridSize() / 2;
    const b = { x0: Math.min(...xs) - pad, y0: Math.min(...ys) - pad,
                x1: Math.max(...xs) + pad, y1: Math.max(...ys) + pad };
    const old = state.bounds;
    state.bounds = old ? { x0: Math.min(old.x0, b.x0), y0: Math.min(old.y0, b.y0),
                           x1: Math.max(old.x1, b.x1), y1: Math.max(old.y1, b.y1) } : b;
  }

  function fitView() {
    const dpr = window.devicePixelRatio || 1;
    const cw = canvas.clientWidth;
    const h = canvas.clientHeight;
    // The panel has a column of its own on wide screens, so it never covers the map (and the
    // map does not jump when a pair is selected).
    panel.style.width = panelWidth() + 'px';
    const w = config.panel && cw > 800 ? cw - panelWidth() - PANEL_MARGIN : cw;
    if (canvas.width !== Math.round(cw * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(cw * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const b = state.bounds || { x0: 0, y0: 0, x1: 1000, y1: 1000 };
    const scale = Math.min(w / (b.x1 - b.x0), h / (b.y1 - b.y0));
    const ox = (w - (b.x1 - b.x0) * scale) / 2 - b.x0 * scale;
    const oy = (h - (b.y1 - b.y0) * scale) / 2 - b.y0 * scale;
    state.view = { scale, ox, oy, dpr };
    ctx.setTransform(dpr * scale, 0, 0, dpr * scale, dpr * ox, dpr * oy);
  }

  function toScene(clientX, clientY) {
    const r = canvas.getBoundingClientRect();
    const v = state.view;
    return { x: (clientX - r.left - v.ox) / v.scale, y: (clientY - r.top - v.oy) / v.scale };
  }

  function annotation(attacker, target, mode) {
    return state.annotations.get(attacker + '|' + target + '|' + mode) || null;
  }

  // -- drawing -----------------------------------------------------------------------------

  function draw() {
    refollow();
    if (config.layout === 'card') {
      drawCard();
      finishDraw();
      return;
    }
    fitView();
    const v = state.view;
    ctx.save();
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.restore();
    const px = 1 / v.scale; // one screen pixel in scene units
    if (state.scene) {
      if (!config.transparent && state.bounds) {
        const b = state.bounds;
        ctx.fillStyle = '#22252d';
        ctx.fillRect(b.x0, b.y0, b.x1 - b.x0, b.y1 - b.y0);
      }
      if (config.grid) drawGrid(px);
      drawRegions();
      const blocking = blockingWalls();
      drawWalls(px, blocking);
      drawFlanking(px);
      drawTokens(px);
      drawPair(px); // over the tokens: a line's start is never hidden under a disc
      drawLabels(px);
    }
    drawPanel();
    drawLegend();
    finishDraw();
  }

  function finishDraw() {
    if (state.focusPending && state.focus) {
      state.focus.drawnAt = performance.now();
      state.focusPending = false;
    }
    if (state.connected) {
      setStatus(state.problem || (config.transparent ? ''
        : config.scene + ' · revision ' + state.sceneRevision + ' · ' + state.role),
        !!state.problem);
    }
    state.draws += 1;
    publish();
  }

  // -- the attack card -------------------------------------------------------------------

  const STAT = { ac: 'AC', reflex: 'Reflex', hide: 'Hide', attack: 'attack', stealth: 'Stealth',
                 defense: 'Defense', agility: 'Agility', fortitude: 'Fortitude', will: 'Will',
                 dex_save: 'Dex save', resistance: 'resistance' };

  function statName(stat) {
    return STAT[stat] || stat.replace(/_/g, ' ');
  }

  function signed(v) {
    return (v >= 0 ? '+' : '−') + Math.abs(v);
  }

  /** What a pair's annotation says, in words: the headline degree, the numbers, and the
   *  reasons (each once, after the numbers it explains) and flags a table acts on. */
  function describe(ann, withFlanking = true) {
    if (!ann) return { degree: 'working it out…', key: null, numbers: [], why: [] };
    const reachable = ann.mode === 'ranged' || ann.flags.in_reach;
    if (!ann.loe) {
      return { degree: 'no line of effect', key: 'total', numbers: [],
               why: ['total cover: it cannot be targeted'] };
    }
    if (!reachable) return { degree: 'out of reach', key: 'out', numbers: [], why: [] };
    const word = ann.cover.replace(/_/g, '-');
    const degree = ann.cover === 'none' ? 'no cover'
      : word.endsWith('cover') ? word : word + ' cover';
    const numbers = ann.modifiers.map((m) => signed(m.value) + ' ' + statName(m.stat)
      + (m.damage && m.damage.length ? ' vs ' + m.damage.join('/') : ''));
    const groups = new Map();
    for (const m of ann.modifiers) {
      if (!m.reason) continue;
      if (!groups.has(m.reason)) groups.set(m.reason, []);
      groups.get(m.reason).push(signed(m.value) + ' ' + statName(m.stat));
    }
    // A reason that only repeats the degree ("improved cover") says nothing new.
    const why = Array.from(groups).filter(([reason]) => reason !== degree)
      .map(([reason, nums]) => nums.join(', ') + ': ' + reason);
    for (const [flag, [text]] of Object.entries(FLAG_NOTES)) {
      if (ann.flags[flag]) why.push(text);
    }
    if (withFlanking && ann.flags.flanking) why.push('flanking' + (ann.flankers && ann.flankers.length
      ? ' with ' + ann.flankers.map((id) => nameOf(id)).join(', ') : ''));
    if (ann.flags.off_guard) why.push('target is off-guard');
    if (ann.flags.advantage) why.push('attack with advantage');
    return { degree, key: ann.cover, numbers, why };
  }

  function nameOf(id) {
    const t = tokenById(id);
    return t ? t.name || t.id : id;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function drawCard() {
    const a = tokenById(state.attacker);
    const t = tokenById(state.target);
    if (!a) {
      card.hidden = true;
      card.replaceChildren();
      return;
    }
    card.hidden = false;
    const who = el('div', 'who');
    who.append(el('span', 'name attacker', a.name || a.id), el('span', 'arrow', ' → '),
               el('span', 'name target', t ? t.name || t.id : 'no target yet'));
    const parts = [who];
    if (t) {
      const ann = annotation(a.id, t.id, state.mode);
      const d = describe(ann);
      const degree = el('div', 'degree', d.degree);
      const colour = d.key === 'out' ? '#b8bec9' : DEGREE[d.key] || '#ffffff';
      degree.style.color = colour;
      card.style.borderLeftColor = colour;
      parts.push(el('div', 'mode', state.mode + ' attack'), degree);
      if (d.numbers.length) {
        const numbers = el('div', 'numbers');
        for (const n of d.numbers) numbers.append(el('span', 'number', n));
        parts.push(numbers);
      }
      for (const line of d.why) parts.push(el('div', 'why', line));
    }
    card.replaceChildren(...parts);
  }

  // -- the legend --------------------------------------------------------------------------

  const LEGEND = [
    ['line', 'clear line', '#3ddc84', 'solid'],
    ['line', 'line past an obstacle', '#ffd43b', 'solid'],
    ['line', 'blocked line', '#ff4d4d', 'dashed'],
    ['wall', 'wall', '#f2f2f2', 'solid'],
    ['wall', 'wall blocking the pair', '#ff4d4d', 'solid'],
    ['wall', 'door: closed / open / locked', '#ffa94d', 'solid'],
    ['wall', 'low wall, parapet', '#c8a66b', 'dashed'],
    ['wall', 'arrow slit', '#4dabf7', 'solid'],
  ];

  function drawLegend() {
    if (!config.legend || !state.scene || config.layout !== 'map') {
      legend.hidden = true;
      return;
    }
    if (legend.childElementCount) {
      legend.hidden = false;
      legend.style.width = panelWidth() + 'px';
      return;
    }
    legend.style.width = panelWidth() + 'px';
    for (const [, text, colour, style] of LEGEND) {
      const row = el('div', 'entry');
      const swatch = el('span', 'swatch');
      swatch.style.borderTop = '4px ' + style + ' ' + colour;
      row.append(swatch, el('span', 'label', text));
      legend.append(row);
    }
    legend.hidden = false;
  }

  function drawGrid(px) {
    const b = state.bounds;
    if (!b) return;
    const g = gridSize();
    ctx.strokeStyle = config.transparent ? 'rgba(255,255,255,0.12)' : 'rgba(255,255,255,0.07)';
    ctx.lineWidth = px;
    const L = hexLayout();
    if (L) {
      drawHexGrid(L, b);
      return;
    }
    ctx.beginPath();
    for (let x = Math.ceil(b.x0 / g) * g; x <= b.x1; x += g) {
      ctx.moveTo(x, b.y0); ctx.lineTo(x, b.y1);
    }
    for (let y = Math.ceil(b.y0 / g) * g; y <= b.y1; y += g) {
      ctx.moveTo(b.x0, y); ctx.lineTo(b.x1, y);
    }
    ctx.stroke();
  }

  /** Every hex meeting the scene rectangle b, clipped to it (one path: a shared edge is
   *  painted once). Rows of hexes are 3/4 of a hex apart (columns, on column layouts). */
  function drawHexGrid(L, b) {
    const H = window.CovercastHex;
    const along = L.columns ? [b.y0, b.y1, L.size] : [b.x0, b.x1, L.size];
    const across = L.columns ? [b.x0, b.x1, 0.75 * L.sizeX] : [b.y0, b.y1, 0.75 * L.sizeY];
    const n0 = Math.floor(across[0] / across[2]) - 1, n1 = Math.ceil(across[1] / across[2]) + 1;
    const m0 = Math.floor(along[0] / along[2]) - 1, m1 = Math.ceil(along[1] / along[2]) + 1;
    if ((n1 - n0) * (m1 - m0) > 40000) return; // hexes under a screen pixel or two: no grid
    ctx.save();
    ctx.beginPath();
    ctx.rect(b.x0, b.y0, b.x1 - b.x0, b.y1 - b.y0);
    ctx.clip();
    ctx.beginPath();
    for (let n = n0; n <= n1; n++) {
      for (let m = m0; m <= m1; m++) {
        const v = L.columns ? H.vertices(L, m, n) : H.vertices(L, n, m);
        ctx.moveTo(v[0][0], v[0][1]);
        for (let k = 1; k < 6; k++) ctx.lineTo(v[k][0], v[k][1]);
        ctx.closePath();
      }
    }
    ctx.stroke();
    ctx.restore();
  }

  function drawRegions() {
    for (const r of state.scene.regions || []) {
      const pts = r.points;
      if (!pts || pts.length < 6) continue; // Foundry-shaped regions are not drawn
      ctx.beginPath();
      ctx.moveTo(pts[0], pts[1]);
      for (let i = 2; i + 1 < pts.length; i += 2) ctx.lineTo(pts[i], pts[i + 1]);
      ctx.closePath();
      ctx.fillStyle = REGION[r.kind] || REGION.obscuring;
      ctx.fill();
    }
  }

  /** How a wall is drawn: its colour, width (screen px), dash, and marks: `jambs` (short
   *  ticks across both ends: a door), `slit` (a blue opening in its middle: an arrow slit). */
  function wallStyle(w) {
    const own = w.flags && w.flags.covercast ? w.flags.covercast.cover : null;
    const band = w.flags && w.flags['wall-height'];
    if (w.door) {
      if (w.ds === 1) return { color: '#6fdc8c', width: 3, dash: [7, 6], jambs: true };  // open
      if (w.ds === 2) return { color: '#ff6b6b', width: 6, dash: [], jambs: true };      // locked
      return { color: '#ffa94d', width: 6, dash: [], jambs: true };                      // closed
    }
    if (w.sight === 0) return { color: 'rgba(200,200,200,0.35)', width: 2, dash: [2, 6] };
    if (own === 'low' || (band && band.top !== null && band.top !== undefined)) {
      return { color: '#c8a66b', width: 5, dash: [10, 6] };
    }
    if (own === 'improved') return { color: '#f2f2f2', width: 5, dash: [], slit: true };
    return { color: '#f2f2f2', width: 5, dash: [] };
  }

  /** Walls named by the blocked lines of the pair shown: drawn highlighted. */
  function blockingWalls() {
    const got = state.pairLines;
    const out = new Set();
    if (!got || got.attacker !== state.attacker || got.target !== state.target) return out;
    for (const line of got.annotation.lines || []) {
      if (line.blocked) for (const id of line.walls || []) out.add(id);
    }
    state.blockingWalls = Array.from(out).sort();
    return out;
  }

  function drawWalls(px, blocking) {
    ctx.lineCap = 'round';
    for (const w of state.scene.walls) {
      const s = wallStyle(w);
      const [x0, y0, x1, y1] = w.c;
      if (blocking.has(w.id)) {
        // A red glow under the wall that stops the pair's lines.
        ctx.strokeStyle = 'rgba(255, 77, 77, 0.55)';
        ctx.lineWidth = (s.width + 10) * px;
        ctx.setLineDash([]);
        ctx.beginPath(); ctx.moveTo(x0, y0); ctx.lineTo(x1, y1); ctx.stroke();
      }
      ctx.strokeStyle = s.color;
      ctx.lineWidth = s.width * px;
      ctx.setLineDash(s.dash.map((d) => d * px));
      ctx.beginPath(); ctx.moveTo(x0, y0); ctx.lineTo(x1, y1); ctx.stroke();
      ctx.setLineDash([]);
      const len = Math.hypot(x1 - x0, y1 - y0) || 1;
      const nx = -(y1 - y0) / len, ny = (x1 - x0) / len; // unit normal
      if (s.jambs) {
        ctx.lineWidth = 3 * px;
        const k = 9 * px;
        for (const [x, y] of [[x0, y0], [x1, y1]]) {
          ctx.beginPath(); ctx.moveTo(x - nx * k, y - ny * k); ctx.lineTo(x + nx * k, y + ny * k);
          ctx.stroke();
        }
      }
      if (s.slit) {
        // The opening: a blue middle third, with ticks across it.
        const ax = x0 + (x1 - x0) / 3, ay = y0 + (y1 - y0) / 3;
        const bx = x0 + 2 * (x1 - x0) / 3, by = y0 + 2 * (y1 - y0) / 3;
        ctx.strokeStyle = '#4dabf7';
        ctx.lineWidth = 7 * px;
        ctx.beginPath(); ctx.moveTo(ax, ay); ctx.lineTo(bx, by); ctx.stroke();
        ctx.lineWidth = 3 * px;
        const k = 8 * px;
        for (const [x, y] of [[ax, ay], [bx, by]]) {
          ctx.beginPath(); ctx.moveTo(x - nx * k, y - ny * k); ctx.lineTo(x + nx * k, y + ny * k);
          ctx.stroke();
        }
      }
    }
  }

  function centre(t) {
    return footprint(t).centre;
  }

  function drawPair(px) {
    const a = tokenById(state.attacker);
    const t = tokenById(state.target);
    if (!a || !t) return;
    const got = state.pairLines;
    if (got && got.attacker === a.id && got.target === t.id && got.mode === state.mode) {
      // Drawn over the tokens (the attacker's end is never hidden under its disc) but not
      // over the target's body, which stays whole: the place the lines reach.
      ctx.save();
      const tf = footprint(t);
      ctx.beginPath();
      ctx.rect(tf.rect.x - 1e6, tf.rect.y - 1e6, 2e6, 2e6);
      addBody(tf, bodyRadius(tf));
      ctx.clip('evenodd');
      // Clear lines first, blocked ones over them; each with a dark edge, so a line reads
      // on any map, and a dot where it starts.
      const lines = (got.annotation.lines || []).slice()
        .sort((l1, l2) => Number(l1.blocked) - Number(l2.blocked));
      for (const line of lines) {
        const touched = (line.walls || []).length + (line.tokens || []).length
          + (line.regions || []).length;
        const colour = line.blocked ? '#ff4d4d' : touched ? '#ffd43b' : '#3ddc84';
        for (const [c, width, dashed] of [['rgba(0,0,0,0.6)', 5, false],
          [colour, 3, line.blocked]]) {
          ctx.strokeStyle = c;
          ctx.setLineDash(dashed ? [9 * px, 6 * px] : []);
          ctx.lineWidth = width * px;
          ctx.beginPath();
          ctx.moveTo(line.start[0], line.start[1]);
          ctx.lineTo(line.end[0], line.end[1]);
          ctx.stroke();
        }
        ctx.setLineDash([]);
        ctx.fillStyle = colour;
        ctx.beginPath();
        ctx.arc(line.start[0], line.start[1], 3.5 * px, 0, Math.PI * 2);
        ctx.fill();
      }
      ctx.restore();
    }
  }

  /** Flanking: dashed lines from the attacker's partners to the target's centre, under
   *  the tokens. */
  function drawFlanking(px) {
    const a = tokenById(state.attacker);
    const t = tokenById(state.target);
    if (!a || !t) return;
    // Flanking: the attacker's partners, from the melee annotation.
    const melee = annotation(a.id, t.id, 'melee');
    if (melee && melee.flags.flanking) {
      const c = centre(t);
      ctx.strokeStyle = '#ff9f1a';
      ctx.lineWidth = 3 * px;
      ctx.setLineDash([4 * px, 4 * px]);
      for (const id of [a.id, ...(melee.flankers || [])]) {
        const f = tokenById(id);
        if (!f) continue;
        const fc = centre(f);
        ctx.beginPath();
        ctx.moveTo(fc.x, fc.y);
        ctx.lineTo(c.x, c.y);
        ctx.stroke();
      }
      ctx.setLineDash([]);
    }
  }

  function flanked() {
    const out = new Set();
    for (const a of state.annotations.values()) {
      if (a.mode === 'melee' && a.flags.flanking) out.add(a.target);
    }
    return out;
  }

  /** The token's body: a disc on a square grid (as always), its hexes on a hex grid. */
  function tokenBody(f, radius) {
    ctx.beginPath();
    addBody(f, radius);
  }

  /** The body's outline added to the current path (a disc, or its hexes). */
  function addBody(f, radius) {
    if (!f.hex) {
      ctx.moveTo(f.centre.x + radius, f.centre.y);
      ctx.arc(f.centre.x, f.centre.y, radius, 0, Math.PI * 2);
      return;
    }
    for (const v of f.hex.hexes) {
      ctx.moveTo(v[0][0], v[0][1]);
      for (let k = 1; k < 6; k++) ctx.lineTo(v[k][0], v[k][1]);
      ctx.closePath();
    }
  }

  /** The radius of a token's disc on a square grid. */
  function bodyRadius(f) {
    return Math.min(f.rect.w, f.rect.h) / 2 - gridSize() * 0.08;
  }

  /** A ring round the token `gap` outside its disc; on a hex grid, its hexes' outline. */
  function ring(f, radius, gap) {
    ctx.beginPath();
    if (!f.hex) {
      ctx.arc(f.centre.x, f.centre.y, radius + gap, 0, Math.PI * 2);
    } else {
      for (const [a, b] of f.hex.outline) { ctx.moveTo(a[0], a[1]); ctx.lineTo(b[0], b[1]); }
    }
    ctx.stroke();
  }

  /** A token's body in its disposition colour, outlined; returns its disc's radius. */
  function paintBody(t, f, px) {
    const radius = bodyRadius(f);
    ctx.globalAlpha = t.hidden ? 0.45 : 1; // only a gm connection ever sees hidden tokens
    ctx.fillStyle = DISPOSITION[String(t.disposition === undefined ? -1 : t.disposition)]
      || DISPOSITION['-1'];
    tokenBody(f, radius);
    ctx.fill();
    ctx.lineWidth = 2 * px;
    ctx.strokeStyle = 'rgba(0,0,0,0.6)';
    if (f.hex) ring(f, radius, 0); else ctx.stroke();
    ctx.globalAlpha = 1;
    return radius;
  }

  function drawTokens(px) {
    const marks = flanked();
    const g = gridSize();
    const labels = [];
    for (const t of state.scene.tokens) {
      const f = footprint(t);
      const r = f.rect;
      const radius = paintBody(t, f, px);
      // The degree every other token has against the selected attacker.
      if (state.attacker && t.id !== state.attacker) {
        const ann = annotation(state.attacker, t.id, state.mode);
        if (ann) {
          ctx.strokeStyle = DEGREE[ann.cover] || '#ffffff';
          ctx.lineWidth = (t.id === state.target ? 7 : 4) * px;
          ring(f, radius, 5 * px);
        }
      }
      if (t.id === state.attacker) {
        ctx.strokeStyle = '#ffffff';
        ctx.lineWidth = 6 * px;
        ctx.setLineDash([6 * px, 4 * px]);
        ring(f, radius, 6 * px);
        ctx.setLineDash([]);
      }
      if (marks.has(t.id)) {
        // A flanked creature: an orange double chevron at its top-right; on a hex grid (no
        // empty corner there) inside its top hex, edged in black to stand out of the fill.
        const [x, y] = f.hex ? chevronOnHex(f, g) : [r.x + r.w - g * 0.12, r.y + g * 0.12];
        for (const [colour, width] of f.hex ? [['#000000', 6], ['#ff9f1a', 3]]
          : [['#ff9f1a', 3]]) {
          ctx.strokeStyle = colour;
          ctx.lineWidth = width * px;
          for (const d of [0, g * 0.08]) {
            ctx.beginPath();
            ctx.moveTo(x - g * 0.1, y + d + g * 0.08);
            ctx.lineTo(x, y + d);
            ctx.lineTo(x + g * 0.1, y + d + g * 0.08);
            ctx.stroke();
          }
        }
      }
      labels.push([t, f]);
    }
    state.pendingLabels = labels;
  }

  /** Every token's name, placed where it collides with no other name: under the token,
   *  else over it, else to its right or left; drawn last, over lines and walls. */
  function drawLabels(px) {
    const g = gridSize();
    const font = Math.max(14 * px, g * 0.17);
    ctx.font = 'bold ' + font + 'px system-ui, "DejaVu Sans", sans-serif';
    ctx.textBaseline = 'top';
    ctx.textAlign = 'left';
    const placed = [];
    const overlaps = (r) => placed.some((q) => r.x < q.x + q.w && q.x < r.x + r.w
      && r.y < q.y + q.h && q.y < r.y + r.h);
    for (const [t, f] of state.pendingLabels || []) {
      const label = t.name || t.id;
      const w = ctx.measureText(label).width;
      const h = font * 1.2;
      const r = f.rect;
      const cx = f.centre.x;
      const candidates = [
        { x: cx - w / 2, y: r.y + r.h + 2 * px },           // under
        { x: cx - w / 2, y: r.y - h - 2 * px },             // over
        { x: r.x + r.w + 4 * px, y: f.centre.y - h / 2 },   // right
        { x: r.x - w - 4 * px, y: f.centre.y - h / 2 },     // left
      ];
      const spot = candidates.map((c) => ({ x: c.x, y: c.y, w, h })).find((c) => !overlaps(c))
        || Object.assign({}, candidates[0], { w, h });
      placed.push(spot);
      ctx.lineWidth = 4 * px;
      ctx.strokeStyle = 'rgba(0,0,0,0.9)';
      ctx.strokeText(label, spot.x, spot.y + font * 0.1);
      ctx.fillStyle = '#ffffff';
      ctx.fillText(label, spot.x, spot.y + font * 0.1);
    }
    const v = state.view;
    state.labels = placed.map((q) => ({ x: v.ox + q.x * v.scale, y: v.oy + q.y * v.scale,
                                        w: q.w * v.scale, h: q.h * v.scale }));
  }

  /** Where a hex token's flanking chevron goes: a fifth of a hex below the top of its
   *  top-most (then right-most) hex, where the hex is wide enough on every layout. */
  function chevronOnHex(f, g) {
    let best = null;
    for (const v of f.hex.hexes) {
      const top = Math.min(...v.map((p) => p[1]));
      const cx = (v[0][0] + v[3][0]) / 2; // opposite corners: the centre's x
      if (!best || top < best[1] - 1e-6 || (Math.abs(top - best[1]) <= 1e-6 && cx > best[0])) {
        best = [cx, top];
      }
    }
    return [best[0], best[1] + g * 0.2];
  }

  function cell(row, text, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function modifiersText(a) {
    if (!a.loe) return 'no line of effect';
    const mods = a.modifiers.map((m) => (m.value >= 0 ? '+' : '') + m.value + ' ' + m.stat);
    return mods.length ? mods.join(', ') : 'no modifiers';
  }

  function drawPanel() {
    const a = tokenById(state.attacker);
    const t = tokenById(state.target);
    if (!config.panel || !a) {
      panel.hidden = true;
      return;
    }
    panel.hidden = false;
    panel.replaceChildren();
    const h = document.createElement('h2');
    h.textContent = (a.name || a.id) + (t ? ' → ' + (t.name || t.id) : ' → (click a target)');
    panel.appendChild(h);
    if (!t) return;
    const table = document.createElement('table');
    for (const mode of MODES) {
      const ann = annotation(a.id, t.id, mode);
      const row = document.createElement('tr');
      row.className = 'mode-row' + (mode === state.mode ? ' chosen' : '');
      row.dataset.mode = mode;
      cell(row, mode);
      if (!ann) {
        cell(row, '–');
      } else {
        const reachable = mode === 'ranged' || ann.flags.in_reach;
        // Degree names as words: three_quarters reads "three-quarters".
        const degree = cell(row, reachable ? ann.cover.replace(/_/g, '-') : 'out of reach',
                            'degree');
        degree.style.color = reachable ? DEGREE[ann.cover] || '#ffffff' : '#9aa0aa';
        cell(row, reachable ? modifiersText(ann) : '');
      }
      table.appendChild(row);
    }
    panel.appendChild(table);
    const melee = annotation(a.id, t.id, 'melee');
    const notes = [];
    if (melee && melee.flags.flanking) {
      const partners = (melee.flankers || []).map((id) => {
        const f = tokenById(id);
        return f ? f.name || f.id : id;
      });
      notes.push('flanking' + (partners.length ? ' with ' + partners.join(', ') : ''));
    }
    const chosen = annotation(a.id, t.id, state.mode);
    if (chosen) {
      // Flanking is noted above, from the melee annotation, whatever the mode shown.
      notes.push(...describe(chosen, false).why);
    }
    for (const text of new Set(notes)) {
      const p = document.createElement('div');
      p.className = 'note';
      p.textContent = text;
      panel.appendChild(p);
    }
  }

  // -- input -------------------------------------------------------------------------------

  canvas.addEventListener('click', (event) => {
    const p = toScene(event.clientX, event.clientY);
    const hit = state.scene
      && state.scene.tokens.slice().reverse().find((t) => hits(footprint(t), p));
    if (!hit) {
      state.attacker = state.target = null;
    } else if (!state.attacker || state.target) {
      state.attacker = hit.id;
      state.target = null;
    } else if (hit.id === state.attacker) {
      state.attacker = null;
    } else {
      state.target = hit.id;
    }
    state.pairLines = null;
    fetchPair();
    draw();
  });

  panel.addEventListener('click', (event) => {
    const row = event.target.closest('tr.mode-row');
    if (!row) return;
    state.mode = row.dataset.mode;
    state.pairLines = null;
    fetchPair();
    draw();
  });

  window.addEventListener('resize', draw);

  // -- debug state -------------------------------------------------------------------------

  function publish() {
    const tokens = {};
    for (const t of state.scene ? state.scene.tokens : []) {
      const c = footprint(t).centre;
      tokens[t.id] = { x: t.x, y: t.y, centre: [c.x, c.y] };
    }
    const pair = state.pairLines;
    window.__covercastOverlay = Object.freeze({
      connected: state.connected,
      role: state.role,
      compact: state.compact,
      problem: state.problem,
      sceneRevision: state.sceneRevision,
      gridType: state.scene ? state.scene.grid.type : null,
      annotationRevision: state.annotationRevision,
      annotationCount: state.annotations.size,
      subscription: state.ask === null ? null : JSON.parse(state.ask),
      annotationAttackers: Array.from(new Set(Array.from(state.annotations.values())
        .map((a) => a.attacker))).sort(),
      annotationTokens: Array.from(new Set(Array.from(state.annotations.values())
        .flatMap((a) => [a.attacker, a.target]))).sort(),
      tokens,
      attacker: state.attacker,
      target: state.target,
      mode: state.mode,
      pair: pair ? { revision: pair.revision, cover: pair.annotation.cover,
                     lines: (pair.annotation.lines || []).length } : null,
      view: Object.assign({}, state.view),
      draws: state.draws,
      layout: config.layout,
      card: config.layout === 'card' && !card.hidden ? card.innerText : null,
      panel: panel.hidden ? null : panel.innerText,
      focus: state.focus ? Object.assign({}, state.focus) : null,
      labels: state.labels.map((r) => Object.assign({}, r)),
      blockingWalls: state.blockingWalls.slice(),
    });
  }

  draw();
  connect();
})();
