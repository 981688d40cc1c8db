/**
 * Covercast for Foundry VTT: the whole module, written against an `env` object holding
 * Foundry's globals (Hooks, game, canvas, ui, PIXI, document, WebSocket), so the same code
 * runs in Foundry (env = globalThis) and under node's test runner (env = stand-ins).
 *
 * Data flows one way: Foundry hooks -> protocol messages to the server (only on the elected
 * sender) -> annotation pushes -> a store of annotations -> what the user sees (a badge on
 * each targeted token, a line under each attack's chat card). Nothing is ever written to the
 * world's database: no flags, no ActiveEffects, no ChatMessage documents.
 */

export const MODULE_ID = "covercast";
export const VERSION = "0.1.0";
export const CLIENT_NAME = `foundry-covercast/${VERSION}`;
export const SOCKET = `module.${MODULE_ID}`;
export const MODES = ["melee", "reach", "ranged"];
const BADGE = "covercast-status";
const FAILED_RETRY_MS = 5000; // how often a change to a refused scene may retry loading it

// -- pure helpers -----------------------------------------------------------------------------

/**
 * The one client that talks to the server: the active GM with the lowest id (plain string
 * order, the same on every client), or null when no GM is connected.
 */
export function electSender(users) {
  let best = null;
  for (const user of users) {
    if (user.active && user.isGM && (best === null || user.id < best.id)) best = user;
  }
  return best;
}

/**
 * How long to wait before reconnect attempt `attempt` (0-based): exponential from `base`,
 * capped at `max`, with equal jitter (half fixed, half random) so that clients dropped by one
 * server restart do not all come back in the same millisecond.
 */
export function backoffDelay(attempt, { base = 500, max = 30000 } = {}, random = Math.random) {
  const cap = Math.min(max, base * 2 ** Math.min(attempt, 30));
  return cap / 2 + random() * (cap / 2);
}

const SIZES = {
  fine: "fine", fin: "fine", dim: "diminutive", diminutive: "diminutive", tiny: "tiny",
  sm: "small", small: "small", med: "medium", medium: "medium", lg: "large", large: "large",
  huge: "huge", grg: "gargantuan", gargantuan: "gargantuan", col: "colossal", colossal: "colossal",
};

/**
 * The creature's size category as Covercast names it, read from the common system layouts
 * (dnd5e and pf1 `system.traits.size` as a string, pf2e `system.traits.size.value`), or null
 * when the actor does not say (the server then guesses from the token's width).
 */
export function actorSize(actor) {
  let value = actor?.system?.traits?.size;
  if (value && typeof value === "object") value = value.value ?? value.base;
  return typeof value === "string" ? SIZES[value.toLowerCase()] ?? null : null;
}

/** The creature's natural reach in feet where the system records it (pf2e
 * `system.attributes.reach.base`), or null (the server then uses the size's). */
export function actorReach(actor) {
  const value = actor?.system?.attributes?.reach?.base;
  return typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : null;
}

/** What Covercast adds to a token from its actor: `size` and `reach`, null when unknown. */
export function actorExtras(actor) {
  return { size: actorSize(actor), reach: actorReach(actor) };
}

/**
 * Is this chat message an attack roll? Core Foundry has no attack event, so the systems'
 * own markers are read: dnd5e `flags.dnd5e.roll.type == "attack"`, pf2e
 * `flags.pf2e.context.type` (attack-roll, spell-attack-roll), pf1
 * `flags.pf1.metadata.rolls.attacks`. With `anyRoll`, every roll counts (other systems).
 */
export function isAttack(message, anyRoll = false) {
  const flags = message?.flags ?? {};
  if (flags.dnd5e?.roll?.type === "attack") return true;
  if (["attack-roll", "spell-attack-roll"].includes(flags.pf2e?.context?.type)) return true;
  if ((flags.pf1?.metadata?.rolls?.attacks?.length ?? 0) > 0) return true;
  return anyRoll && ((message?.rolls?.length ?? 0) > 0 || message?.isRoll === true);
}

/** The attack mode a badge shows: melee when the target is within natural reach, reach
 * when within a reach weapon's, ranged otherwise. */
