/**
 * A small stand-in for the parts of Foundry VTT the module touches: Hooks, game (users,
 * settings, socket, modules), canvas (scene, token layer, placeables), ui.notifications,
 * PIXI, and the world's documents. One World holds the users and scenes every client shares;
 * each Client is one browser (its own hooks, settings, canvas and module instance). World
 * changes fire the same hooks on every client, as Foundry's server broadcast does.
 */

import { install } from "../scripts/core.mjs";
import { i18n } from "./i18n.mjs";

export class FakeHooks {
  constructor() {
    this.handlers = new Map();
  }

  on(name, fn) {
    if (!this.handlers.has(name)) this.handlers.set(name, []);
    this.handlers.get(name).push({ fn, once: false });
    return fn;
  }

  once(name, fn) {
    this.on(name, fn);
    this.handlers.get(name).at(-1).once = true;
    return fn;
  }

  /** Foundry's Hooks.call: handlers in order until one returns false; false then. */
  call(name, ...args) {
    const list = this.handlers.get(name) ?? [];
    this.handlers.set(name, list.filter((h) => !h.once));
    for (const h of list) if (h.fn(...args) === false) return false;
    return true;
  }

  callAll(name, ...args) {
    const list = this.handlers.get(name) ?? [];
    this.handlers.set(name, list.filter((h) => !h.once));
    for (const h of list) h.fn(...args);
    return true;
  }
}

/** Foundry's mergeObject for update diffs: nested maps merge, `-=key` deletes. */
export function mergeDiff(target, diff) {
  for (const [key, value] of Object.entries(diff)) {
    if (key.startsWith("-=")) {
      delete target[key.slice(2)];
    } else if (value && typeof value === "object" && !Array.isArray(value)
               && target[key] && typeof target[key] === "object") {
      mergeDiff(target[key], value);
    } else {
      target[key] = structuredClone(value);
    }
  }
  return target;
}

/** Every attempt to write a document (the module must make none). */
export const writes = [];
const write = (what) => (...args) => { writes.push({ what, args }); return Promise.resolve(); };

export class Collection extends Array {
  get(id) {
    return this.find((d) => d.id === id);
  }
}

/** An embedded document (TokenDocument, WallDocument): source data, parent, toObject(). */
class FakeDocument {
  constructor(parent, source, actor = null) {
    this.parent = parent;
    this._source = structuredClone(source);
    this.actor = actor;
  }

  get id() { return this._source._id; }
  get name() { return this._source.name; }
  get hidden() { return Boolean(this._source.hidden); }
  // A TokenDocument's size in grid units (walls and regions have none).
  get width() { return this._source.width; }
  get height() { return this._source.height; }
  get flags() { return this._source.flags ?? {}; }
  toObject() { return structuredClone(this._source); }
  get uuid() { return `Scene.${this.parent.id}.Token.${this.id}`; }
  update = write("update");
  /** A flag write: recorded, and (as Foundry's server would) applied and broadcast as an
   * updateToken to every client, when the scene's world is known. */
  setFlag(scope, key, value) {
    writes.push({ what: "setFlag", args: [scope, key, value] });
    this.parent.world?.updateToken(this.parent, this.id, { flags: { [scope]: { [key]: value } } });
    return Promise.resolve(this);
  }

  unsetFlag(scope, key) {
    writes.push({ what: "unsetFlag", args: [scope, key] });
    this.parent.world?.updateToken(this.parent, this.id, { flags: { [scope]: { [`-=${key}`]: null } } });
    return Promise.resolve(this);
  }

  toggleStatusEffect = write("toggleStatusEffect");
  createEmbeddedDocuments = write("createEmbeddedDocuments");
}

// Every field Foundry v13's TokenDocument#toObject() has, so the server sees the real shape.
export function tokenSource(id, name, x, y, extra = {}) {
  return {
    _id: id, name, displayName: 20, actorId: null, actorLink: false, delta: { _id: id, system: {}, items: [], effects: [], flags: {} },
    width: 1, height: 1, texture: { src: `tokens/${id}.webp`, anchorX: 0.5, anchorY: 0.5, scaleX: 1, scaleY: 1 },
    shape: 4, x, y, elevation: 0, sort: 0, locked: false, lockRotation: false, rotation: 0, alpha: 1,
    hidden: false, disposition: -1, displayBars: 0, bar1: { attribute: "attributes.hp" }, bar2: { attribute: null },
    light: { dim: 0, bright: 0 }, sight: { enabled: false, range: 0 }, detectionModes: [], occludable: { radius: 0 },
    ring: { enabled: false }, turnMarker: { mode: 1 }, movementAction: null, _movementHistory: [], _regions: [],
    flags: { "some-module": { note: "ignored" } }, _stats: { coreVersion: "13.345" }, ...extra,
  };
}

