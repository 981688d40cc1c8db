/**
 * The module's pure parts: who sends, what an actor's size and reach are, whether a chat
 * message is an attack, the annotation store and the words shown to the table.
 *
 * Rule of this module: no Foundry globals, no sockets; every function takes what it reads.
 */

export const MODULE_ID = "covercast";
export const MODES = ["melee", "reach", "ranged"];

/** Foundry's user roles (CONST.USER_ROLES): an assistant GM is 3, a full GM 4. */
const GAMEMASTER = 4;

/**
 * Active GMs in the order Foundry's `game.users.activeGM` picks them: full GMs before
 * assistants, then by id (plain string order, the same on every client).
 * @param {Iterable<{id: string, isGM: boolean, active: boolean, role?: number}>} users
 */
export function gmOrder(users) {
  return [...users].filter((u) => u.active && u.isGM)
    .sort((a, b) => ((b.role ?? GAMEMASTER) - (a.role ?? GAMEMASTER)) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * The one client that talks to the server for the table: the first active GM, in
 * `activeGM` order, whom the server has not refused (`refused`: the ids of the GMs whose
 * browsers were turned away, for want of the access token); null when no GM is left.
 * @param {Iterable<{id: string, isGM: boolean, active: boolean, role?: number}>} users
 * @param {Set<string>} [refused]
 */
export function electSender(users, refused = new Set()) {
  return gmOrder(users).find((u) => !refused.has(u.id)) ?? null;
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
 * @param {any} actor
 */
export function actorSize(actor) {
  let value = actor?.system?.traits?.size;
  if (value && typeof value === "object") value = value.value ?? value.base;
  return typeof value === "string" ? SIZES[value.toLowerCase()] ?? null : null;
}

/** The creature's natural reach in feet where the system records it (pf2e
 * `system.attributes.reach.base`), or null (the server then uses the size's).
 * @param {any} actor */
export function actorReach(actor) {
  const value = actor?.system?.attributes?.reach?.base;
  return typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : null;
}

/** What Covercast adds to a token from its actor: `size` and `reach`, null when unknown.
 * @param {any} actor */
export function actorExtras(actor) {
  return { size: actorSize(actor), reach: actorReach(actor) };
}

/**
 * Is this chat message an attack roll? Core Foundry has no attack event, so the systems'
 * own markers are read: dnd5e `flags.dnd5e.roll.type == "attack"`, pf2e
 * `flags.pf2e.context.type` (attack-roll, spell-attack-roll), pf1 `message.system` of an
 * action with attacks (and the deprecated `flags.pf1.metadata`), D35E's attack cards
 * (`isD35eAttack`). With `anyRoll`, every roll counts.
 * @param {any} message @param {boolean} [anyRoll]
 */
export function isAttack(message, anyRoll = false) {
  const flags = message?.flags ?? {};
  if (flags.dnd5e?.roll?.type === "attack") return true;
  if (["attack-roll", "spell-attack-roll"].includes(flags.pf2e?.context?.type)) return true;
  if ((message?.system?.rolls?.attacks?.length ?? 0) > 0) return true;
  if ((flags.pf1?.metadata?.rolls?.attacks?.length ?? 0) > 0) return true;
  if (isD35eAttack(message)) return true;
  return anyRoll && ((message?.rolls?.length ?? 0) > 0 || message?.isRoll === true);
}

/** A D35E attack card, as its HTML marks it: an item card (`D35E chat-card item-card`)
 * with attack totals on its buttons (`data-roll`). D35E sets no flag that says "attack".
 * @param {any} message */
export function isD35eAttack(message) {
  const html = typeof message?.content === "string" ? message.content : "";
  return /class="[^"]*\bD35E\b[^"]*\bchat-card\b/.test(html) && /data-roll="/.test(html);
}

/** The attack mode a badge shows: melee when the target is within natural reach, reach
 * when within a reach weapon's, ranged otherwise.
 * @param {AnnotationStore} store @param {string} attacker @param {string} target */
export function pickMode(store, attacker, target) {
  for (const mode of ["melee", "reach"]) {
    const ann = store.get(attacker, target, mode);
    if (ann?.loe && ann.flags?.in_reach) return mode;
  }
  return "ranged";
}

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function byteLength(text) {
  return new TextEncoder().encode(text).length;
}

/** The annotations of one scene, keyed by (attacker, target, mode), kept up to date from
 * full sets and deltas. */
export class AnnotationStore {
  constructor() {
    /** @type {string | null} */
    this.scene = null;
    this.revision = 0;
    /** @type {Map<string, any>} */
    this.byKey = new Map();
  }

  /** @param {string} attacker @param {string} target @param {string} mode */
  static key(attacker, target, mode) {
    return `${attacker}\u0000${target}\u0000${mode}`;
  }

  /** @param {string} attacker @param {string} target @param {string} mode */
  get(attacker, target, mode) {
    return this.byKey.get(AnnotationStore.key(attacker, target, mode)) ?? null;
  }

  get size() {
    return this.byKey.size;
  }

  /** @param {string | null} [scene] */
  clear(scene = null) {
    this.scene = scene;
    this.revision = 0;
    this.byKey.clear();
  }

  /** Apply an `annotations` message: a full set replaces everything, a delta replaces the
   * listed annotations and drops the removed keys.
   * @param {{full: boolean, scene: string | null, revision: number, annotations: any[], removed?: string[][]}} msg */
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

/**
 * The verbose `annotations` message a compact one stands for (docs/protocol.md section 12;
 * asked for in `hello`): every flag named, true or false, and each modifier in full, exactly
 * as the server sends a client that did not ask. Any other message is returned as it is.
 * It mirrors covercast/client.py's `expand_plain` (test/compact.test.mjs compares the two
 * forms of real frames).
 * @param {any} msg
 */
export function expandAnnotations(msg) {
  if (!msg || msg.type !== "annotations" || msg.form !== "compact") return msg;
  /** @type {string[]} */
  const names = msg.flags;
  /** @type {any[]} */
  const table = msg.modifiers;
  const annotations = msg.annotations.map((/** @type {any[]} */ row) => {
    /** @type {Record<string, boolean>} */
    const flags = {};
    for (const name of names) flags[name] = false;
    for (const k of row[6]) flags[names[k]] = true;
    const ann = { attacker: row[0], target: row[1], mode: row[2], loe: row[3], cover: row[4],
                  modifiers: row[5].map((/** @type {number} */ k) => table[k]), flags };
    return row.length > 7 ? { ...ann, ...row[7] } : ann;
  });
  const { form, flags, modifiers, ...rest } = msg;
  return { ...rest, annotations };
}