export function pickMode(store, attacker, target) {
  for (const mode of ["melee", "reach"]) {
    const ann = store.get(attacker, target, mode);
    if (ann?.loe && ann.flags?.in_reach) return mode;
  }
  return "ranged";
}

const STAT_NAMES = { ac: "AC", reflex: "Reflex", hide: "Hide", attack: "attack" };
const COLORS = {
  none: 0xffffff, soft: 0xfff3a0, lesser: 0xfff3a0, partial: 0xffc870, cover: 0xffa040,
  standard: 0xffa040, improved: 0xff6040, greater: 0xff6040, total: 0xa0a0a0,
};

/**
 * An annotation in words: `label` for the token badge ("cover · flanked"), `text` for the
 * chat line ("cover (+4 AC, +2 Reflex); flanking with Rogue (+2 attack)"), and its degree.
 */
export function describe(ann, nameOf = (id) => id) {
  const degree = ann.loe ? ann.cover : "total";
  // Degrees are named as the ruleset names them; D&D's plain degree is itself "cover".
  const short = degree === "none" ? "no cover" : degree === "cover" ? "cover" : `${degree} cover`;
  const coverPhrase = degree === "total" ? "total cover (no line of effect)" : short;
  const fmt = (mods) => mods.map((m) => `${m.value >= 0 ? "+" : ""}${m.value} ${STAT_NAMES[m.stat] ?? m.stat}`).join(", ");
  const coverMods = ann.modifiers.filter((m) => m.kind !== "flanking");
  const flankMods = ann.modifiers.filter((m) => m.kind === "flanking");
  const flanking = Boolean(ann.flags?.flanking);
  let text = coverPhrase + (coverMods.length ? ` (${fmt(coverMods)})` : "");
  if (flanking) {
    const who = (ann.flankers ?? []).map(nameOf).join(", ");
    text += `; flanking${who ? ` with ${who}` : ""}${flankMods.length ? ` (${fmt(flankMods)})` : ""}`;
  }
  return {
    degree, flanking, mode: ann.mode, text,
    label: flanking ? `${short} · flanked` : short,
    color: COLORS[degree] ?? 0xffffff,
  };
}

// Scene collections Covercast never reads: dropped from a load that would not fit a frame.
const IGNORED_COLLECTIONS = ["drawings", "lights", "notes", "sounds", "templates", "tiles"];

function byteLength(text) {
  return new TextEncoder().encode(text).length;
}

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** The annotations of one scene, keyed by (attacker, target, mode), kept up to date from
 * full sets and deltas. */
export class AnnotationStore {
  constructor() {
    this.scene = null;
    this.revision = 0;
    this.byKey = new Map();
  }

  static key(attacker, target, mode) {
    return `${attacker}\u0000${target}\u0000${mode}`;
  }

  get(attacker, target, mode) {
    return this.byKey.get(AnnotationStore.key(attacker, target, mode)) ?? null;
  }

  get size() {
    return this.byKey.size;
  }

  clear(scene = null) {
    this.scene = scene;
    this.revision = 0;
    this.byKey.clear();
  }

  /** Apply an `annotations` message: a full set replaces everything, a delta replaces the
   * listed annotations and drops the removed keys. */
  apply(msg) {
    if (msg.full || msg.scene !== this.scene) this.clear(msg.scene);
    for (const ann of msg.annotations) {
      this.byKey.set(AnnotationStore.key(ann.attacker, ann.target, ann.mode), ann);
    }
    for (const [a, t, m] of msg.removed ?? []) this.byKey.delete(AnnotationStore.key(a, t, m));
    this.revision = msg.revision;
  }

  values() {
    return this.byKey.values();
  }
}

// -- the module -------------------------------------------------------------------------------

/**
 * The running module on one Foundry client. On the elected sender it owns the WebSocket:
 * hello, scene.load of the viewed scene, every token and wall diff, subscribe; it relays the
 * annotations of tokens players can see to the other clients over Foundry's module socket.
 * On every client it draws badges and chat lines from its store.
 */