export function wallSource(id, c, extra = {}) {
  return {
    _id: id, c, light: 20, move: 20, sight: 20, sound: 20, dir: 0, door: 0, ds: 0, doorSound: "",
    threshold: { light: null, sight: null, sound: null, attenuation: false },
    animation: null, flags: {}, _stats: { coreVersion: "13.345" }, ...extra,
  };
}

export class FakeScene {
  constructor(id, { tokens = [], walls = [], actors = {} } = {}) {
    this.id = id;
    this.name = `Scene ${id}`;
    this._source = {
      _id: id, name: this.name, active: true, navigation: true, navOrder: 0, navName: "",
      background: { src: "maps/keep.webp" }, foreground: null, foregroundElevation: 20, thumb: null,
      width: 2000, height: 1000, padding: 0.25, initial: { x: null, y: null, scale: null },
      backgroundColor: "#999999",
      grid: { type: 1, size: 100, style: "solidLines", thickness: 1, color: "#000000", alpha: 0.2, distance: 5, units: "ft" },
      tokenVision: true, fog: { exploration: true }, environment: { darknessLevel: 0 },
      drawings: [], lights: [], notes: [], sounds: [], regions: [], templates: [], tiles: [],
      playlist: null, playlistSound: null, journal: null, journalEntryPage: null, weather: "",
      folder: null, sort: 0, ownership: { default: 0 }, flags: {}, _stats: { coreVersion: "13.345" },
    };
    this.tokens = new Collection(...tokens.map((t) => new FakeDocument(this, t, actors[t._id] ?? null)));
    this.walls = new Collection(...walls.map((w) => new FakeDocument(this, w)));
  }

  toObject() {
    return {
      ...structuredClone(this._source),
      tokens: this.tokens.map((t) => t.toObject()),
      walls: this.walls.map((w) => w.toObject()),
    };
  }
}

// -- PIXI ---------------------------------------------------------------------------------------

class Point {
  constructor() { this.x = 0; this.y = 0; }
  set(x, y) { this.x = x; this.y = y; }
}

export class Container {
  constructor() {
    this.children = [];
    this.position = new Point();
    this.destroyed = false;
    this.name = null;
  }

  addChild(...children) {
    this.children.push(...children);
    return children[0];
  }

  removeChild(child) {
    this.children = this.children.filter((c) => c !== child);
    return child;
  }

  removeChildren() {
    const out = this.children;
    this.children = [];
    return out;
  }

  destroy() { this.destroyed = true; }
}

class Graphics extends Container {
  constructor() {
    super();
    this.segments = []; // [{color, from, to}] as drawn by lineStyle/moveTo/lineTo
    this.pen = null;
    this.color = null;
  }

  beginFill() { return this; }
  drawRoundedRect(x, y, w, h) { this.width = w; this.height = h; return this; }
  endFill() { return this; }
  clear() { this.segments = []; return this; }
  lineStyle(width, color) { this.color = color; return this; }
  moveTo(x, y) { this.pen = [x, y]; return this; }
  lineTo(x, y) { this.segments.push({ color: this.color, from: this.pen, to: [x, y] }); this.pen = [x, y]; return this; }
}

class Text extends Container {
  constructor(text, style) {
    super();
    this.text = text;
    this.style = style;
    this.width = text.length * 9;
    this.height = 22;
  }
}

export const PIXI = { Container, Graphics, Text };

/** A token on the canvas (the placeable): a PIXI container holding the module's badge. */
class FakeToken extends Container {
  constructor(document, gridSize) {
    super();
    this.document = document;
    this.w = document._source.width * gridSize;
  }

  get id() { return this.document.id; }

  /** The text of the Covercast badge drawn on this token, or null. */
  badge() {
    const badge = this.children.find((c) => c.name === "covercast-status");
    return badge ? badge.children.find((c) => c instanceof Text).text : null;
  }
}

// -- users, socket, world -------------------------------------------------------------------------

export class FakeUser {
  /** role: Foundry's CONST.USER_ROLES (1 player, 3 assistant GM, 4 GM). */
  constructor(id, name, isGM, role = isGM ? 4 : 1) {
    this.id = id;
    this.name = name;
    this.isGM = isGM;
    this.role = role;
    this.active = false;
    this.targets = new Set();
    this.character = null;
  }
}

