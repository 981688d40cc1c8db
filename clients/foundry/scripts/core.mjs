/**
 * Covercast for Foundry VTT, one instance per browser, written against an `env` object
 * holding Foundry's globals (Hooks, game, canvas, ui, PIXI, document, WebSocket), so the
 * same code runs in Foundry (env = globalThis) and under node's test runner (stand-ins).
 *
 * Data flows one way: Foundry hooks -> protocol messages (only on the elected sender) ->
 * annotation pushes -> stores -> what the user sees (badges, chat lines, GM tools) and what
 * the rolls take (rolls.mjs through systems/*.mjs).
 *
 * Who connects (docs: clients/foundry/README.md, "Who talks to the server"):
 * - the **sender**, the first active GM in `game.users.activeGM` order whose browser holds
 *   the access token: a `gm` connection that loads the viewed scene, forwards every diff and
 *   subscribes (its own true numbers), and a `player` connection subscribed to the same scene,
 *   whose annotations, computed by the server for a viewer, are what it relays to the others;
 * - every other GM with the access token, a **reader**: a `gm` connection that only
 *   subscribes, for the true numbers on that GM's own screen;
 * - everyone else (players, GMs without the token) is **relayed** the viewer annotations
 *   over Foundry's module socket, from the sender only. Nothing the GM's numbers are made of
 *   ever goes over that socket.
 *
 * The only world write is the GM's own cover override on a token (`flags.covercast.cover`,
 * from the token HUD); applying modifiers to rolls writes nothing of its own.
 */

import { Link } from "./link.mjs";
import { installGmTools } from "./gm-tools.mjs";
import { installFocus } from "./focus.mjs";
import { installSystem, SYSTEM_RULESETS } from "./systems/index.mjs";
import { APPLY_MODES } from "./rolls.mjs";
import {
  AnnotationStore, MODES, MODULE_ID, actorExtras, byteLength, electSender, escapeHtml, gmOrder, isAttack,
  pickMode,
} from "./util.mjs";
import { describe, translator } from "./words.mjs";

export * from "./util.mjs";
export { backoffDelay, CLIENT_NAME, VERSION } from "./link.mjs";
export { describe } from "./words.mjs";

export const SOCKET = `module.${MODULE_ID}`;
const BADGE = "covercast-status";
const FAILED_RETRY_MS = 5000; // how often a change to a refused scene may retry loading it
const SUBSCRIBE_RETRY_MS = 1000; // a reader waiting for the sender to load the scene

/** Every ruleset the server had when this module was written, in case `welcome` is late:
 * the setting's choices are refreshed from `welcome.rulesets`. */
const KNOWN_RULESETS = {
  dnd35: "D&D 3.5", pf1: "Pathfinder 1e", pf2: "Pathfinder 2e", dnd5e: "D&D 5e",
  degrees: "Cover degrees (PF2e homebrew)", realms: "Enchanted Realms",
};

/**
 * Foundry's globals as the module reads them (globalThis in Foundry, stand-ins in tests),
 * typed by Foundry's published declarations (fvtt-types).
 * @typedef {object} FoundryEnv
 * @property {typeof Hooks} Hooks
 * @property {Game} game
 * @property {Canvas | undefined} canvas
 * @property {typeof ui} ui
 * @property {typeof PIXI} PIXI
 * @property {Document} document
 * @property {typeof WebSocket} WebSocket
 * @property {any} [libWrapper] libWrapper's global, when that module is active (not in fvtt-types)
 */

/**
 * The running module on one Foundry client.
 */
export class Covercast {
  /** @param {FoundryEnv} env @param {any} [options] */
  constructor(env, options = {}) {
    this.env = env;
    this.options = options;
    this.random = options.random ?? Math.random;
    this.setTimer = options.setTimeout ?? ((/** @type {() => void} */ fn, /** @type {number} */ ms) => setTimeout(fn, ms));
    this.clearTimer = options.clearTimeout ?? ((/** @type {any} */ t) => clearTimeout(t));
    this.now = options.now ?? Date.now;
    // The server's frame limit comes in `welcome`; tests may lower it to exercise splitting.
    this.maxFrameBytes = options.maxFrameBytes ?? Infinity;
    this.t = translator(null);
    /** This client's own view: the gm connection's on a sender or reader, else the relay. */
    this.store = new AnnotationStore();
    /** The viewer annotations the sender relays (the sender's player connection). */
    this.viewerStore = new AnnotationStore();
    this.status = new Map(); // token id -> describe() of what its badge shows, for tests/API
    this.chatLines = new Map(); // chat message id -> lines appended under it
    /** "sender" | "reader" | "relayed" | "idle" (before ready) */
    this.role = "idle";
    this.refused = new Set(); // ids of the GMs whose browsers the server turned away
    this.refusedHere = false; // this browser was turned away (until its settings change)
    this.warned = new Map(); // scene id -> the refusal last shown
    this.failedAt = -Infinity;
    this.loaded = new Set(); // scenes loaded on this connection (diffs go only to these)
    this.failed = new Set(); // scenes the server refused (no diffs until the next load)
    this.acked = new Set(); // scenes whose load the server acknowledged on this connection
    this.subscribed = null; // the scene the gm connection follows
    this.viewerSubscribed = null; // the scene the player connection follows
    this.viewerAsk = null; // the filter it was last subscribed with (JSON)
    this.extras = new Map(); // token id -> JSON of the size and reach last sent
    this.oversize = new Set(); // tokens left out for their size, each told once
    this.resyncTimer = null;
    this.subscribeTimer = null;
    this.lostNotified = false;
    this.tokenNotice = null; // the no-token notice last shown
    this.system = null; // the game system's roll adapter
    /** @type {any} */
    this.gmTools = null;
    this.focus = null;
    /** @type {any[]} what was applied to a roll, waiting for its chat message */
    this.pendingApplied = [];
    /** @type {Map<string, any>} templates asked about (`area.query`), oldest first */
    this.pendingAreas = new Map();
    /** @type {Map<string, {at: number, affected: any[], origin: any}>} areas placed, with who they reach */
    this.areas = new Map();
    /** @type {string | null} */
    this.senderId = null;
    this.isReady = false;
    this.link = this.makeLink("gm");
    this.viewer = this.makeLink("player");
  }