export class Covercast {
  constructor(env, options = {}) {
    this.env = env;
    this.WebSocketClass = options.WebSocket ?? null;
    this.random = options.random ?? Math.random;
    this.setTimer = options.setTimeout ?? ((fn, ms) => setTimeout(fn, ms));
    this.clearTimer = options.clearTimeout ?? ((t) => clearTimeout(t));
    this.backoff = { base: options.backoffBase ?? 500, max: options.backoffMax ?? 30000 };
    this.connectTimeout = options.connectTimeout ?? 10000;
    // The server's frame limit comes in `welcome`; tests may lower it to exercise splitting.
    this.maxFrameBytes = options.maxFrameBytes ?? Infinity;
    this.store = new AnnotationStore();
    this.status = new Map(); // token id -> describe() of what its badge shows, for tests/API
    this.chatLines = new Map(); // chat message id -> lines appended under it
    this.isSender = false;
    this.ws = null;
    this.state = "idle"; // idle | connecting | open | closed | refused | stopped
    this.wanted = false;
    this.attempt = 0;
    this.retryTimer = null;
    this.resyncTimer = null;
    this.now = options.now ?? Date.now;
    this.failedAt = -Infinity;
    this.warned = new Map(); // scene id -> the refusal last shown
    this.nextId = 1;
    this.pending = new Map(); // request id -> {type, scene}
    this.loaded = new Set(); // scenes loaded on this connection (diffs go only to these)
    this.failed = new Set(); // scenes the server refused (no diffs until the next load)
    this.subscribed = null;
    this.extras = new Map(); // token id -> JSON of the size and reach last sent
    this.relayed = new Set(); // keys of the annotations the other clients hold
    this.welcome = null;
    this.connections = 0;
    this.lostNotified = false;
  }

  // -- Foundry plumbing -----------------------------------------------------------------------

  get game() { return this.env.game; }
  get canvas() { return this.env.canvas; }

  setting(key) {
    return this.game.settings.get(MODULE_ID, key);
  }

  notify(level, text) {
    this.env.ui?.notifications?.[level]?.(text);
  }

  /** Register every hook; settings and the rest follow Foundry's init and ready. */
  install() {
    const H = this.env.Hooks;
    H.once("init", () => this.init());
    H.once("ready", () => this.ready());
    H.on("userConnected", (user, connected) => this.elect(user, connected));
    H.on("updateUser", () => this.elect());
    H.on("canvasReady", () => this.onCanvasReady());
    H.on("createToken", (doc) => this.forward("token.create", doc, () => ({ tokens: [this.tokenData(doc)] })));
    H.on("updateToken", (doc, changed) => this.onUpdateToken(doc, changed));
    H.on("deleteToken", (doc) => this.forward("token.delete", doc, () => ({ ids: [doc.id] })));
    H.on("createWall", (doc) => this.forward("wall.create", doc, () => ({ walls: [doc.toObject()] })));
    H.on("updateWall", (doc, changed) => this.forward("wall.update", doc, () => ({ walls: [this.patch(doc, changed)] })));
    H.on("deleteWall", (doc) => this.forward("wall.delete", doc, () => ({ ids: [doc.id] })));
    for (const hook of ["createRegion", "updateRegion", "deleteRegion"]) {
      H.on(hook, (doc, changed) => this.onRegion(doc, changed));
    }
    H.on("updateScene", (scene, changed) => this.onUpdateScene(scene, changed));
    H.on("updateActor", (actor) => this.onUpdateActor(actor));
    H.on("targetToken", (user) => { if (user?.id === this.game.user?.id) this.refresh(); });
    H.on("controlToken", () => this.refresh());
    H.on("drawToken", (token) => this.refreshToken(token));
    H.on("createChatMessage", (message) => this.onChatMessage(message));
    return this;
  }

