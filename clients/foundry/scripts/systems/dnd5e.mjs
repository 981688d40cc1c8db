/**
 * dnd5e (v4, v5): cover through the system's own roll hooks, as Simple Cover 5e does.
 * - Attacks (`dnd5e.preRollAttackV2`): each recorded target's AC in the message
 *   (`flags.dnd5e.targets[i].ac`, which the card compares the total with) and the roll's
 *   `target` are raised by the cover bonus (half +2, three-quarters +5); total cover stops
 *   an attack at a single target (the hook returns false) and marks a target of several as
 *   unhittable (AC null, the card's ∞); flanking (the DMG option) gives advantage.
 * - Dexterity saves (`dnd5e.preRollSavingThrowV2`): the cover bonus against the area that
 *   reaches the saver (from the template's origin), in place of the system's own `@cover`.
 *
 * Rule of this module: numbers come from rolls.mjs plans; in "confirm" mode AC changes are
 * given as the equal penalty on the roll (a part the roller sees in the dialog and may
 * remove), in "show" mode nothing changes.
 */

import { savePlan } from "../rolls.mjs";
import { appliedLine, liveTargets, plansFor, recentAreaHit, recordApplied, tokenIdOfUuid, tokenOfActor } from "./common.mjs";

/** @param {any} cc the module */
export function install(cc) {
  const H = cc.env.Hooks;
  H.on("dnd5e.preRollAttackV2", (/** @type {any} */ config, /** @type {any} */ dialog, /** @type {any} */ message) => onAttack(cc, config, dialog, message));
  H.on("dnd5e.preRollSavingThrowV2", (/** @type {any} */ config, /** @type {any} */ dialog) => onSave(cc, config, dialog));
  return {
    /** @param {any} message */
    messageTargets(message) {
      const recorded = message.flags?.dnd5e?.targets;
      if (!Array.isArray(recorded)) return null;
      return recorded.map((/** @type {any} */ r) => r.tokenId ?? tokenIdOfUuid(r.uuid) ?? actorToken(cc, r.uuid)).filter(Boolean);
    },
  };
}

/** The token of the actor a recorded target names (dnd5e records the actor's UUID).
 * @param {any} cc @param {string} uuid */
function actorToken(cc, uuid) {
  const user = [...(cc.game.user?.targets ?? [])].find((t) => t.actor?.uuid === uuid || t.document?.actor?.uuid === uuid);
  if (user) return user.id;
  const doc = cc.canvas?.scene?.tokens?.find?.((/** @type {any} */ t) => t.actor?.uuid === uuid);
  return doc?.id ?? null;
}

/** @param {any} cc @param {any} config @param {any} dialog @param {any} message */
function onAttack(cc, config, dialog, message) {
  const how = cc.setting("applyMode");
  const actor = config.subject?.actor ?? config.subject?.item?.actor ?? null;
  const attacker = tokenOfActor(cc, actor, message?.data?.speaker?.token ?? cc.attacker()?.id ?? null);
  const recorded = message?.data?.flags?.dnd5e?.targets;
  const ids = Array.isArray(recorded)
    ? recorded.map((/** @type {any} */ r) => tokenIdOfUuid(r.uuid) ?? actorToken(cc, r.uuid))
    : liveTargets(cc);
  const plans = plansFor(cc, attacker, ids.filter(Boolean));
  if (plans.length === 0) return true;
  const roll = (config.rolls ??= [{}])[0];
  roll.parts ??= [];
  roll.options ??= {};
  const applied = [];
  let stopped = false;
  for (const { target, plan } of plans) {
    const entry = { target, line: appliedLine(cc, attacker, target, plan, how), ac: 0, attack: 0, advantage: false, stopped: false };
    if (how === "auto") {
      const i = ids.indexOf(target);
      const slot = Array.isArray(recorded) ? recorded[i] : null;
      if (plan.total) {
        if (plans.length === 1) {
          stopped = true;
          entry.stopped = true;
          cc.notify("warn", cc.t("Notify.totalCover", { target: cc.nameOf(target), attacker: cc.nameOf(attacker) }));
        } else if (slot) {
          slot.ac = null;
        }
      } else if (plan.acTotal !== 0) {
        entry.ac = plan.acTotal;
        if (slot && typeof slot.ac === "number") slot.ac += plan.acTotal;
        if (plans.length === 1 && typeof config.target === "number") config.target += plan.acTotal;
        if (plans.length === 1 && typeof roll.options.target === "number") roll.options.target += plan.acTotal;
      }
    } else if (how === "confirm" && !plan.total && plans.length === 1 && plan.acTotal !== 0) {
      roll.parts.push(`${-plan.acTotal}`);
      entry.attack -= plan.acTotal;
      if (dialog) dialog.configure = true;
    }
    applied.push(entry);
  }
  // The attacker's own modifiers are the same against every target: flanking, taken only
  // when it holds against all of them.
  if (how !== "show" && plans.every(({ plan }) => !plan.total)) {
    const bonus = Math.min(...plans.map(({ plan }) => plan.attackTotal));
    if (bonus !== 0) {
      roll.parts.push(`${bonus}`);
      for (const e of applied) e.attack += bonus;
    }
    if (plans.every(({ plan }) => plan.advantage)) {
      config.advantage = true;
      roll.options.advantageMode = 1;
      for (const e of applied) e.advantage = true;
      if (how === "confirm" && dialog) dialog.configure = true;
    }
  }
  recordApplied(message?.data, applied);
  return !stopped;
}

/** @param {any} cc @param {any} config @param {any} dialog */
function onSave(cc, config, dialog) {
  if (config.ability !== "dex") return true;
  const how = cc.setting("applyMode");
  if (how === "show") return true;
  const actor = config.subject ?? null;
  const token = tokenOfActor(cc, actor, null);
  const plan = savePlan(recentAreaHit(cc, token), { area: true });
  if (!plan) return true;
  const roll = (config.rolls ??= [{}])[0];
  // The system adds the saver's own cover status as `@cover`: ours replaces it, never both.
  roll.parts = (roll.parts ?? []).filter((/** @type {string} */ p) => p !== "@cover");
  roll.parts.push(`${plan.total}`);
  if (how === "confirm" && dialog) dialog.configure = true;
  return true;
}