  /** @param {string} role */
  makeLink(role) {
    const o = this.options;
    return new Link({
      role,
      url: () => this.setting("url"),
      token: () => this.setting("accessToken"),
      WebSocket: o.WebSocket ?? this.env.WebSocket,
      setTimer: this.setTimer, clearTimer: this.clearTimer, random: this.random,
      backoff: { base: o.backoffBase ?? 500, max: o.backoffMax ?? 30000 },
      connectTimeout: o.connectTimeout ?? 10000,
      onWelcome: (msg) => (role === "gm" ? this.onWelcome(msg) : this.onViewerWelcome()),
      onMessage: (msg, request) => (role === "gm" ? this.onMessage(msg, request) : this.onViewerMessage(msg, request)),
      onLost: (info) => (role === "gm" ? this.onLost(info) : this.onViewerLost()),
    });
  }

  // -- Foundry plumbing -----------------------------------------------------------------------

  /** Foundry's game, typed loosely where the declarations are strict about setting keys
   * (each module key would need a declaration merge) and system-specific data.
   * @returns {any} */
  get game() { return this.env.game; }
  /** @returns {any} */
  get canvas() { return this.env.canvas; }
  get isSender() { return this.role === "sender"; }
  /** The gm connection's state (idle | connecting | open | closed | refused | stopped):
   * "refused" while the server turns this browser away. */
  get state() { return this.refusedHere ? "refused" : this.link.state; }
  get connections() { return this.link.connections; }
  get welcome() { return this.link.welcome; }

  /** Fire one of the hooks this module offers other modules. Cast: fvtt-types types
   * `Hooks.callAll` by its own HookConfig, which knows only Foundry's hook names.
   * @param {string} name @param {...any} args */
  callOwnHook(name, ...args) {
    /** @type {any} */ (this.env.Hooks).callAll(name, ...args);
  }

  /** @param {string} key */
  setting(key) {
    return this.game.settings.get(MODULE_ID, key);
  }

  /** @param {"info" | "warn" | "error"} level @param {string} text */
  notify(level, text) {
    this.env.ui?.notifications?.[level]?.(text);
  }

  /** Register every hook; settings and the rest follow Foundry's init and ready. */
  install() {
    const H = this.env.Hooks;
    H.once("init", () => this.init());
    H.once("ready", () => this.ready());
    H.on("userConnected", (/** @type {any} */ user, /** @type {boolean} */ connected) => this.elect(user, connected));
    H.on("updateUser", () => this.elect());
    // A player given (or denied) an actor: the players' filter follows.
    H.on("updateActor", () => this.subscribeViewer());
    H.on("canvasReady", () => this.onCanvasReady());
    H.on("createToken", (/** @type {any} */ doc) => {
      if (this.measured(doc)) this.forward("token.create", doc, () => ({ tokens: [this.tokenData(doc)] }));
    });
    H.on("updateToken", (/** @type {any} */ doc, /** @type {any} */ changed) => this.onUpdateToken(doc, changed));
    H.on("deleteToken", (/** @type {any} */ doc) => {
      if (this.measured(doc)) this.forward("token.delete", doc, () => ({ ids: [doc.id] }));
    });
    H.on("createWall", (/** @type {any} */ doc) => this.forward("wall.create", doc, () => ({ walls: [doc.toObject()] })));
    H.on("updateWall", (/** @type {any} */ doc, /** @type {any} */ changed) => this.forward("wall.update", doc, () => ({ walls: [this.patch(doc, changed)] })));
    H.on("deleteWall", (/** @type {any} */ doc) => this.forward("wall.delete", doc, () => ({ ids: [doc.id] })));
    H.on("createRegion", (/** @type {any} */ doc) => this.onRegion(doc, {}));
    H.on("updateRegion", (/** @type {any} */ doc, /** @type {any} */ changed) => this.onRegion(doc, changed));
    H.on("deleteRegion", (/** @type {any} */ doc) => this.onRegion(doc, {}));
    H.on("updateScene", (/** @type {any} */ scene, /** @type {any} */ changed) => this.onUpdateScene(scene, changed));
    H.on("updateActor", (/** @type {any} */ actor) => this.onUpdateActor(actor));
    H.on("targetToken", (/** @type {any} */ user) => { if (user?.id === this.game.user?.id) this.refresh(); });
    H.on("controlToken", () => this.refresh());
    H.on("drawToken", (/** @type {any} */ token) => this.refreshToken(token));
    H.on("createChatMessage", (/** @type {any} */ message) => this.onChatMessage(message));
    H.on("createMeasuredTemplate", (/** @type {any} */ template) => this.queryArea(template));
    return this;
  }

