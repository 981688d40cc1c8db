/**
 * The table's focus, for stream overlays: the pair play is about right now.
 *
 * - When the combat turn changes: the combatant whose turn it is, and its target (the first
 *   token targeted by a player who owns it, else by this GM);
 * - when that owner (or this GM) targets another token: the new target;
 * - when an attack roll lands in the chat: its attacker and first target, in the roll's
 *   attack mode.
 *
 * Sent as `scene.focus` (docs/protocol.md 3.18) by the elected sender only, over its gm
 * connection, and only when it differs from the last one sent; the server hands each
 * overlay its own view, without hidden tokens.
 *
 * Rule of this module: it reads Foundry documents and sends one message type; it draws
 * nothing and writes no document.
 */

import { MODULE_ID } from "./util.mjs";

/** @param {any} cc the module */
export function installFocus(cc) {
  const focus = new Focus(cc);
  const H = cc.env.Hooks;
  H.on("updateCombat", (/** @type {any} */ combat, /** @type {any} */ changed) => {
    if (changed && ("turn" in changed || "round" in changed || "combatants" in changed)) focus.onTurn(combat);
  });
  H.on("combatStart", (/** @type {any} */ combat) => focus.onTurn(combat));
  H.on("targetToken", (/** @type {any} */ user) => focus.onTarget(user));
  return focus;
}

class Focus {
  /** @param {any} cc */
  constructor(cc) {
    this.cc = cc;
    /** The last focus sent, as "scene|attacker|target|mode", so nothing is sent twice. */
    this.last = null;
    /** @type {{scene: string, attacker: string, target: string | null, mode: string | null} | null} */
    this.lastSent = null;
    /** The combat turn's attacker: a later target change of its owner updates the focus. */
    this.turn = null;
  }

  get enabled() {
    return this.cc.isSender && this.cc.link.open && this.cc.setting("followPlay") !== false;
  }

  /** @param {any} combat */
  onTurn(combat) {
    if (!this.enabled) return;
    const combatant = combat?.combatant;
    const scene = combat?.scene?.id ?? combatant?.sceneId ?? combatant?.token?.parent?.id;
    const attacker = combatant?.tokenId ?? combatant?.token?.id ?? null;
    if (!scene || !attacker) return;
    this.turn = { scene, attacker, owners: this.owners(combatant) };
    this.send(scene, attacker, this.targetOf(this.turn.owners, scene), null);
  }

  /** A user targeted or untargeted something: when it is the turn's owner (or the GM),
   * the focus follows its first target. @param {any} user */
  onTarget(user) {
    if (!this.enabled || !this.turn || !user) return;
    const { scene, attacker, owners } = this.turn;
    if (!owners.some((/** @type {any} */ u) => u?.id === user.id)) return;
    this.send(scene, attacker, this.targetOf(owners, scene), null);
  }

  /** An attack roll: its attacker and first target, in its mode.
   * @param {string} scene @param {string} attacker @param {string | undefined} target
   * @param {string | null} mode */
  onAttack(scene, attacker, target, mode) {
    if (!this.enabled || !scene || !attacker) return;
    this.send(scene, attacker, target ?? null, mode);
  }

  /** Who aims for this combatant: its players (Foundry's Combatant#players), then the GM
   * on this client, who runs the monsters. @param {any} combatant */
  owners(combatant) {
    const players = Array.from(combatant?.players ?? []).filter((/** @type {any} */ u) => u?.active);
    return [...players, this.cc.game.user];
  }

  /** The first token, in `scene`, that one of `owners` targets (the first owner with any).
   * @param {any[]} owners @param {string} scene */
  targetOf(owners, scene) {
    for (const user of owners) {
      for (const token of user?.targets ?? []) {
        const doc = token?.document ?? token;
        if ((doc?.parent?.id ?? scene) === scene && doc?.id) return doc.id;
      }
    }
    return null;
  }

  /** @param {string} scene @param {string} attacker @param {string | null} target
   * @param {string | null} mode */
  send(scene, attacker, target, mode) {
    if (!this.cc.loaded?.has?.(scene)) return; // the server does not hold it (yet)
    const key = [scene, attacker, target, mode].join("|");
    if (key === this.last) return;
    this.last = key;
    this.lastSent = { scene, attacker, target, mode };
    this.cc.link.send({ type: "scene.focus", scene, attacker, target, mode }, scene);
    this.cc.callOwnHook(`${MODULE_ID}.focus`, { scene, attacker, target, mode });
  }

  /** The scene was loaded again (a reconnect, a resync): a restarted server lost the
   * focus, so the last one sent goes again, after the load. */
  resend() {
    const was = this.lastSent;
    this.last = null;
    if (was && this.enabled) this.send(was.scene, was.attacker, was.target, was.mode);
  }
}
