/**
 * Which game system gets which roll adapter, and which Covercast ruleset it defaults to.
 *
 * Rule of this module: one adapter per system id (`game.system.id`); a system without one
 * gets badges and chat lines only.
 */

import { attachApplied } from "./common.mjs";
import { install as d35e } from "./d35e.mjs";
import { install as dnd5e } from "./dnd5e.mjs";
import { install as pf1 } from "./pf1.mjs";
import { install as pf2e } from "./pf2e.mjs";

/** The ruleset a world of each system starts with (the setting can change it). */
export const SYSTEM_RULESETS = { pf2e: "pf2", pf1: "pf1", D35E: "dnd35", dnd5e: "dnd5e" };

const ADAPTERS = { pf2e, pf1, D35E: d35e, dnd5e };

/**
 * Hook the system's roll pipeline; returns what the module asks the adapter (the targets
 * and attacker a chat message recorded), or null for a system Covercast does not know.
 * @param {any} cc the module @param {string | undefined} systemId
 */
export function installSystem(cc, systemId) {
  cc.env.Hooks.on("preCreateChatMessage", (/** @type {any} */ doc) => attachApplied(cc, doc));
  const adapter = systemId ? ADAPTERS[systemId] : undefined;
  return adapter ? adapter(cc) : null;
}
