/**
 * pf2e: cover at check time, as pf2e-visioner and pf2e-perception do, by wrapping
 * `game.pf2e.Check.roll` (through libWrapper when it is active). The system has no hook
 * before a check.
 * - Attacks (`attack-roll`, `spell-attack-roll`): the DC the check is compared with (the
 *   target's AC, `context.dc.value`) gets the cover's circumstance bonus (lesser +1,
 *   standard +2, greater +4); a Cover effect already on the target (Take Cover, the
 *   system's effect: `target:cover-bonus:N` in the roll options) is respected, since
 *   circumstance bonuses do not stack: only what ours adds above it counts. Off-guard (-2
 *   circumstance) is applied once: never when the target is off-guard already, and
 *   flanking's only when the world setting `pf2eFlanking` gives flanking to Covercast
 *   (by default the system's own flanking rules, `pf2e.automation.flankingDetection`).
 *   Total cover stops the attack.
 * - Reflex saves against an area: a circumstance modifier on the check, from the area's
 *   origin (the template that reaches the saver), above any Cover effect the saver has.
 * - Stealth checks: the cover the roller has against the one token they target (the
 *   observer), as a circumstance modifier.
 *
 * Rule of this module: numbers come from the server's annotations; "confirm" mode adds the
 * same numbers as modifiers the roller sees (and may untick) in the check dialog.
 */

import { attackPlan, savePlan, stealthPlan } from "../rolls.mjs";
import { MODULE_ID } from "../util.mjs";
import { appliedLine, expectMessage, recentAreaHit, tokenIdOfUuid, tokenOfActor } from "./common.mjs";

const ATTACKS = ["attack-roll", "spell-attack-roll"];

/** @param {any} cc the module */
export function install(cc) {
  const H = cc.env.Hooks;
  const wrap = () => wrapCheck(cc);
  H.once("ready", wrap);
  return {
    /** @param {any} message */
    messageTargets(message) {
      const token = tokenIdOfUuid(message.flags?.pf2e?.context?.target?.token);
      return token ? [token] : null;
    },
    /** @param {any} message */
    messageAttacker(message) {
      return tokenIdOfUuid(message.flags?.pf2e?.context?.origin?.token) ?? message.speaker?.token ?? null;
    },
  };
}

/** @param {any} cc */
function wrapCheck(cc) {
  const pf2e = cc.game.pf2e;
  if (!pf2e?.Check?.roll) return;
  /** @param {Function} wrapped @param {any} check @param {any} context @param {...any} rest */
  const wrapper = function (wrapped, check, context = {}, ...rest) {
    const go = adjust(cc, check, context);
    return go ? wrapped(check, context, ...rest) : Promise.resolve(null);
  };
  const libWrapper = cc.env.libWrapper;
  if (libWrapper?.register && cc.game.modules?.get?.("lib-wrapper")?.active) {
    libWrapper.register(MODULE_ID, "game.pf2e.Check.roll", wrapper, "WRAPPER");
  } else {
    const original = pf2e.Check.roll.bind(pf2e.Check);
    pf2e.Check.roll = (/** @type {any} */ check, /** @type {any} */ context, /** @type {any[]} */ ...rest) => wrapper(original, check, context, ...rest);
  }
}

/** A token id from what pf2e passes: a TokenDocument, a Token, or a UUID. @param {any} t */
function tokenId(t) {
  if (!t) return null;
  if (typeof t === "string") return tokenIdOfUuid(t);
  return t.id ?? t.document?.id ?? null;
}

/** The largest `prefix:N` among the roll options (the Cover effect's bonus), else 0.
 * @param {string[]} options @param {string} prefix */
function optionBonus(options, prefix) {
  let best = 0;
  for (const o of options) if (o.startsWith(prefix)) best = Math.max(best, Number(o.slice(prefix.length)) || 0);
  return best;
}

/** @param {any} cc @param {string} label @param {number} value */
function modifier(cc, label, value) {
  const Modifier = cc.game.pf2e?.Modifier;
  return new Modifier({ slug: "covercast", label, modifier: value, type: "circumstance" });
}