  init() {
    const settings = this.game.settings;
    const restart = () => this.restart();
    settings.register(MODULE_ID, "url", {
      name: "Covercast server URL",
      hint: "The WebSocket address of the Covercast server, e.g. ws://127.0.0.1:8765 or wss://covercast.example.org. Only the sender (the active GM with the lowest user id) connects.",
      scope: "world", config: true, type: String, default: "ws://127.0.0.1:8765", onChange: restart,
    });
    settings.register(MODULE_ID, "accessToken", {
      name: "Covercast access token",
      hint: "The server's access token (covercast serve --token). Stored in this browser only, never in the world, and sent in the hello message, never in the URL.",
      scope: "client", config: true, type: String, default: "", onChange: restart,
    });
    settings.register(MODULE_ID, "ruleset", {
      name: "Ruleset",
      hint: "Which rules Covercast applies to this world's scenes.",
      scope: "world", config: true, type: String, default: "dnd35",
      choices: { dnd35: "D&D 3.5", pf1: "Pathfinder 1e", degrees: "Cover degrees (PF2e homebrew)" },
      onChange: () => this.resync(),
    });
    settings.register(MODULE_ID, "showBadges", {
      name: "Show cover on targeted tokens",
      hint: "Draw a badge above each token you target with its cover (and flanking) against your controlled token.",
      scope: "client", config: true, type: Boolean, default: true, onChange: () => this.refresh(),
    });
    settings.register(MODULE_ID, "chatLines", {
      name: "Cover line under attack rolls",
      hint: "Add a line with the targets' cover and flanking under each attack roll's chat card (shown on this client only; nothing is saved).",
      scope: "client", config: true, type: Boolean, default: true,
    });
    settings.register(MODULE_ID, "anyRollIsAttack", {
      name: "Treat every roll as an attack",
      hint: "For systems whose attack rolls Covercast does not recognise (it knows dnd5e, pf2e and pf1).",
      scope: "world", config: true, type: Boolean, default: false,
    });
    const renderHook = (this.game.release?.generation ?? 12) >= 13 ? "renderChatMessageHTML" : "renderChatMessage";
    this.env.Hooks.on(renderHook, (message, html) => this.onRenderChatMessage(message, html));
    const mod = this.game.modules?.get?.(MODULE_ID);
    if (mod) mod.api = this;
  }

  ready() {
    this.game.socket?.on(SOCKET, (data) => this.onRelay(data));
    this.elect();
    if (!this.isSender) this.game.socket?.emit(SOCKET, { kind: "request" });
  }

  // -- election --------------------------------------------------------------------------------

  /** Re-elect the sender; `user`/`connected` come from the userConnected hook (the user who
   * joined or left), so the election never depends on when Foundry updates `user.active`. */
  elect(user = null, connected = undefined) {
    const users = [...this.game.users].map((u) => (
      typeof connected === "boolean" && user && u.id === user.id
        ? { id: u.id, isGM: u.isGM, active: connected } : u));
    const sender = electSender(users);
    const was = this.isSender;
    this.isSender = sender !== null && sender.id === this.game.user.id;
    if (this.isSender && !was) this.start();
    if (!this.isSender && was) this.stop();
  }

  // -- connection ------------------------------------------------------------------------------

  start() {
    if (this.wanted) return;
    this.wanted = true;
    this.attempt = 0;
    this.open();
  }

  /** Close the connection for good (this client is no longer the sender). */
  stop() {
    this.wanted = false;
    if (this.retryTimer !== null) this.clearTimer(this.retryTimer);
    this.retryTimer = null;
    const ws = this.ws;
    this.ws = null;
    this.reset();
    this.state = "stopped";
    if (ws) ws.close(1000, "no longer the sender");
    this.store.clear();
    this.refresh();
  }

  /** The URL or token changed: reconnect with the new values. */
  restart() {
    if (!this.isSender) return;
    this.stop();
    this.start();
  }

  reset() {
    this.pending.clear();
    this.loaded.clear();
    this.failed.clear();
    this.subscribed = null;
    this.extras.clear();
  }

  open() {
    const url = this.setting("url");
    const WS = this.WebSocketClass ?? this.env.WebSocket;
    let ws;
    try {
      ws = new WS(url);
    } catch (err) {
      this.state = "refused";
      this.notify("error", `Covercast: cannot connect to "${url}": ${err.message}`);
      return;
    }
    this.ws = ws;
    this.state = "connecting";
    ws.onopen = () => {
      const token = this.setting("accessToken");
      this.send({ type: "hello", protocol: 1, client: CLIENT_NAME, token: token || null });
    };
    ws.onmessage = (event) => this.receive(event.data);
    ws.onclose = (event) => this.onClose(ws, event);
    // Browsers follow an error with a close event, but not every WebSocket does (node 20's
    // fires only `error` when the connection is refused): an error ends this socket here,
    // and its later close, if any, is ignored.
    ws.onerror = () => this.onClose(ws, { code: 1006, reason: "error" });
    // A connection that is not welcomed in time (a silent network, a stuck proxy) is given up.
    this.setTimer(() => {
      if (ws === this.ws && this.state === "connecting") {
        this.onClose(ws, { code: 1006, reason: "timeout" });
        ws.close();
      }
    }, this.connectTimeout);
  }

