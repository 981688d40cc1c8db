/**
 * pf1 (Pathfinder 1e): the system rolls an attack once and shows each target's AC beside it
 * without comparing them, and has no hook that changes a target's AC for one attack. So,
 * through `pf1PreAttackRoll` (each attack roll's parts, before the dice):
 * - against a single target, the cover's AC bonus goes onto the roll as the equal penalty
 *   ("-4[Cover]", "-2[Partial cover]", "-8[Improved cover]"), so the total is read against
 *   the AC the card shows; against several targets, each target's cover is only said in
 *   the chat line (one roll cannot carry several penalties);
 * - flanking's +2 goes onto the roll when it holds against every target;
 * - total cover against the single target stops the attack (the hook returns false).
 * Reflex saves (`pf1PreActorRollSave`) get cover's Reflex bonus against the area that reaches
 * the saver, from the template's origin. Targets and the attacker are read from
 * `message.system` (the deprecated `flags.pf1.metadata` as a fallback).
 *
 * Rule of this module: the same numbers as the chat line says, in the roll's parts; D35E,
 * which shares this shape, has its own module (d35e.mjs).
 */

import { savePlan } from "../rolls.mjs";
import {
  appliedLine, expectMessage, liveTargets, plansFor, recentAreaHit, tokenIdOfUuid, tokenOfActor,
} from "./common.mjs";

/** @param {any} cc the module */
export function install(cc) {
  const H = cc.env.Hooks;
  H.on("pf1PreAttackRoll", (/** @type {any} */ action, /** @type {any} */ config, /** @type {any} */ rollData, /** @type {any} */ rollOptions, /** @type {string[]} */ parts) =>
    onAttack(cc, action, parts));
  H.on("pf1PreActorRollSave", (/** @type {any} */ actor, /** @type {any} */ options, /** @type {string} */ save) => onSave(cc, actor, options, save));
  return {
    /** @param {any} message */
    messageTargets(message) {
      const uuids = message.system?.targets ?? message.flags?.pf1?.metadata?.targets;
      return Array.isArray(uuids) ? uuids.map(tokenIdOfUuid).filter(Boolean) : null;
    },
  };
}

/**
 * The parts an attack against these targets takes, and the words of each target's line.
 * @param {any} cc @param {string | null} attacker @param {string[]} targets
 * @returns {{parts: string[], applied: any[], stop: boolean}}
 */
export function attackParts(cc, attacker, targets) {
  const how = cc.setting("applyMode");
  const plans = plansFor(cc, attacker, targets);
  const parts = [];
  const applied = [];
  let stop = false;
  if (plans.length === 0 || !attacker) return { parts, applied, stop };
  for (const { target, plan } of plans) {
    applied.push({ target, line: appliedLine(cc, attacker, target, plan, how), ac: 0, attack: 0, stopped: false });
  }
  if (how === "show") return { parts, applied, stop };
  if (plans.length === 1) {
    const { plan } = plans[0];
    if (plan.total) {
      stop = how === "auto";
      applied[0].stopped = stop;
      if (stop) cc.notify("warn", cc.t("Notify.totalCover", { target: cc.nameOf(plans[0].target), attacker: cc.nameOf(attacker) }));
      return { parts, applied, stop };
    }
    for (const m of plan.ac) parts.push(`${-m.value}[${m.reason}]`);
    applied[0].ac = plan.acTotal;
  }
  if (plans.every(({ plan }) => !plan.total)) {
    const bonus = Math.min(...plans.map(({ plan }) => plan.attackTotal));
    const flank = plans[0].plan.attack;
    if (bonus !== 0 && flank.length > 0) {
      parts.push(`${bonus}[${flank[0].reason}]`);
      for (const e of applied) e.attack = bonus;
    }
  }
  return { parts, applied, stop };
}

/** @param {any} cc @param {any} action @param {string[]} parts */
function onAttack(cc, action, parts) {
  const actor = action?.actor ?? action?.item?.actor ?? null;
  const attacker = tokenOfActor(cc, actor, action?.token?.id ?? cc.attacker()?.id ?? null);
  const result = attackParts(cc, attacker, liveTargets(cc));
  if (result.applied.length === 0 || !attacker) return true;
  parts.push(...result.parts);
  // Once per action: a full attack rolls several times, the message comes once.
  if (!cc.pendingApplied.some((/** @type {any} */ p) => p.attacker === attacker && cc.now() - p.at < 1000)) {
    expectMessage(cc, attacker, result.applied);
  }
  return !result.stop;
}

/** @param {any} cc @param {any} actor @param {any} options @param {string} save */
function onSave(cc, actor, options, save) {
  if (save !== "ref" || cc.setting("applyMode") === "show") return true;
  const token = tokenOfActor(cc, actor, null);
  const plan = savePlan(recentAreaHit(cc, token), { area: true });
  if (plan) (options.parts ??= []).push(`${plan.total}[Cover]`);
  return true;
}