/** Put the annotation's numbers into the check; false stops it (total cover).
 * @param {any} cc @param {any} check @param {any} context */
function adjust(cc, check, context) {
  const how = cc.setting("applyMode");
  const options = Array.isArray(context.options) ? context.options : [...(context.options ?? [])];
  if (ATTACKS.includes(context.type)) return adjustAttack(cc, check, context, options, how);
  if (how === "show") return true;
  const domains = context.domains ?? [];
  const actorToken = tokenId(context.token) ?? tokenOfActor(cc, context.actor, null);
  if (context.type === "saving-throw" && domains.includes("reflex")) {
    const plan = savePlan(recentAreaHit(cc, actorToken), { area: true });
    const add = plan ? plan.total - optionBonus(options, "self:cover-bonus:") : 0;
    if (add > 0) check.push(modifier(cc, cc.t("Degree.cover"), add));
    if (add > 0 && how === "confirm") context.skipDialog = false;
  } else if (context.type === "skill-check" && domains.includes("stealth")) {
    const observers = [...(cc.game.user?.targets ?? [])];
    if (observers.length !== 1 || !actorToken) return true;
    const plan = stealthPlan(cc.annotation(observers[0].id, actorToken, "ranged"));
    const add = plan ? plan.total - optionBonus(options, "self:cover-bonus:") : 0;
    if (add > 0) check.push(modifier(cc, cc.t("Degree.cover"), add));
    if (add > 0 && how === "confirm") context.skipDialog = false;
  }
  return true;
}

/** @param {any} cc @param {any} check @param {any} context @param {string[]} options @param {string} how */
function adjustAttack(cc, check, context, options, how) {
  const attacker = tokenId(context.token) ?? tokenId(context.origin?.token) ?? tokenOfActor(cc, context.actor, null);
  const target = tokenId(context.target?.token);
  if (!attacker || !target) return true;
  const ranged = options.includes("item:ranged") || options.includes("ranged");
  const mode = ranged ? "ranged" : undefined;
  const ann = cc.annotation(attacker, target, mode);
  const plan = attackPlan(ann);
  if (!plan) return true;
  // Circumstance bonuses do not stack: a Cover effect already there counts against ours.
  const ours = Math.max(0, ...plan.ac.filter((m) => m.value > 0).map((m) => m.value));
  const cover = Math.max(0, ours - optionBonus(options, "target:cover-bonus:"));
  const flankingToSystem = cc.setting("pf2eFlanking") !== "covercast";
  const alreadyOffGuard = options.includes("target:condition:off-guard");
  const penalties = plan.ac.filter((m) => m.value < 0
    && !alreadyOffGuard && !(flankingToSystem && plan.flanking && /flank/i.test(m.reason)));
  const offGuard = Math.min(0, ...penalties.map((m) => m.value)); // off-guard once
  const delta = cover + offGuard;
  const shown = { ...plan, ac: [...plan.ac.filter((m) => m.value > 0 && cover > 0).map((m) => ({ ...m, value: cover })),
    ...penalties.filter((m) => m.value === offGuard).slice(0, 1)], attack: [] };
  shown.acTotal = delta;
  shown.empty = !plan.total && delta === 0;
  const entry = { target, line: appliedLine(cc, attacker, target, shown, how), ac: 0, stopped: false };
  if (how === "auto") {
    if (plan.total) {
      entry.stopped = true;
      cc.notify("warn", cc.t("Notify.totalCover", { target: cc.nameOf(target), attacker: cc.nameOf(attacker) }));
      return false;
    }
    if (delta !== 0 && context.dc && typeof context.dc.value === "number") {
      context.dc.value += delta;
      entry.ac = delta;
    }
    if (cover > 0) context.options = [...options, `target:cover-bonus:${cover}`];
  } else if (how === "confirm" && delta !== 0 && !plan.total) {
    check.push(modifier(cc, cc.t("Degree.cover"), -delta));
    context.skipDialog = false;
  }
  expectMessage(cc, attacker, [entry], (doc) => ATTACKS.includes(doc.flags?.pf2e?.context?.type)
    && tokenIdOfUuid(doc.flags.pf2e.context.target?.token) === target);
  return true;
}