  onClose(ws, event) {
    if (ws !== this.ws) return; // an old socket we already left
    this.ws = null;
    const wasOpen = this.state === "open";
    this.reset();
    // What was shown came from a connection that is gone; stale cover is worse than none.
    this.store.clear();
    this.refresh();
    this.relayAll();
    if (event?.code === 1008) {
      // A refused hello (wrong token, wrong protocol) will be refused again: wait for the
      // settings to change instead of hammering the server.
      this.state = "refused";
      this.notify("error", `Covercast refused the connection: ${event.reason || "policy violation"}. Check the access token in the module settings.`);
      return;
    }
    this.state = "closed";
    if (wasOpen && !this.lostNotified) {
      this.lostNotified = true;
      this.notify("warn", "Covercast: connection to the server lost, reconnecting.");
    }
    if (this.wanted) this.scheduleReconnect();
  }

  scheduleReconnect() {
    const delay = backoffDelay(this.attempt++, this.backoff, this.random);
    this.retryTimer = this.setTimer(() => {
      this.retryTimer = null;
      if (this.wanted && this.ws === null) this.open();
    }, delay);
  }

  send(msg, scene = null) {
    const ws = this.ws;
    if (!ws || ws.readyState !== 1) return false;
    const id = this.nextId++;
    this.pending.set(id, { type: msg.type, scene });
    ws.send(JSON.stringify({ ...msg, id }));
    return true;
  }