class FakeSocket {
  constructor(world, client) {
    this.world = world;
    this.client = client;
    this.handlers = new Map();
  }

  on(event, fn) { this.handlers.set(event, fn); }

  /** Like Foundry's socket: every other connected client gets it, a little later. */
  emit(event, data) {
    const copy = structuredClone(data);
    for (const other of this.world.clients) {
      if (other === this.client || !other.user.active) continue;
      setImmediate(() => other.game.socket.handlers.get(event)?.(structuredClone(copy)));
    }
    this.world.socketLog.push({ from: this.client.user.id, data: copy });
  }
}

/** Foundry's settings: a client setting lives in one browser; a world setting is stored
 * once for the world, and its change reaches every client (with its onChange). */
class FakeSettings {
  constructor(values, world) {
    this.defs = new Map();
    this.settings = this.defs;
    this.values = new Map(Object.entries(values));
    this.world = world;
  }

  register(module, key, def) { this.defs.set(`${module}.${key}`, def); }

  get(module, key) {
    const full = `${module}.${key}`;
    if (!this.defs.has(full)) throw new Error(`setting ${full} is not registered`);
    const def = this.defs.get(full);
    if (def.scope === "world" && this.world.settingValues.has(full)) return this.world.settingValues.get(full);
    return this.values.has(key) ? this.values.get(key) : def.default;
  }

  async set(module, key, value) {
    const full = `${module}.${key}`;
    if (this.defs.get(full).scope === "world") {
      this.world.settingValues.set(full, value);
      for (const c of this.world.activeClients()) c.game.settings.defs.get(full)?.onChange?.(value);
      return;
    }
    this.values.set(key, value);
    this.defs.get(full).onChange?.(value);
  }
}

/** One browser: its user, hooks, settings, canvas and the module running in it. */
export class Client {
  constructor(world, user, { settings = {}, WebSocket = globalThis.WebSocket, backoffBase = 50, backoffMax = 400, maxFrameBytes, system = world.system, generation = 13 }) {
    this.world = world;
    this.user = user;
    this.notifications = [];
    const notify = (level) => (text) => this.notifications.push({ level, text });
    this.Hooks = new FakeHooks();
    this.game = {
      user, users: world.users, release: { generation },
      system: { id: system }, i18n: i18n("en"),
      settings: new FakeSettings(settings, world),
      socket: new FakeSocket(world, this),
      modules: new Map([["covercast", { id: "covercast", active: true }]]),
    };
    this.canvas = { ready: false, scene: null, tokens: { placeables: [], controlled: [] }, controls: new Container() };
    this.env = {
      Hooks: this.Hooks, game: this.game, PIXI,
      get canvas() { return client.canvas; },
      ui: { notifications: { info: notify("info"), warn: notify("warn"), error: notify("error") } },
      document: { querySelectorAll: () => [], createElement: (tag) => new FakeElement(tag) },
      ChatMessage: { create: write("ChatMessage.create") },
      ActiveEffect: { create: write("ActiveEffect.create") },
      WebSocket,
    };
    const client = this;
    world.systemModel?.(this);
    this.module = install(this.env, { backoffBase, backoffMax, maxFrameBytes });
  }

  /** Log in: Foundry's init, ready, then the canvas of the scene. */
  login(scene) {
    this.user.active = true;
    for (const other of this.world.clients) {
      if (other !== this) other.Hooks.callAll("userConnected", this.user, true);
    }
    this.Hooks.callAll("init");
    this.Hooks.callAll("ready");
    this.view(scene);
  }

  logout() {
    this.module.stop();
    this.user.active = false;
    for (const other of this.world.clients) {
      if (other !== this) other.Hooks.callAll("userConnected", this.user, false);
    }
  }

  /** Draw the canvas for a scene, as Foundry does on scene activation. */
  view(scene) {
    this.canvas.scene = scene;
    this.canvas.ready = true;
    this.canvas.tokens.placeables = scene.tokens.map((doc) => new FakeToken(doc, scene._source.grid.size));
    this.canvas.tokens.controlled = [];
    this.Hooks.callAll("canvasReady", this.canvas);
  }

  token(id) {
    return this.canvas.tokens.placeables.find((t) => t.id === id);
  }

  control(id) {
    this.canvas.tokens.controlled = [this.token(id)];
    this.Hooks.callAll("controlToken", this.token(id), true);
  }

