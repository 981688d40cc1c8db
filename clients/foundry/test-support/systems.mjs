/**
 * The game systems' roll pipelines, as much of them as decides the number on a roll, for
 * the stand-in Foundry: the hooks each system calls before its dice, in its order and with
 * its arguments, then its arithmetic and the chat message it creates.
 *
 * - dnd5e 4/5: `AttackActivity#rollAttack` (dnd5e.preRollAttackV2 with config, dialog and
 *   message data; `flags.dnd5e.targets[i].ac` is what the card compares the total with;
 *   returning false stops the roll) and `rollSavingThrow` (preRollSavingThrowV2, `@cover`).
 * - pf2e: `game.pf2e.Check.roll(check, context)` (no hook: modules wrap it); circumstance
 *   bonuses and penalties do not stack (the largest of each counts); degree of success
 *   against `context.dc.value`.
 * - pf1: `pf1PreAttackRoll(action, config, rollData, rollOptions, parts, changes)` per attack
 *   roll; the message's `system.rolls.attacks` and `system.targets`; no AC comparison.
 *   `pf1PreActorRollSave(actor, options, "ref")`.
 * - D35E: `D35E.ItemUse.preRollAllAttacks(item, rollData, allAttacks, userId)`, the
 *   dialog's flanking box as `rollData.flanking`, an item card with `data-roll` totals.
 *
 * Rule of this module: a roll's dice are given by the test (d20 values), so the number on
 * the roll is exact; nothing here knows of Covercast.
 */

/** The value of one roll part ("2", "-4[Cover]", "@cover" read from data). */
function part(p, data = {}) {
  const text = String(p).replace(/\[[^\]]*\]/g, "").trim();
  if (text.startsWith("@")) return Number(data[text.slice(1)] ?? 0);
  const n = Number(text);
  if (!Number.isFinite(n)) throw new Error(`a roll part the stand-in cannot read: ${p}`);
  return n;
}

const sum = (parts, data) => parts.reduce((t, p) => t + part(p, data), 0);

function tokenDoc(client, id) {
  return client.canvas.scene.tokens.get(id);
}

// -- dnd5e ----------------------------------------------------------------------------------

export function dnd5e(client) {
  client.system = "dnd5e";
}

/** An attack with `bonus` to hit; `d20` (and `d20b`, taken when the roll has advantage). */
export function dnd5eAttack(client, attackerId, { bonus = 5, d20 = 10, d20b = 1 } = {}) {
  const attacker = tokenDoc(client, attackerId);
  const targets = [...client.user.targets].map((t) => {
    const doc = tokenDoc(client, t.id);
    return { name: doc.name, img: "", uuid: doc.actor.uuid, ac: doc.actor.system.attributes.ac.value };
  });
  const config = {
    subject: { actor: attacker.actor }, rolls: [{ parts: [], data: {}, options: {} }],
    target: targets.length === 1 ? targets[0].ac : undefined,
  };
  const dialog = { configure: false };
  const message = { data: { speaker: { token: attackerId }, flags: { dnd5e: { targets, roll: { type: "attack" } } } } };
  if (client.Hooks.call("dnd5e.preRollAttackV2", config, dialog, message) === false) return { stopped: true, dialog };
  // The system's own parts come after the hook's (`_buildAttackConfig` keeps them).
  const parts = [...config.rolls[0].parts, "@mod"];
  const advantage = Boolean(config.advantage || config.rolls[0].options.advantageMode === 1);
  const die = advantage ? Math.max(d20, d20b) : d20;
  const total = die + sum(parts, { ...config.rolls[0].data, mod: bonus });
  const { cards, message: sent } = client.world.chat(client.user, attackerId, message.data.flags, { rolls: [{ total }] });
  const recorded = sent.flags.dnd5e.targets;
  return {
    total, advantage, dialog, cards, message: sent, parts,
    hits: recorded.map((t) => t.ac !== null && total >= t.ac), acs: recorded.map((t) => t.ac),
  };
}

/** A Dexterity (or other) saving throw; the system adds the saver's own cover status as @cover. */
export function dnd5eSave(client, tokenId, { ability = "dex", bonus = 2, d20 = 10, cover = 0 } = {}) {
  const doc = tokenDoc(client, tokenId);
  const config = { ability, subject: doc.actor, rolls: [{ parts: ["@mod", ...(ability === "dex" ? ["@cover"] : [])], data: { mod: bonus, cover } }] };
  const dialog = { configure: false };
  if (client.Hooks.call("dnd5e.preRollSavingThrowV2", config, dialog, { data: {} }) === false) return { stopped: true };
  return { total: d20 + sum(config.rolls[0].parts, config.rolls[0].data), parts: config.rolls[0].parts, dialog };
}

// -- pf2e -----------------------------------------------------------------------------------

class Modifier {
  constructor({ slug = "", label = "", modifier = 0, type = "untyped" }) {
    Object.assign(this, { slug, label, modifier, type });
  }
}

/** pf2e's CheckModifier: untyped modifiers add up; circumstance (and status, item) bonuses
 * and penalties do not stack: the largest bonus and the worst penalty of each type count. */
class CheckModifier {
  constructor(slug, modifiers) {
    this.slug = slug;
    this.modifiers = [...modifiers];
  }

  push(modifier) { this.modifiers.push(modifier); }

  get totalModifier() {
    let total = 0;
    const best = new Map();
    for (const m of this.modifiers) {
      if (m.type === "untyped") {
        total += m.modifier;
        continue;
      }
      const key = `${m.type}/${m.modifier >= 0 ? "+" : "-"}`;
      const prev = best.get(key);
      if (prev === undefined || Math.abs(m.modifier) > Math.abs(prev)) best.set(key, m.modifier);
    }
    for (const v of best.values()) total += v;
    return total;
  }
}

