/**
 * What every system adapter shares: finding the attacker's and the targets' tokens on the
 * viewed scene, the plan for each target, the words of what was applied, and recording
 * them in the roll's own chat message data (`flags.covercast.applied`), so every client shows
 * the same line.
 *
 * Rule of this module: it reads the module's store through `cc.annotation`; it never
 * talks to the server and never writes a document.
 */

import { attackPlan } from "../rolls.mjs";
import { formatMods } from "../words.mjs";

/** The id of an actor's token on the viewed scene (the speaker's, when it has several).
 * @param {any} cc the module @param {any} actor @param {string | null} [preferred] */
export function tokenOfActor(cc, actor, preferred = null) {
  const scene = cc.canvas?.scene;
  if (!actor || !scene) return preferred;
  if (actor.token?.id && scene.tokens?.get?.(actor.token.id)) return actor.token.id;
  const tokens = scene.tokens?.filter?.((/** @type {any} */ t) => t.actor === actor || (actor.id && t.actorId === actor.id)) ?? [];
  if (preferred && tokens.some((/** @type {any} */ t) => t.id === preferred)) return preferred;
  return tokens[0]?.id ?? preferred;
}

/** The token id inside a UUID ("Scene.abc.Token.xyz" -> "xyz"), or null.
 * @param {unknown} uuid */
export function tokenIdOfUuid(uuid) {
  if (typeof uuid !== "string") return null;
  const m = uuid.match(/Token\.([^.]+)/);
  return m ? m[1] : null;
}

/** The user's current targets' token ids. @param {any} cc */
export function liveTargets(cc) {
  return [...(cc.game.user?.targets ?? [])].map((t) => t.id);
}

/** The words of a plan, for the chat line: "+2 AC (half cover)", "advantage (flanking with X)".
 * @param {any} cc @param {import("../rolls.mjs").AttackPlan} plan */
export function planWords(cc, plan) {
  const t = cc.t;
  if (plan.total) return t("CannotTarget");
  const parts = [];
  for (const m of [...plan.ac, ...plan.attack]) parts.push(`${formatMods(t, [m])} (${m.reason})`);
  if (plan.advantage) {
    const who = (plan.ann.flankers ?? []).map((/** @type {string} */ id) => cc.nameOf(id)).join(", ");
    parts.push(`${t("Advantage")} (${who ? t("FlankingWith", { who }) : t("Flanking")})`);
  }
  return parts.join("; ");
}

/**
 * The plans for one attack: for each target, its annotation in the mode that fits, and
 * what applies of it. `mode` may be forced (the system says melee or ranged).
 * @param {any} cc @param {string | null} attacker @param {string[]} targets @param {string} [mode]
 */
export function plansFor(cc, attacker, targets, mode) {
  const out = [];
  if (!attacker) return out;
  for (const target of targets) {
    const ann = cc.annotation(attacker, target, mode && cc.store.get(attacker, target, mode) ? mode : undefined);
    const plan = attackPlan(ann);
    if (plan) out.push({ target, plan });
  }
  return out;
}

/** The chat line of one target's plan, as applied in `applyMode` (or not applied).
 * @param {any} cc @param {string} attacker @param {string} target
 * @param {import("../rolls.mjs").AttackPlan} plan @param {string} how auto | confirm | show */
export function appliedLine(cc, attacker, target, plan, how) {
  const t = cc.t;
  const info = cc.assess(attacker, target, plan.ann.mode);
  const words = planWords(cc, plan);
  const what = plan.empty ? info.text
    : `${info.text} — ${t(how === "auto" ? "Applied" : how === "confirm" ? "InDialog" : "WouldApply", { what: words })}`;
  return t("ChatLine", { attacker: cc.nameOf(attacker), target: cc.nameOf(target), mode: t(`Mode.${plan.ann.mode}`), text: what });
}

/**
 * Record what was applied in the message the system is about to create (its data object,
 * not a document: nothing is written beyond the roll's own message).
 * @param {any} data the message data (`message.data` of dnd5e, `chatData` of pf1...)
 * @param {{target: string, line: string, ac?: number, attack?: number, advantage?: boolean, stopped?: boolean}[]} applied
 */
export function recordApplied(data, applied) {
  if (!data || applied.length === 0) return;
  data.flags ??= {};
  data.flags.covercast = { ...(data.flags.covercast ?? {}), applied };
}

/**
 * Keep what was applied to an attack until the system creates its chat message, then put
 * it in that message's data (`preCreateChatMessage`, before anything is stored): for the
 * systems whose pre-roll hooks do not hand over the message data. `match` picks the
 * message (by default: the attacker's, within ten seconds).
 * @param {any} cc @param {string} attacker @param {any[]} applied @param {(doc: any) => boolean} [match]
 */
export function expectMessage(cc, attacker, applied, match = () => true) {
  if (applied.length === 0) return;
  cc.pendingApplied.push({ attacker, applied, match, at: cc.now() });
}

/** The preCreateChatMessage side of `expectMessage`. @param {any} cc @param {any} doc */
export function attachApplied(cc, doc) {
  const list = cc.pendingApplied;
  while (list.length > 0 && cc.now() - list[0].at > 10000) list.shift();
  const speaker = doc.speaker?.token ?? null;
  const i = list.findIndex((/** @type {any} */ p) => (speaker === null || p.attacker === speaker) && p.match(doc));
  if (i < 0) return;
  const [entry] = list.splice(i, 1);
  doc.updateSource({ flags: { covercast: { applied: entry.applied } } });
}

/** The most recent area effect (placed within `maxAgeMs`) that reaches `token`: its hit.
 * @param {any} cc @param {string | null} token @param {number} [maxAgeMs] */
export function recentAreaHit(cc, token, maxAgeMs = 120000) {
  if (!token) return null;
  let best = null;
  for (const entry of cc.areas.values()) {
    if (cc.now() - entry.at > maxAgeMs || (best && entry.at < best.at)) continue;
    const hit = (entry.affected ?? []).find((/** @type {any} */ h) => h.token === token);
    if (hit) best = { at: entry.at, hit };
  }
  return best?.hit ?? null;
}