  init() {
    this.t = translator(this.game.i18n);
    const t = this.t;
    const settings = this.game.settings;
    const restart = () => this.restart();
    settings.register(MODULE_ID, "url", {
      name: t("Settings.url.Name"), hint: t("Settings.url.Hint"),
      scope: "world", config: true, type: String, default: "ws://127.0.0.1:8765", onChange: restart,
    });
    settings.register(MODULE_ID, "accessToken", {
      name: t("Settings.accessToken.Name"), hint: t("Settings.accessToken.Hint"),
      scope: "client", config: true, type: String, default: "", onChange: restart,
    });
    const systemId = this.game.system?.id;
    settings.register(MODULE_ID, "ruleset", {
      name: t("Settings.ruleset.Name"), hint: t("Settings.ruleset.Hint"),
      scope: "world", config: true, type: String,
      default: SYSTEM_RULESETS[systemId] ?? "dnd35",
      choices: { ...KNOWN_RULESETS },
      onChange: () => this.resync(),
    });
    settings.register(MODULE_ID, "rulesetOptions", {
      name: t("Settings.rulesetOptions.Name"), hint: t("Settings.rulesetOptions.Hint"),
      scope: "world", config: true, type: String, default: "", onChange: () => this.resync(),
    });
    settings.register(MODULE_ID, "applyMode", {
      name: t("Settings.applyMode.Name"), hint: t("Settings.applyMode.Hint"),
      scope: "world", config: true, type: String, default: "auto",
      choices: Object.fromEntries(APPLY_MODES.map((m) => [m, t(`Settings.applyMode.${m}`)])),
    });
    settings.register(MODULE_ID, "pf2eFlanking", {
      name: t("Settings.pf2eFlanking.Name"), hint: t("Settings.pf2eFlanking.Hint"),
      scope: "world", config: systemId === "pf2e", type: String, default: "system",
      choices: { system: t("Settings.pf2eFlanking.system"), covercast: t("Settings.pf2eFlanking.covercast") },
    });
    settings.register(MODULE_ID, "showBadges", {
      name: t("Settings.showBadges.Name"), hint: t("Settings.showBadges.Hint"),
      scope: "client", config: true, type: Boolean, default: true, onChange: () => this.refresh(),
    });
    settings.register(MODULE_ID, "chatLines", {
      name: t("Settings.chatLines.Name"), hint: t("Settings.chatLines.Hint"),
      scope: "client", config: true, type: Boolean, default: true,
    });
    settings.register(MODULE_ID, "showLines", {
      name: t("Settings.showLines.Name"), hint: t("Settings.showLines.Hint"),
      scope: "client", config: true, type: Boolean, default: true, onChange: () => this.gmTools?.redraw(),
    });
    settings.register(MODULE_ID, "followPlay", {
      name: t("Settings.followPlay.Name"), hint: t("Settings.followPlay.Hint"),
      scope: "world", config: true, type: Boolean, default: true,
    });
    settings.register(MODULE_ID, "anyRollIsAttack", {
      name: t("Settings.anyRollIsAttack.Name"), hint: t("Settings.anyRollIsAttack.Hint"),
      scope: "world", config: true, type: Boolean, default: false,
    });
    const H = this.env.Hooks;
    const render = (/** @type {any} */ message, /** @type {any} */ html) => this.onRenderChatMessage(message, html);
    // v13 renders chat cards as HTMLElements; v12's hook (jQuery) is deprecated in v13.
    if ((this.game.release?.generation ?? 12) >= 13) H.on("renderChatMessageHTML", render);
    else H.on("renderChatMessage", render);
    // The access token is a secret: shown as a password field (Foundry has no setting type
    // for it; the input is changed when the settings sheet renders).
    H.on("renderSettingsConfig", (/** @type {any} */ app, /** @type {any} */ html) => {
      const root = html?.jquery ? html[0] : html;
      const input = root?.querySelector?.(`input[name="${MODULE_ID}.accessToken"]`);
      if (input) input.type = "password";
    });
    this.system = installSystem(this, systemId);
    this.gmTools = installGmTools(this);
    this.focus = installFocus(this);
    const mod = this.game.modules?.get?.(MODULE_ID);
    if (mod) mod.api = this;
  }

  ready() {
    this.isReady = true;
    this.game.socket?.on(SOCKET, (/** @type {any} */ data) => this.onSocket(data));
    if (this.game.user?.isGM) this.announce();
    this.elect();
    if (!this.isSender) this.emit({ kind: "request" });
  }

  // -- election --------------------------------------------------------------------------------

  /** Whether this browser holds an access token. */
  hasToken() {
    return Boolean(this.setting("accessToken"));
  }

  /** Tell the other clients whether the server turned this GM's browser away. */
  announce() {
    this.emit({ kind: "presence", refused: this.refusedHere });
  }

  /** @param {any} data */
  emit(data) {
    this.game.socket?.emit(SOCKET, { ...data, from: this.game.user?.id ?? null });
  }

  /** The users as they are, with the one that just joined or left (the userConnected
   * hook's arguments) set to its new state, so the election never depends on when Foundry
   * updates `user.active`. @param {any} [user] @param {boolean} [connected] */
  users(user = null, connected = undefined) {
    return [...this.game.users].map((u) => (
      typeof connected === "boolean" && user && u.id === user.id
        ? { id: u.id, isGM: u.isGM, role: u.role, name: u.name, active: connected } : u));
  }

