/**
 * D35E (D&D 3.5 for Foundry): its attack cards are item cards (`D35E chat-card item-card`)
 * carrying attack totals (`data-roll`) and the targets as `img[data-target]` token ids.
 * Before the dice, `D35E.ItemUse.preRollAllAttacks` hands over every attack of the action
 * (`{bonus, label}`): like pf1, a single target's cover goes on as the equal penalty, and
 * flanking's +2 when the system's own flanking box was not ticked (`rollData.flanking`):
 * never both. Total cover against the single target stops the attack. D35E has no hook
 * before a saving throw, so Reflex bonuses are only said (chat line, badge).
 *
 * Rule of this module: the numbers come from pf1.mjs's `attackParts`, the same shape.
 */

import { isD35eAttack } from "../util.mjs";
import { expectMessage, liveTargets, tokenOfActor } from "./common.mjs";
import { attackParts } from "./pf1.mjs";


/** @param {any} cc the module */
export function install(cc) {
  cc.env.Hooks.on("D35E.ItemUse.preRollAllAttacks", (/** @type {any} */ item, /** @type {any} */ rollData, /** @type {any[]} */ attacks) =>
    onAttacks(cc, item, rollData, attacks));
  return {
    /** @param {any} message */
    messageTargets(message) {
      if (!isD35eAttack(message)) return null;
      return [...message.content.matchAll(/data-target="([^"]+)"/g)].map((m) => m[1]);
    },
    /** @param {any} message */
    messageAttacker(message) {
      const m = typeof message?.content === "string" ? message.content.match(/data-token-id="([^"]+)"/) : null;
      return m ? m[1].split(".").at(-1) : message.speaker?.token ?? null;
    },
  };
}

/** @param {any} cc @param {any} item @param {any} rollData @param {any[]} attacks */
function onAttacks(cc, item, rollData, attacks) {
  const attacker = tokenOfActor(cc, item?.actor ?? null, cc.attacker()?.id ?? null);
  const result = attackParts(cc, attacker, liveTargets(cc));
  if (result.applied.length === 0 || !attacker) return true;
  const systemFlanks = Number(rollData?.flanking ?? 0) > 0;
  let bonus = 0;
  for (const part of result.parts) {
    const isFlanking = /flank/i.test(part);
    if (isFlanking && systemFlanks) continue; // the system's own +2 is already in
    bonus += Number(part.slice(0, part.indexOf("[")));
  }
  for (const attack of attacks) attack.bonus = (Number(attack.bonus) || 0) + bonus;
  expectMessage(cc, attacker, result.applied);
  return !result.stop;
}