  receive(data) {
    if (typeof data !== "string") return; // we only ever send JSON, so replies are JSON
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      return;
    }
    const request = msg.id !== undefined ? this.pending.get(msg.id) : undefined;
    if (request) this.pending.delete(msg.id);
    switch (msg.type) {
      case "welcome": return this.onWelcome(msg);
      case "annotations": return this.onAnnotations(msg);
      case "error": return this.onError(msg, request);
      case "ack":
        if (request?.type === "scene.load") this.warned.delete(request.scene);
        return undefined;
      default: return undefined;
    }
  }

  onWelcome(msg) {
    this.welcome = msg;
    this.state = "open";
    this.attempt = 0;
    this.connections += 1;
    if (this.lostNotified) this.notify("info", "Covercast: reconnected.");
    this.lostNotified = false;
    this.resync();
    this.env.Hooks.callAll("covercastConnected", this);
  }

  /** Send the viewed scene whole and subscribe to it: after connecting, after a reconnect
   * (the server may have restarted and lost it), and after a refused diff. */
  resync() {
    const scene = this.canvas?.scene;
    if (this.state !== "open" || !scene) return;
    this.failed.delete(scene.id);
    this.loaded.add(scene.id);
    for (const msg of this.loadMessages(scene)) this.send(msg, scene.id);
    if (this.subscribed !== scene.id) {
      if (this.subscribed !== null) this.send({ type: "unsubscribe", scene: this.subscribed }, this.subscribed);
      this.subscribed = scene.id;
      this.send({ type: "subscribe", scene: scene.id, modes: MODES }, scene.id);
    }
  }

  /** The frames that load a scene: one `scene.load` when it fits the server's frame limit;
   * otherwise the load without the walls (and without the Foundry collections Covercast
   * ignores), then the walls in `wall.create` batches that each fit. A frame over the limit
   * would make the server close the connection, and the resync after the reconnect would
   * do it again. */
  loadMessages(scene) {
    const load = { type: "scene.load", scene: this.sceneData(scene), ruleset: this.setting("ruleset") };
    const limits = this.welcome?.limits ?? {};
    const maxBytes = Math.min(limits.maxFrameBytes ?? 4194304, this.maxFrameBytes) * 0.9;
    const maxBatch = limits.maxBatch ?? 5000;
    if (byteLength(JSON.stringify(load)) <= maxBytes) return [load];
    const walls = load.scene.walls;
    const slim = { ...load.scene, walls: [] };
    for (const key of IGNORED_COLLECTIONS) if (Array.isArray(slim[key])) slim[key] = [];
    const out = [{ ...load, scene: slim }];
    let batch = [];
    let bytes = 0;
    for (const wall of walls) {
      const size = byteLength(JSON.stringify(wall)) + 1;
      if (batch.length > 0 && (bytes + size > maxBytes - 200 || batch.length >= maxBatch)) {
        out.push({ type: "wall.create", scene: scene.id, walls: batch });
        batch = [];
        bytes = 0;
      }
      batch.push(wall);
      bytes += size;
    }
    if (batch.length > 0) out.push({ type: "wall.create", scene: scene.id, walls: batch });
    return out;
  }

  onError(msg, request) {
    const scene = request?.scene;
    if (request?.type === "scene.load") {
      this.loaded.delete(scene);
      this.failed.add(scene);
      this.failedAt = this.now();
      // Once per reason: retries of a scene that stays refused do not repeat it.
      if (this.warned.get(scene) !== msg.message) {
        this.warned.set(scene, msg.message);
        this.notify("warn", `Covercast cannot use this scene: ${msg.message}`);
      }
      return;
    }
    // A refused subscribe must be sent again with the next load.
    if (request?.type === "subscribe" && this.subscribed === scene) this.subscribed = null;
    if (scene && this.failed.has(scene)) return; // follows from the refused load
    console.warn(`Covercast: ${request?.type ?? "request"} refused: ${msg.message}`);
    // A refused diff means our picture and the server's differ: send the scene whole.
    if (request && request.type !== "subscribe" && scene === this.canvas?.scene?.id) this.resyncSoon();
  }

  onAnnotations(msg) {
    if (msg.scene !== this.subscribed) return;
    this.store.apply(msg);
    this.refresh();
    this.relayMessage(msg);
    this.env.Hooks.callAll("covercastAnnotations", this.store, msg);
  }

  // -- what goes to the server ----------------------------------------------------------------

  /** A token as Covercast reads it: Foundry's document, plus what the actor says of its
   * size and natural reach. */
  tokenData(doc) {
    const data = doc.toObject();
    const extras = actorExtras(doc.actor);
    for (const [key, value] of Object.entries(extras)) if (value !== null) data[key] = value;
    this.extras.set(doc.id, JSON.stringify(extras));
    return data;
  }

  /** The actor's size and reach when they differ from what the server was last told for
   * this token (null resets a field), else null. */
  changedExtras(doc) {
    const extras = actorExtras(doc.actor);
    const json = JSON.stringify(extras);
    if (this.extras.get(doc.id) === json) return null;
    this.extras.set(doc.id, json);
    return extras;
  }

  /** The scene as Foundry has it (`toObject()`), each token with its actor's size and reach. */
  sceneData(scene) {
    const data = scene.toObject();
    data.tokens = scene.tokens.map((t) => this.tokenData(t));
    return data;
  }

  patch(doc, changed) {
    return "_id" in changed ? changed : { ...changed, _id: doc.id };
  }

  forward(type, doc, body) {
    const scene = doc.parent?.id;
    if (this.state !== "open") return;
    // A scene the server refused may be fixed by this very change (a flag corrected): try
    // loading it whole again rather than sending diffs against nothing.
    if (this.failed.has(scene) && scene === this.canvas?.scene?.id) {
      if (this.now() - this.failedAt >= FAILED_RETRY_MS) this.resyncSoon();
      return;
    }
    if (!this.loaded.has(scene)) return;
    this.send({ type, scene, ...body() }, scene);
  }

  /** One resync for a burst of causes (refused diffs, changes to a refused scene). */
  resyncSoon() {
    if (this.resyncTimer !== null) return;
    this.resyncTimer = this.setTimer(() => {
      this.resyncTimer = null;
      this.resync();
    }, 200);
  }

  onUpdateToken(doc, changed) {
    this.forward("token.update", doc, () => {
      const patch = this.patch(doc, changed);
      // An unlinked token's actor changes through the token (its `delta`).
      const extras = this.changedExtras(doc);
      return { tokens: [extras ? { ...patch, ...extras } : patch] };
    });
    // A token hidden or revealed changes what players may be told.
    if ("hidden" in changed) this.relayAll();
  }

  /** An actor's size or reach changed: tell the server for each of its tokens in a loaded
   * scene. */
  onUpdateActor(actor) {
    for (const token of actor.getActiveTokens?.(false, true) ?? []) {
      const doc = token.document ?? token;
      if (!this.loaded.has(doc.parent?.id) || this.state !== "open") continue;
      const extras = this.changedExtras(doc);
      if (extras) this.forward("token.update", doc, () => ({ tokens: [{ _id: doc.id, ...extras }] }));
    }
  }

  /** Regions and the grid have no diff message: a change to them reloads the scene. */
  onRegion(doc, changed) {
    const marked = doc.flags?.covercast !== undefined || changed?.flags?.covercast !== undefined;
    if (marked && doc.parent?.id === this.canvas?.scene?.id) this.resync();
  }

  onUpdateScene(scene, changed) {
    if (("grid" in changed || "width" in changed || "height" in changed)
        && scene.id === this.canvas?.scene?.id) this.resync();
  }

  onCanvasReady() {
    if (this.isSender) {
      if (this.subscribed !== this.canvas?.scene?.id) this.store.clear();
      this.resync();
    } else {
      this.game.socket?.emit(SOCKET, { kind: "request" });
    }
    this.refresh();
  }

  // -- relay to the other clients -------------------------------------------------------------

  /** Tokens the other clients must not hear about: the hidden ones of the viewed scene. */
  hiddenTokens() {
    return new Set((this.canvas?.scene?.tokens ?? []).filter((t) => t.hidden).map((t) => t.id));
  }

  static visible(ann, hidden) {
    return !hidden.has(ann.attacker) && !hidden.has(ann.target)
      && !(ann.flankers ?? []).some((id) => hidden.has(id));
  }

  /** Pass an annotations message on to the other clients, minus what involves a hidden token
   * (filtered here, so it never leaves the GM's client). A pair that becomes invisible (a
   * hidden flanker joins it) is withdrawn rather than left stale. */
  relayMessage(msg) {
    if (!this.isSender || !this.game.socket) return;
    if (msg.full) return this.relayAll();
    const hidden = this.hiddenTokens();
    const annotations = [];
    const removed = [];
    for (const ann of msg.annotations) {
      const key = AnnotationStore.key(ann.attacker, ann.target, ann.mode);
      if (Covercast.visible(ann, hidden)) {
        annotations.push(ann);
        this.relayed.add(key);
      } else if (this.relayed.delete(key)) {
        removed.push([ann.attacker, ann.target, ann.mode]);
      }
    }
    for (const [a, t, m] of msg.removed ?? []) {
      if (this.relayed.delete(AnnotationStore.key(a, t, m))) removed.push([a, t, m]);
    }
    this.emitRelay(false, annotations, removed);
  }

  /** The other clients' whole view again: after a full set, a client's request, a token
   * hidden or revealed, or a lost connection (then empty). */
  relayAll() {
    if (!this.isSender || !this.game.socket) return;
    const hidden = this.hiddenTokens();
    const annotations = [...this.store.values()].filter((ann) => Covercast.visible(ann, hidden));
    this.relayed = new Set(annotations.map((a) => AnnotationStore.key(a.attacker, a.target, a.mode)));
    this.emitRelay(true, annotations, []);
  }

  emitRelay(full, annotations, removed) {
    if (!full && annotations.length === 0 && removed.length === 0) return;
    this.game.socket.emit(SOCKET, {
      kind: "annotations", scene: this.store.scene, revision: this.store.revision,
      full, annotations, removed,
    });
  }

  onRelay(data) {
    if (data?.kind === "request") {
      if (this.isSender) this.relayAll();
      return;
    }
    if (data?.kind !== "annotations" || this.isSender) return;
    if (data.scene !== this.canvas?.scene?.id && data.scene !== null) return;
    this.store.apply(data);
    this.refresh();
    this.env.Hooks.callAll("covercastAnnotations", this.store, data);
  }

  // -- what the user sees ---------------------------------------------------------------------

  /** The token this user attacks with: the one they control, else their character's. */
  attacker() {
    const controlled = this.canvas?.tokens?.controlled ?? [];
    if (controlled.length > 0) return controlled[0];
    return this.game.user?.character?.getActiveTokens?.()?.[0] ?? null;
  }

  nameOf(id) {
    return this.canvas?.scene?.tokens?.get?.(id)?.name || id;
  }

  /** What Covercast says about `attacker` attacking `target`, in the mode that fits. */
  assess(attackerId, targetId) {
    if (!attackerId || !targetId || attackerId === targetId) return null;
    const mode = pickMode(this.store, attackerId, targetId);
    const ann = this.store.get(attackerId, targetId, mode);
    return ann ? describe(ann, (id) => this.nameOf(id)) : null;
  }

  /** Redraw every token's badge: targeted tokens get their cover against the attacker. */
  refresh() {
    const layer = this.canvas?.tokens;
    if (!layer) return;
    for (const token of layer.placeables ?? []) this.refreshToken(token);
  }

  refreshToken(token) {
    const targets = this.game.user?.targets;
    const attacker = this.attacker();
    const targeted = targets ? [...targets].some((t) => t.id === token.id) : false;
    const info = targeted && attacker ? this.assess(attacker.id, token.id) : null;
    if (info) this.status.set(token.id, info);
    else this.status.delete(token.id);
    this.drawBadge(token, this.setting("showBadges") ? info : null);
  }

  /** A PIXI badge above the token: drawn on the canvas object, never a document write. */
  drawBadge(token, info) {
    let badge = (token.children ?? []).find((c) => c.name === BADGE) ?? null;
    if (!info) {
      if (badge) {
        token.removeChild(badge);
        badge.destroy({ children: true });
      }
      return;
    }
    const PIXI = this.env.PIXI;
    if (!PIXI) return;
    if (!badge) {
      badge = new PIXI.Container();
      badge.name = BADGE;
      badge.eventMode = "none";
      token.addChild(badge);
    }
    for (const child of badge.removeChildren()) child.destroy();
    const text = new PIXI.Text(info.label, {
      fontFamily: "Signika", fontSize: 18, fill: info.color, stroke: 0x000000, strokeThickness: 3,
    });
    const bg = new PIXI.Graphics();
    bg.beginFill(0x000000, 0.65).drawRoundedRect(0, 0, text.width + 10, text.height + 4, 5).endFill();
    text.position.set(5, 2);
    badge.addChild(bg, text);
    const width = token.w ?? token.width ?? 0;
    badge.position.set((width - (text.width + 10)) / 2, -(text.height + 8));
  }

  /** On an attack roll: one line per target of the roll's author, from the speaker's token,
   * appended under the chat card on this client (no document is created or changed). */
  onChatMessage(message) {
    if (!this.setting("chatLines") || !isAttack(message, this.setting("anyRollIsAttack"))) return;
    const attackerId = message.speaker?.token;
    const author = message.author ?? message.user;
    const targets = [...(author?.targets ?? [])];
    const lines = [];
    for (const target of targets) {
      const info = this.assess(attackerId, target.id);
      if (info) lines.push(`${this.nameOf(attackerId)} → ${this.nameOf(target.id)} (${info.mode}): ${info.text}`);
    }
    if (lines.length === 0) return;
    this.chatLines.set(message.id, lines);
    // The card may already be in the log (rendering and this hook race): add it there too.
    const rendered = this.env.document?.querySelectorAll?.(`.chat-message[data-message-id="${message.id}"]`) ?? [];
    for (const element of rendered) appendLines(element, lines);
  }

  onRenderChatMessage(message, html) {
    const lines = this.chatLines.get(message.id);
    if (lines) appendLines(html?.jquery ? html[0] : html, lines);
  }
}

function appendLines(element, lines) {
  if (!element || element.querySelector?.(".covercast-line")) return;
  const html = lines.map((l) => `<div class="covercast-line">${escapeHtml(l)}</div>`).join("");
  const target = element.querySelector?.(".message-content") ?? element;
  target.insertAdjacentHTML("beforeend", html);
}

/** Start the module on `env` (globalThis in Foundry). */
export function install(env, options = {}) {
  return new Covercast(env, options).install();
}