export function pf2e(client) {
  client.system = "pf2e";
  const rolled = [];
  client.game.pf2e = {
    Modifier,
    CheckModifier,
    rolled,
    Check: {
      /** Roll `check` against `context.dc`, and post the message (flags.pf2e.context). */
      async roll(check, context) {
        const d20 = context.d20 ?? 10;
        const total = d20 + check.totalModifier;
        const dc = context.dc?.value ?? null;
        let degree = dc === null ? null : total >= dc + 10 ? 3 : total >= dc ? 2 : total <= dc - 10 ? 0 : 1;
        if (degree !== null && d20 === 20) degree = Math.min(3, degree + 1);
        if (degree !== null && d20 === 1) degree = Math.max(0, degree - 1);
        const uuid = (t) => (t ? `Scene.${client.canvas.scene.id}.Token.${t.id}` : null);
        const flags = { pf2e: { context: {
          type: context.type, options: [...(context.options ?? [])].sort(), dc: context.dc ? { value: dc } : null,
          origin: { token: uuid(context.token) }, target: context.target ? { token: uuid(context.target.token) } : null,
          outcome: degree,
        }, modifiers: check.modifiers.map((m) => ({ ...m })) } };
        const { cards, message } = client.world.chat(client.user, context.token?.id ?? null, flags, { rolls: [{ total }] });
        const result = { total, dc, degree, cards, message, modifiers: check.modifiers };
        rolled.push(result);
        return result;
      },
    },
  };
}

/** A Strike: the attacker's bonus as an untyped modifier; the system's roll options. */
export async function pf2eStrike(client, attackerId, targetId, { bonus = 7, d20 = 10, options = [], ranged = true } = {}) {
  const attacker = tokenDoc(client, attackerId);
  const target = tokenDoc(client, targetId);
  const check = new CheckModifier("strike", [new Modifier({ slug: "attack", label: "Attack", modifier: bonus })]);
  const context = {
    type: "attack-roll", actor: attacker.actor, token: attacker, target: { actor: target.actor, token: target },
    dc: { slug: "ac", value: target.actor.system.attributes.ac.value },
    options: [ranged ? "item:ranged" : "item:melee", ...options], domains: ["attack", "attack-roll", "strike-attack-roll"], d20,
  };
  return client.game.pf2e.Check.roll(check, context);
}

export async function pf2eSave(client, tokenId, { bonus = 5, d20 = 10, options = [], dc = 20 } = {}) {
  const doc = tokenDoc(client, tokenId);
  const check = new CheckModifier("reflex", [new Modifier({ slug: "reflex", label: "Reflex", modifier: bonus })]);
  const context = { type: "saving-throw", actor: doc.actor, token: doc, dc: { value: dc }, options, domains: ["reflex", "saving-throw"], d20 };
  return client.game.pf2e.Check.roll(check, context);
}

// -- pf1 ------------------------------------------------------------------------------------

export function pf1(client) {
  client.system = "pf1";
}

/** One attack roll of an action; the message as pf1 v11 writes it (`message.system`). */
export function pf1Attack(client, attackerId, { bonus = 6, d20 = 10 } = {}) {
  const attacker = tokenDoc(client, attackerId);
  const action = { actor: attacker.actor, item: { actor: attacker.actor }, token: attacker };
  const parts = [];
  if (client.Hooks.call("pf1PreAttackRoll", action, {}, {}, {}, parts, []) === false) return { stopped: true };
  const total = d20 + bonus + sum(parts);
  const targets = [...client.user.targets].map((t) => `Scene.${client.canvas.scene.id}.Token.${t.id}`);
  const { cards, message } = client.world.chat(client.user, attackerId, { pf1: {} }, {
    system: { rolls: { attacks: [{ attack: { total } }] }, targets }, rolls: [{ total }],
  });
  return { total, parts, cards, message };
}

export function pf1Save(client, tokenId, { bonus = 3, d20 = 10 } = {}) {
  const doc = tokenDoc(client, tokenId);
  const options = { parts: [] };
  if (client.Hooks.call("pf1PreActorRollSave", doc.actor, options, "ref") === false) return { stopped: true };
  return { total: d20 + bonus + sum(options.parts), parts: options.parts };
}

// -- D35E -----------------------------------------------------------------------------------

export function d35e(client) {
  client.system = "D35E";
}

/** An attack action; `flankingBox`: the dialog's own flanking checkbox (+2). */
export function d35eAttack(client, attackerId, { bonus = 6, d20 = 10, flankingBox = false } = {}) {
  const attacker = tokenDoc(client, attackerId);
  const item = { actor: attacker.actor, name: "Longsword" };
  const rollData = { flanking: flankingBox ? 2 : 0 };
  const attacks = [{ bonus: 0, label: "Attack" }];
  if (client.Hooks.call("D35E.ItemUse.preRollAllAttacks", item, rollData, attacks, client.user.id) === false) return { stopped: true };
  const total = d20 + bonus + Number(attacks[0].bonus) + rollData.flanking;
  const targets = [...client.user.targets].map((t) => `<img data-target="${t.id}">`).join("");
  const content = `<div class="D35E chat-card item-card" data-actor-id="a" data-item-id="i" data-token-id="Scene.${client.canvas.scene.id}.Token.${attackerId}">`
    + `${targets}<button data-action="applyDamage" data-roll="${total}">Apply</button></div>`;
  const { cards, message } = client.world.chat(client.user, attackerId, { D35E: { noRollRender: true } }, { content, rolls: [{ total }] });
  return { total, attackBonus: attacks[0].bonus, cards, message };
}