  /** Target a token, as the T key does: the targets set changes, then targetToken fires on
   * every client (Foundry broadcasts targeting). */
  target(id) {
    const token = this.token(id);
    this.user.targets.add(token);
    for (const c of this.world.activeClients()) c.Hooks.callAll("targetToken", this.user, c.token(id), true);
  }

  untargetAll() {
    for (const token of [...this.user.targets]) {
      this.user.targets.delete(token);
      for (const c of this.world.activeClients()) c.Hooks.callAll("targetToken", this.user, c.token(token.id), false);
    }
  }

  badge(id) {
    return this.token(id)?.badge() ?? null;
  }

  /** Foundry redraws a token from scratch (its children are destroyed), then calls drawToken. */
  redraw(id) {
    const token = this.token(id);
    for (const child of token.removeChildren()) child.destroy();
    this.Hooks.callAll("drawToken", token);
  }
}

export class World {
  /** system: the game system's id (`game.system.id`); systemModel(client), when given,
   * adds that system's roll pipeline to each client (test-support/systems.mjs). */
  constructor({ system = "worldbuilding", systemModel = null } = {}) {
    this.users = new Collection();
    this.settingValues = new Map(); // world settings, once for every client
    this.clients = [];
    this.socketLog = [];
    this.nextMessage = 1;
    this.system = system;
    this.systemModel = systemModel;
  }

  /** A scene of this world: its flag writes come back as updates to every client. */
  adopt(scene) {
    scene.world = this;
    return scene;
  }

  addUser(id, name, isGM, role) {
    const user = new FakeUser(id, name, isGM, role);
    this.users.push(user);
    return user;
  }

  client(user, options) {
    const client = new Client(this, user, options);
    this.clients.push(client);
    return client;
  }

  activeClients() {
    return this.clients.filter((c) => c.user.active);
  }

  /** Document changes, broadcast to every connected client's hooks as Foundry does. */
  updateToken(scene, id, changed) {
    const doc = scene.tokens.get(id);
    const diff = { _id: id, ...changed };
    mergeDiff(doc._source, changed);
    for (const c of this.activeClients()) c.Hooks.callAll("updateToken", doc, diff, { diff: true }, "user");
  }

  createToken(scene, source) {
    const doc = new FakeDocument(scene, source);
    scene.tokens.push(doc);
    for (const c of this.activeClients()) {
      if (c.canvas.scene === scene) c.canvas.tokens.placeables.push(new FakeToken(doc, 100));
      c.Hooks.callAll("createToken", doc, {}, "user");
    }
    return doc;
  }

  deleteToken(scene, id) {
    const doc = scene.tokens.get(id);
    scene.tokens.splice(scene.tokens.indexOf(doc), 1);
    for (const c of this.activeClients()) {
      c.canvas.tokens.placeables = c.canvas.tokens.placeables.filter((t) => t.id !== id);
      c.Hooks.callAll("deleteToken", doc, {}, "user");
    }
  }

  /** An actor change (its size, say), seen by every client; the actor's tokens are those
   * whose document holds it. */
  updateActor(scene, actor, changed) {
    mergeDiff(actor, changed);
    actor.getActiveTokens = (linked, document) => scene.tokens.filter((t) => t.actor === actor)
      .map((t) => (document ? t : { document: t }));
    for (const c of this.activeClients()) c.Hooks.callAll("updateActor", actor, changed, {}, "user");
  }

  updateScene(scene, changed) {
    mergeDiff(scene._source, changed);
    for (const c of this.activeClients()) c.Hooks.callAll("updateScene", scene, { _id: scene.id, ...changed }, {}, "user");
  }

  updateWall(scene, id, changed) {
    const doc = scene.walls.get(id);
    const diff = { _id: id, ...changed };
    mergeDiff(doc._source, changed);
    for (const c of this.activeClients()) c.Hooks.callAll("updateWall", doc, diff, { diff: true }, "user");
  }

  createWall(scene, source) {
    const doc = new FakeDocument(scene, source);
    scene.walls.push(doc);
    for (const c of this.activeClients()) c.Hooks.callAll("createWall", doc, {}, "user");
    return doc;
  }

  deleteWall(scene, id) {
    const doc = scene.walls.get(id);
    scene.walls.splice(scene.walls.indexOf(doc), 1);
    for (const c of this.activeClients()) c.Hooks.callAll("deleteWall", doc, {}, "user");
  }