  /** The sender every client agrees on: the first active GM (activeGM order) the server
   * has not turned away. @param {any[]} [users] */
  sender(users = this.users()) {
    const refused = new Set(this.refused);
    const me = this.game.user;
    if (me?.isGM) {
      if (this.refusedHere) refused.add(me.id);
      else refused.delete(me.id);
    }
    return electSender(users, refused);
  }

  /** Re-elect the sender and take this client's part: sender, reader or relayed.
   * @param {any} [user] @param {boolean} [connected] */
  elect(user = null, connected = undefined) {
    if (!this.isReady || !this.game.user) return; // settings and socket come with ready
    if (typeof connected === "boolean" && user) {
      if (!connected) this.refused.delete(user.id);
      // A GM who joins announces itself; ours goes to them too.
      else if (this.game.user.isGM && user.id !== this.game.user.id) this.announce();
    }
    const users = this.users(user, connected);
    const sender = this.sender(users);
    const me = this.game.user;
    const role = sender?.id === me.id ? "sender" : me.isGM && !this.refusedHere ? "reader" : "relayed";
    this.senderId = sender?.id ?? null;
    this.noticeTokens(users, sender);
    if (role === this.role) return;
    const was = this.role;
    this.role = role;
    if (was === "sender" || was === "reader") this.stopLinks();
    if (role === "sender" || role === "reader") {
      this.link.start(); // the sender's player connection follows its welcome
    } else {
      this.store.clear();
      this.refresh();
      if (was !== "idle") this.emit({ kind: "request" });
    }
  }

  /** A GM whose browser the server turned away is told who sends instead, or that nobody
   * can. @param {any[]} users @param {any} sender */
  noticeTokens(users, sender) {
    const me = this.game.user;
    if (!me.isGM || !this.refusedHere || this.hasToken()) {
      this.tokenNotice = null;
      return;
    }
    const first = gmOrder(users)[0];
    if (first?.id !== me.id) return; // only the GM Foundry designates is told
    const notice = sender ? this.t("Notify.noTokenOther", { name: sender.name ?? sender.id }) : this.t("Notify.noTokenNobody");
    if (notice === this.tokenNotice) return;
    this.tokenNotice = notice;
    this.notify("warn", notice);
  }

  stopLinks() {
    this.link.stop("no longer the sender");
    this.viewer.stop("no longer the sender");
    this.resetScenes();
    this.store.clear();
    this.viewerStore.clear();
    this.viewerSubscribed = null;
    this.refresh();
  }

  /** Stop every connection (the user logs out). */
  stop() {
    this.role = "idle";
    this.stopLinks();
  }

  /** The URL or token changed: this browser may be let in now; reconnect. */
  restart() {
    this.refusedHere = false;
    this.tokenNotice = null;
    if (this.game.user?.isGM) this.announce();
    const before = this.role;
    this.elect();
    if (this.role === before && (before === "sender" || before === "reader")) {
      this.resetScenes();
      this.link.restart();
      if (before === "sender") {
        this.viewerSubscribed = null;
        this.viewer.restart();
      }
    }
  }

  resetScenes() {
    this.loaded.clear();
    this.acked.clear();
    this.failed.clear();
    this.subscribed = null;
    this.extras.clear();
  }

  // -- the gm connection ------------------------------------------------------------------------

  /** @param {any} msg */
  onWelcome(msg) {
    if (this.isSender) this.viewer.start();
    if (this.lostNotified) this.notify("info", this.t("Notify.reconnected"));
    this.lostNotified = false;
    this.refreshRulesets(msg);
    this.resync();
    this.callOwnHook("covercastConnected", this);
  }

  /** The ruleset setting offers what this server has; a ruleset it lacks is reported.
   * @param {any} msg */
  refreshRulesets(msg) {
    const names = (msg.rulesets ?? []).map((/** @type {any} */ r) => r.name);
    if (names.length === 0) return;
    const def = this.game.settings.settings?.get?.(`${MODULE_ID}.ruleset`);
    if (def) def.choices = Object.fromEntries((msg.rulesets ?? []).map((/** @type {any} */ r) => [r.name, KNOWN_RULESETS[r.name] ?? r.title ?? r.name]));
    const chosen = this.setting("ruleset");
    if (this.isSender && !names.includes(chosen)) {
      this.notify("error", this.t("Notify.unknownRuleset", { ruleset: chosen, valid: names.join(", ") }));
    }
  }

  /** @param {{code: number, reason: string, wasOpen: boolean, refused: boolean}} info */
  onLost(info) {
    const wasOpen = info.wasOpen;
    this.resetScenes();
    // What was shown came from a connection that is gone; stale cover is worse than none.
    this.store.clear();
    this.refresh();
    if (info.refused) {
      if (info.code === 0) {
        this.notify("error", this.t("Notify.cannotConnect", { url: this.setting("url"), error: info.reason }));
        return;
      }
      if (this.hasToken()) this.notify("error", this.t("Notify.refused", { reason: info.reason || "policy violation" }));
      // Turned away: the next GM whose browser the server lets in talks for the table.
      this.refusedHere = true;
      this.announce();
      this.setTimer(() => this.elect(), 0);
      return;
    }
    if (wasOpen && !this.lostNotified) {
      this.lostNotified = true;
      this.notify("warn", this.t("Notify.lost"));
    }
  }

