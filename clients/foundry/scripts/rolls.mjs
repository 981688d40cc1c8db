/**
 * What Covercast puts on a roll, in system-neutral terms: for an attack, the change to the
 * target's AC, the bonus to the attack, advantage, and whether total cover stops it; for a
 * save, the bonus against an effect from beyond cover; for Stealth, the bonus cover gives.
 * The system adapters (systems/*.mjs) put these numbers into each system's own pipeline.
 *
 * Rule of this module: numbers only come from the server's annotations (protocol 7.2); no
 * rules are worked out here, only which of an annotation's modifiers a roll takes.
 */

/** How the module applies what it finds: every roll, in the roll's dialog, or not at all. */
export const APPLY_MODES = ["auto", "confirm", "show"];

/** @param {{value: number}[]} mods */
const sum = (mods) => mods.reduce((total, m) => total + m.value, 0);

/**
 * @typedef {object} AttackPlan
 * @property {any} ann            the annotation it comes from
 * @property {string} degree      the cover degree ("total" without line of effect)
 * @property {boolean} total      total cover: the target cannot be attacked directly
 * @property {any[]} ac           modifiers to the target's AC (cover, off-guard)
 * @property {number} acTotal
 * @property {any[]} attack       modifiers to the attack roll (flanking)
 * @property {number} attackTotal
 * @property {boolean} advantage  the attacker has advantage (dnd5e flanking)
 * @property {boolean} flanking
 * @property {boolean} offGuard   the target is off-guard (pf2e)
 * @property {boolean} empty      nothing to apply
 */

/**
 * What one attack against one target takes from its annotation: the target's AC modifiers
 * (cover; pf2's off-guard -2), the attacker's unconditional attack modifiers (flanking; a
 * modifier limited to damage types, such as water's, is left to the chat line), advantage.
 * @param {any} ann
 * @returns {AttackPlan | null}
 */
export function attackPlan(ann) {
  if (!ann) return null;
  const ac = ann.modifiers.filter((/** @type {any} */ m) => m.stat === "ac");
  const attack = ann.modifiers.filter((/** @type {any} */ m) => m.stat === "attack" && !(m.damage?.length));
  const advantage = Boolean(ann.flags?.advantage);
  const total = !ann.loe;
  return {
    ann, degree: total ? "total" : ann.cover, total, ac, acTotal: sum(ac), attack,
    attackTotal: sum(attack), advantage, flanking: Boolean(ann.flags?.flanking),
    offGuard: Boolean(ann.flags?.off_guard),
    empty: !total && ac.length === 0 && attack.length === 0 && !advantage,
  };
}

/**
 * The save bonus cover gives against an effect from the annotation's attacker (or an area's
 * origin): Reflex in the d20 rulesets, Dexterity saves in dnd5e. `area` says whether the
 * effect is an area effect (pf2's Reflex bonus is "vs area effects" only).
 * @param {{modifiers: any[]} | null} hit an annotation or an area hit
 * @param {{area?: boolean}} [options]
 */
export function savePlan(hit, { area = false } = {}) {
  if (!hit) return null;
  const mods = hit.modifiers.filter((/** @type {any} */ m) => (m.stat === "reflex" || m.stat === "dexterity")
    && m.value > 0 && (area || !/area effects/.test(m.reason ?? "")));
  return mods.length ? { mods, total: sum(mods) } : null;
}

/** The Stealth (Hide) bonus cover gives the target against this observer.
 * @param {any} ann */
export function stealthPlan(ann) {
  if (!ann) return null;
  const mods = ann.modifiers.filter((/** @type {any} */ m) => m.stat === "stealth" || m.stat === "hide");
  return mods.length ? { mods, total: sum(mods) } : null;
}