  /** A combat in `scene` with these tokens in initiative order, each owned by `players`
   * (Foundry's Combatant#players: the non-GM users owning its actor); it starts on the
   * first turn (combatStart, then updateCombat, as Foundry's combat tracker does). */
  startCombat(scene, order) {
    const combatants = order.map(([tokenId, players = []]) => ({
      tokenId, sceneId: scene.id, token: scene.tokens.get(tokenId), players,
    }));
    const combat = {
      id: `combat${this.nextMessage++}`, scene, combatants, round: 1, turn: 0,
      get combatant() { return this.combatants[this.turn] ?? null; },
    };
    for (const c of this.activeClients()) c.Hooks.callAll("combatStart", combat, { round: 1, turn: 0 });
    for (const c of this.activeClients()) c.Hooks.callAll("updateCombat", combat, { round: 1, turn: 0 }, {}, "user");
    return combat;
  }

  /** The tracker's "next turn": the turn (and, past the last, the round) moves on. */
  nextTurn(combat) {
    const changed = { turn: (combat.turn + 1) % combat.combatants.length };
    if (changed.turn === 0) changed.round = combat.round + 1;
    Object.assign(combat, changed);
    for (const c of this.activeClients()) c.Hooks.callAll("updateCombat", combat, changed, {}, "user");
  }

  /** A chat message from `author`, spoken by a token, as a system's attack roll creates it;
   * returns the message and, per client, the card element the render hook was given. */
  chat(author, speakerToken, flags, extra = {}) {
    const source = {
      id: `msg${this.nextMessage++}`, author, speaker: { token: speakerToken, scene: this.clients.find((c) => c.user === author)?.canvas.scene?.id }, flags, rolls: [{}], ...extra,
    };
    // preCreateChatMessage runs on the author's client only, on the document before it is
    // stored: what it changes with updateSource is what every client then receives.
    const creator = this.clients.find((c) => c.user === author);
    const doc = { ...source, updateSource(changes) { mergeDiff(this, structuredClone(changes)); } };
    creator?.Hooks.callAll("preCreateChatMessage", doc, {}, {}, author.id);
    const message = structuredClone({ ...doc, updateSource: undefined, author: undefined });
    message.author = author;
    const cards = new Map();
    for (const c of this.activeClients()) {
      c.Hooks.callAll("createChatMessage", message, {}, author.id);
      const card = new FakeCard();
      c.Hooks.callAll(c.game.release.generation >= 13 ? "renderChatMessageHTML" : "renderChatMessage",
        message, c.game.release.generation >= 13 ? card : jquery(card), {});
      cards.set(c, card);
    }
    return { message, cards };
  }
}

/** A rendered chat card: records the HTML the module appends. */
class FakeCard {
  constructor() {
    this.appended = [];
  }

  querySelector(selector) {
    if (selector === ".covercast-line" && this.appended.length > 0) return {};
    return null;
  }

  insertAdjacentHTML(position, html) {
    this.appended.push(html);
  }

  get text() {
    return this.appended.join("").replace(/<[^>]+>/g, "\n").replace(/&#(\d+);/g, (_, n) => String.fromCharCode(n)).trim();
  }
}

/** What a v12 render hook gets: a jQuery wrapper, the element at [0]. */
function jquery(element) {
  return { jquery: "3.7.1", 0: element, length: 1 };
}

/** The few DOM element calls the Token HUD button makes. */
export class FakeElement {
  constructor(tag) {
    this.tagName = tag.toUpperCase();
    this.className = "";
    this.dataset = {};
    this.title = "";
    this.innerHTML = "";
    this.children = [];
    this.listeners = new Map();
  }

  addEventListener(type, fn) { this.listeners.set(type, fn); }
  appendChild(child) { this.children.push(child); return child; }
  click() { return this.listeners.get("click")?.({}); }

  querySelector(selector) {
    if (selector.startsWith(".")) {
      const classes = selector.split(".").filter(Boolean);
      const search = (el) => {
        for (const c of el.children) {
          if (classes.every((k) => c.className.split(" ").includes(k))) return c;
          const found = search(c);
          if (found) return found;
        }
        return null;
      };
      return search(this);
    }
    return null;
  }
}

/** The Token HUD as Foundry renders it for a token: three columns of control icons. */
export function tokenHud(doc) {
  const root = new FakeElement("div");
  for (const side of ["left", "middle", "right"]) {
    const col = new FakeElement("div");
    col.className = `col ${side}`;
    root.appendChild(col);
  }
  return { hud: { object: { document: doc }, document: doc }, html: root };
}