  /** @param {any} msg @param {any} request */
  onMessage(msg, request) {
    switch (msg.type) {
      case "annotations": return this.onAnnotations(msg);
      case "error": return this.onError(msg, request);
      case "ack":
        if (request?.type === "scene.load") {
          this.warned.delete(request.scene);
          this.acked.add(request.scene);
        }
        // After the server has a change (a token created, deleted or given to a player),
        // the viewer subscription may want another filter; the server knows the ids now.
        this.subscribeViewer();
        return undefined;
      case "area.result": return this.onAreaResult(msg, request, this.store);
      case "cover.result": return this.gmTools?.onResult(msg);
      default: return undefined;
    }
  }

  /** Send the viewed scene whole and subscribe to it (the sender); only subscribe (a
   * reader). After connecting, after a reconnect (the server may have restarted and lost
   * it), and after a refused diff. */
  resync() {
    const scene = this.canvas?.scene;
    if (!this.link.open || !scene) return;
    if (this.isSender) {
      this.failed.delete(scene.id);
      this.loaded.add(scene.id);
      for (const msg of this.loadMessages(scene)) this.link.send(msg, scene.id);
      this.focus?.resend(); // a restarted server lost it
    }
    if (this.subscribed !== scene.id) {
      if (this.subscribed !== null) this.link.send({ type: "unsubscribe", scene: this.subscribed }, this.subscribed);
      this.subscribed = scene.id;
      this.store.clear();
      this.link.send({ type: "subscribe", scene: scene.id, modes: MODES }, scene.id);
    }
  }

  /** The frames that load a scene: one `scene.load` when it fits the server's frame limit;
   * otherwise the load without the walls (and without the Foundry collections Covercast
   * ignores), then the walls in `wall.create` batches that each fit. A frame over the limit
   * would make the server close the connection, and the resync after the reconnect would
   * do it again. @param {any} scene */
  loadMessages(scene) {
    /** @type {any} */
    const load = { type: "scene.load", scene: this.sceneData(scene), ruleset: this.setting("ruleset") };
    const options = this.rulesetOptions();
    if (options) load.options = options;
    const limits = this.welcome?.limits ?? {};
    const maxBytes = Math.min(limits.maxFrameBytes ?? 4194304, this.maxFrameBytes) * 0.9;
    const maxBatch = limits.maxBatch ?? 5000;
    if (byteLength(JSON.stringify(load)) <= maxBytes) return [load];
    const walls = load.scene.walls;
    const slim = { ...load.scene, walls: [] };
    for (const key of IGNORED_COLLECTIONS) if (Array.isArray(slim[key])) slim[key] = [];
    /** @type {any[]} */
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

  /** The ruleset options of the world setting (a JSON object, e.g. {"flanking": true} for
   * dnd5e's optional flanking rule), or null; a setting that is no JSON object is reported
   * and not sent (the server would refuse the load). */
  rulesetOptions() {
    const text = String(this.setting("rulesetOptions") ?? "").trim();
    if (!text) return null;
    try {
      const value = JSON.parse(text);
      if (value && typeof value === "object" && !Array.isArray(value)) return value;
    } catch {
      // reported below
    }
    this.notify("error", this.t("Notify.badOptions", { text }));
    return null;
  }

  /** @param {any} msg @param {any} request */
  onError(msg, request) {
    const scene = request?.scene;
    if (request?.type === "scene.load") {
      this.loaded.delete(scene);
      this.failed.add(scene);
      this.failedAt = this.now();
      // Once per reason: retries of a scene that stays refused do not repeat it.
      if (this.warned.get(scene) !== msg.message) {
        this.warned.set(scene, msg.message);
        this.notify("warn", this.t("Notify.sceneRefused", { message: msg.message }));
      }
      return;
    }
    if (request?.type === "subscribe" && this.subscribed === scene) {
      // A refused subscribe must be sent again: with the next load (sender), or once the
      // sender has loaded the scene (a reader comes back to it shortly).
      this.subscribed = null;
      if (this.role === "reader" && msg.code === "unknown_scene") this.retrySubscribe();
      return;
    }
    if (scene && this.failed.has(scene)) return; // follows from the refused load
    console.warn(`Covercast: ${request?.type ?? "request"} refused: ${msg.message}`);
    // A refused diff means our picture and the server's differ: send the scene whole.
    if (request && this.isSender && scene === this.canvas?.scene?.id) this.resyncSoon();
  }

  retrySubscribe() {
    if (this.subscribeTimer !== null) return;
    this.subscribeTimer = this.setTimer(() => {
      this.subscribeTimer = null;
      if (this.role === "reader") this.resync();
    }, SUBSCRIBE_RETRY_MS);
  }

  /** @param {any} msg */
  onAnnotations(msg) {
    if (msg.scene !== this.subscribed) return;
    this.store.apply(msg);
    this.refresh();
    this.callOwnHook("covercastAnnotations", this.store, msg);
  }

  // -- the player connection (sender only): what the others are shown ---------------------------

  onViewerWelcome() {
    this.viewerSubscribed = null;
    this.viewerAsk = null;
    this.subscribeViewer();
  }

  /** What the players' screens need of a scene: the attacks of the tokens some player
   * owns (a player's badge is its controlled token against what it targets, its chat
   * line its own attack), so the server computes and relays only those pairs; every pair
   * while no player owns a token of the scene. The GM's own connection stays unfiltered.
   * @param {any} scene @returns {{attackers?: string[]}} */
  viewerFilter(scene) {
    const players = [...(this.game.users ?? [])].filter((/** @type {any} */ u) => !u.isGM);
    const owned = [];
    for (const doc of scene.tokens ?? []) {
      if (doc.hidden) continue; // a viewer naming a hidden token is refused: not followed
      if (players.some((/** @type {any} */ u) => ownedBy(doc, u))) owned.push(doc.id);
    }
    return owned.length ? { attackers: owned.sort() } : {};
  }

  /** Follow the viewed scene as a viewer, once the gm connection has loaded it, with the
   * filter its players need (subscribing again when that changes). */
  subscribeViewer() {
    const scene = this.canvas?.scene;
    if (!this.isSender || !this.viewer.open || !scene || !this.acked.has(scene.id)) return;
    const filter = this.viewerFilter(scene);
    const ask = JSON.stringify(filter);
    if (this.viewerSubscribed === scene.id && this.viewerAsk === ask) return;
    if (this.viewerSubscribed !== null && this.viewerSubscribed !== scene.id) {
      this.viewer.send({ type: "unsubscribe", scene: this.viewerSubscribed });
    }
    this.viewerSubscribed = scene.id;
    this.viewerAsk = ask;
    this.viewer.send({ type: "subscribe", scene: scene.id, modes: MODES, ...filter }, scene.id);
  }

  /** @param {any} msg @param {any} request */
  onViewerMessage(msg, request) {
    if (msg.type === "annotations" && msg.scene === this.viewerSubscribed) {
      this.viewerStore.apply(msg);
      this.emit({
        kind: "annotations", scene: msg.scene, revision: msg.revision, full: msg.full,
        annotations: msg.annotations, removed: msg.removed ?? [],
      });
    } else if (msg.type === "error" && request?.type === "subscribe") {
      this.viewerSubscribed = null;
      this.viewerAsk = null;
    } else if (msg.type === "area.result") {
      this.onAreaResult(msg, request, this.viewerStore);
    }
  }

  onViewerLost() {
    this.viewerSubscribed = null;
    this.viewerAsk = null;
    this.viewerStore.clear();
    this.relayAll(); // the others' view was made of what is gone
  }

  /** The others' whole view again: after a client's request or a lost connection. */
  relayAll() {
    if (!this.isSender) return;
    this.emit({
      kind: "annotations", scene: this.viewerStore.scene, revision: this.viewerStore.revision,
      full: true, annotations: [...this.viewerStore.values()], removed: [],
    });
  }

  /** A module socket message. Foundry's socket does not say who sent it, so each carries
   * its author's id (`from`): annotations are taken only from the elected sender, presence
   * only from GMs. @param {any} data */
  onSocket(data) {
    const from = this.game.users?.get?.(data?.from);
    if (!from) return;
    switch (data.kind) {
      case "presence":
        if (!from.isGM) return;
        if (data.refused) this.refused.add(from.id);
        else this.refused.delete(from.id);
        this.elect();
        return;
      case "request":
        if (this.isSender) this.relayAll();
        if (this.game.user?.isGM && from.isGM) this.announce();
        return;
      case "annotations":
        if (this.role !== "relayed" || from.id !== this.senderId) return;
        if (data.scene !== this.canvas?.scene?.id && data.scene !== null) return;
        this.store.apply(data);
        this.refresh();
        this.callOwnHook("covercastAnnotations", this.store, data);
        return;
      case "area":
        if (this.role !== "relayed" || from.id !== this.senderId) return;
        this.areas.set(data.template, { at: this.now(), affected: data.affected, origin: data.origin });
        return;
      default:
    }
  }

  // -- what goes to the server (sender) --------------------------------------------------------

  /** A token as Covercast reads it: Foundry's document, plus what the actor says of its
   * size and natural reach. @param {any} doc */
  tokenData(doc) {
    const data = doc.toObject();
    const extras = actorExtras(doc.actor);
    for (const [key, value] of Object.entries(extras)) if (value !== null) data[key] = value;
    this.extras.set(doc.id, JSON.stringify(extras));
    return data;
  }

  /** The actor's size and reach when they differ from what the server was last told for
   * this token (null resets a field), else null. @param {any} doc */
  changedExtras(doc) {
    const extras = actorExtras(doc.actor);
    const json = JSON.stringify(extras);
    if (this.extras.get(doc.id) === json) return null;
    this.extras.set(doc.id, json);
    return extras;
  }

  /** The scene as Foundry has it (`toObject()`), each token with its actor's size and reach.
   * @param {any} scene */
  sceneData(scene) {
    const data = scene.toObject();
    data.tokens = scene.tokens.filter((/** @type {any} */ t) => this.measured(t))
      .map((/** @type {any} */ t) => this.tokenData(t));
    return data;
  }

  /** Whether the server measures a token of this size (`welcome.limits.maxTokenSquares`
   * squares a side: the rules' largest creature). A larger one (a ship, a map drawn as a
   * token) is left out of the scene, and the GM told once; a token resized past the limit
   * is refused by the server and the scene loaded again without it. @param {any} doc */
  measured(doc) {
    const max = this.welcome?.limits?.maxTokenSquares ?? Infinity;
    if ((doc.width ?? 1) <= max && (doc.height ?? 1) <= max) return true;
    if (!this.oversize.has(doc.id)) {
      this.oversize.add(doc.id);
      this.notify("warn", this.t("Notify.tokenTooLarge", {
        name: doc.name ?? doc.id, width: doc.width, height: doc.height, max }));
    }
    return false;
  }

  /** @param {any} doc @param {any} changed */
  patch(doc, changed) {
    return "_id" in changed ? changed : { ...changed, _id: doc.id };
  }

  /** @param {string} type @param {any} doc @param {() => any} body */
  forward(type, doc, body) {
    const scene = doc.parent?.id;
    if (!this.isSender || !this.link.open) return;
    // A scene the server refused may be fixed by this very change (a flag corrected): try
    // loading it whole again rather than sending diffs against nothing.
    if (this.failed.has(scene) && scene === this.canvas?.scene?.id) {
      if (this.now() - this.failedAt >= FAILED_RETRY_MS) this.resyncSoon();
      return;
    }
    if (!this.loaded.has(scene)) return;
    this.link.send({ type, scene, ...body() }, scene);
  }

  /** One resync for a burst of causes (refused diffs, changes to a refused scene). */
  resyncSoon() {
    if (this.resyncTimer !== null) return;
    this.resyncTimer = this.setTimer(() => {
      this.resyncTimer = null;
      this.resync();
    }, 200);
  }

  /** @param {any} doc @param {any} changed */
  onUpdateToken(doc, changed) {
    if (!this.measured(doc)) {
      // Resized past what the server measures: the scene goes again, without it. Any other
      // change to a token left out is nothing to the server.
      if (("width" in changed || "height" in changed) && this.isSender && this.link.open
          && this.loaded.has(doc.parent?.id)) this.resyncSoon();
      return;
    }
    this.forward("token.update", doc, () => {
      const patch = this.patch(doc, changed);
      // An unlinked token's actor changes through the token (its `delta`).
      const extras = this.changedExtras(doc);
      return { tokens: [extras ? { ...patch, ...extras } : patch] };
    });
    if (changed?.flags?.[MODULE_ID] !== undefined) this.refresh();
  }

  /** An actor's size or reach changed: tell the server for each of its tokens in a loaded
   * scene. @param {any} actor */
  onUpdateActor(actor) {
    for (const token of actor.getActiveTokens?.(false, true) ?? []) {
      const doc = token.document ?? token;
      if (!this.loaded.has(doc.parent?.id) || !this.link.open) continue;
      const extras = this.changedExtras(doc);
      if (extras) this.forward("token.update", doc, () => ({ tokens: [{ _id: doc.id, ...extras }] }));
    }
  }

  /** Regions and the grid have no diff message: a change to them reloads the scene.
   * @param {any} doc @param {any} changed */
  onRegion(doc, changed) {
    const marked = doc.flags?.covercast !== undefined || changed?.flags?.covercast !== undefined;
    if (marked && doc.parent?.id === this.canvas?.scene?.id && this.isSender) this.resync();
  }

  /** @param {any} scene @param {any} changed */
  onUpdateScene(scene, changed) {
    if (("grid" in changed || "width" in changed || "height" in changed)
        && scene.id === this.canvas?.scene?.id && this.isSender) this.resync();
  }

  onCanvasReady() {
    if (this.role === "sender" || this.role === "reader") {
      this.resync();
      this.subscribeViewer();
    } else if (this.role === "relayed") {
      this.store.clear();
      this.emit({ kind: "request" });
    }
    this.refresh();
  }

  // -- area effects: cover from a template's origin --------------------------------------------

  /** Ask who an area effect reaches, with each one's cover from its origin: on the gm
   * connection (this GM's saves) and the player one (relayed to the others).
   * @param {any} template the MeasuredTemplate document */
  queryArea(template) {
    if (!this.isSender || !this.link.open) return;
    const scene = template.parent?.id;
    if (!this.acked.has(scene)) return;
    const data = template.toObject();
    const msg = { type: "area.query", scene, template: data };
    const waiting = new Set();
    if (this.link.send(msg, scene)) waiting.add(this.store);
    if (this.viewer.open && this.viewer.send(msg, scene)) waiting.add(this.viewerStore);
    this.pendingAreas.set(`${scene}/${data._id}`, { data, waiting });
  }

  /** An `area.result` on one of the two connections: replies come in order per connection,
   * so it answers the oldest template of that scene still waiting on it.
   * @param {any} msg @param {any} request @param {AnnotationStore} store */
  onAreaResult(msg, request, store) {
    const key = [...this.pendingAreas.keys()].find((k) => k.startsWith(`${msg.scene}/`) && this.pendingAreas.get(k).waiting.has(store));
    if (!key) return;
    const pending = this.pendingAreas.get(key);
    pending.waiting.delete(store);
    if (pending.waiting.size === 0) this.pendingAreas.delete(key);
    const { data } = pending;
    const origin = { x: data.x, y: data.y };
    if (store === this.store) {
      this.areas.set(data._id, { at: this.now(), affected: msg.affected, origin });
    } else {
      this.emit({ kind: "area", template: data._id, affected: msg.affected, origin });
    }
  }

  // -- what the user sees ----------------------------------------------------------------------

  /** The token this user attacks with: the one they control, else their character's. */
  attacker() {
    const controlled = this.canvas?.tokens?.controlled ?? [];
    if (controlled.length > 0) return controlled[0];
    return this.game.user?.character?.getActiveTokens?.()?.[0] ?? null;
  }

  /** @param {string} id */
  nameOf(id) {
    return this.canvas?.scene?.tokens?.get?.(id)?.name || id;
  }

  /** The annotation for `attacker` attacking `target` in the mode that fits (or `mode`).
   * @param {string} attackerId @param {string} targetId @param {string} [mode] */
  annotation(attackerId, targetId, mode) {
    if (!attackerId || !targetId || attackerId === targetId) return null;
    return this.store.get(attackerId, targetId, mode ?? pickMode(this.store, attackerId, targetId));
  }

  /** What Covercast says about `attacker` attacking `target`, in the mode that fits.
   * @param {string} attackerId @param {string} targetId @param {string} [mode] */
  assess(attackerId, targetId, mode) {
    const ann = this.annotation(attackerId, targetId, mode);
    return ann ? describe(ann, this.t, (id) => this.nameOf(id)) : null;
  }

  /** Redraw every token's badge: targeted tokens get their cover against the attacker. */
  refresh() {
    const layer = this.canvas?.tokens;
    if (layer) for (const token of layer.placeables ?? []) this.refreshToken(token);
    this.gmTools?.redraw();
  }

  /** @param {any} token */
  refreshToken(token) {
    const targets = this.game.user?.targets;
    const attacker = this.attacker();
    const targeted = targets ? [...targets].some((t) => t.id === token.id) : false;
    const info = targeted && attacker ? this.assess(attacker.id, token.id) : null;
    if (info) this.status.set(token.id, info);
    else this.status.delete(token.id);
    this.drawBadge(token, this.setting("showBadges") ? info : null);
  }

  /** A PIXI badge above the token: drawn on the canvas object, never a document write.
   * @param {any} token @param {any} info */
  drawBadge(token, info) {
    let badge = (token.children ?? []).find((/** @type {any} */ c) => c.name === BADGE) ?? null;
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

  // -- chat --------------------------------------------------------------------------------------

  /** On an attack roll: what was applied (recorded in the message by the roller's client,
   * `flags.covercast.applied`), else one line per target the roll recorded, from this
   * client's own view; appended under the chat card on this client (no document is
   * created or changed). @param {any} message */
  onChatMessage(message) {
    this.focusOnAttack(message);
    if (!this.setting("chatLines")) return;
    const applied = message.flags?.[MODULE_ID]?.applied;
    /** @type {string[]} */
    let lines;
    if (Array.isArray(applied) && applied.length > 0) {
      lines = applied.map((/** @type {any} */ a) => String(a.line));
    } else {
      if (!isAttack(message, this.setting("anyRollIsAttack"))) return;
      const { attackerId, targets } = this.attackOf(message);
      lines = [];
      for (const target of targets) {
        const info = this.assess(attackerId, target);
        if (info) lines.push(this.t("ChatLine", { attacker: this.nameOf(attackerId), target: this.nameOf(target), mode: this.t(`Mode.${info.mode}`), text: info.text }));
      }
    }
    if (lines.length === 0) return;
    this.chatLines.set(message.id, lines);
    // The card may already be in the log (rendering and this hook race): add it there too.
    const rendered = Array.from(this.env.document?.querySelectorAll?.(`.chat-message[data-message-id="${message.id}"]`) ?? []);
    for (const element of rendered) appendLines(element, lines);
  }

  /** An attack roll's attacker and the targets it recorded (the system's own record,
   * else the roller's targets now). @param {any} message
   * @returns {{attackerId: string, targets: string[]}} */
  attackOf(message) {
    const attackerId = this.system?.messageAttacker?.(message) ?? message.speaker?.token;
    const targets = this.system?.messageTargets?.(message) ?? [...(message.author ?? message.user)?.targets ?? []].map((/** @type {any} */ t) => t.id);
    return { attackerId, targets };
  }

  /** An attack roll points the overlays at its attacker and first target (focus.mjs).
   * @param {any} message */
  focusOnAttack(message) {
    if (!this.isSender || !isAttack(message, this.setting("anyRollIsAttack"))) return;
    const { attackerId, targets } = this.attackOf(message);
    const scene = message.speaker?.scene ?? this.canvas?.scene?.id;
    const mode = targets[0] ? pickMode(this.store, attackerId, targets[0]) : null;
    this.focus?.onAttack(scene, attackerId, targets[0], mode ?? null);
  }

  /** @param {any} message @param {any} html */
  onRenderChatMessage(message, html) {
    const lines = this.chatLines.get(message.id);
    if (lines) appendLines(html?.jquery ? html[0] : html, lines);
  }
}

// Scene collections Covercast never reads: dropped from a load that would not fit a frame.
const IGNORED_COLLECTIONS = ["drawings", "lights", "notes", "sounds", "templates", "tiles"];

/** Whether this user owns the token (Foundry: its actor's ownership).
 * @param {any} doc @param {any} user */
function ownedBy(doc, user) {
  const test = doc.testUserPermission ?? doc.actor?.testUserPermission;
  if (typeof test === "function") {
    return Boolean(test.call(doc.testUserPermission ? doc : doc.actor, user, "OWNER"));
  }
  return false;
}

/** @param {any} element @param {string[]} lines */
function appendLines(element, lines) {
  if (!element || element.querySelector?.(".covercast-line")) return;
  const html = lines.map((l) => `<div class="covercast-line">${escapeHtml(l)}</div>`).join("");
  const target = element.querySelector?.(".message-content") ?? element;
  target.insertAdjacentHTML("beforeend", html);
}

/** Start the module on `env` (globalThis in Foundry). @param {any} env @param {any} [options] */
export function install(env, options = {}) {
  return new Covercast(env, options).install();
}
