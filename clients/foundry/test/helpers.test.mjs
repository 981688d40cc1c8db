/**
 * The module's pure parts, without Foundry or a server: election, backoff, sizes, attack
 * detection, the annotation store and the words shown to the table.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  AnnotationStore, actorReach, actorSize, backoffDelay, describe as describe5, electSender, isAttack, pickMode,
} from "../scripts/core.mjs";
import { translator } from "../scripts/words.mjs";
import { i18n } from "../test-support/i18n.mjs";

const t = translator(i18n("en"));
const describeAnn = (ann, nameOf) => describe5(ann, t, nameOf);

describe("electSender", () => {
  const u = (id, isGM, active, role = isGM ? 4 : 1) => ({ id, isGM, active, role });

  it("picks the active GM with the lowest id", () => {
    const users = [u("m", true, true), u("c", true, false), u("f", true, true), u("a", false, true)];
    assert.equal(electSender(users).id, "f");
  });

  it("prefers a full GM to an assistant, as game.users.activeGM does", () => {
    const users = [u("a", true, true, 3), u("z", true, true, 4), u("b", true, true, 3)];
    assert.equal(electSender(users).id, "z");
  });

  it("passes over GMs the server refused (no access token in their browser)", () => {
    const users = [u("a", true, true), u("b", true, true), u("c", true, true)];
    assert.equal(electSender(users, new Set(["a"])).id, "b");
    assert.equal(electSender(users, new Set(["a", "b", "c"])), null);
    assert.equal(electSender(users, new Set(["x"])).id, "a", "a refused GM who is not connected");
  });

  it("is null without an active GM", () => {
    assert.equal(electSender([u("a", false, true), u("b", true, false)]), null);
  });

  it("orders ids by code unit, the same on every client", () => {
    assert.equal(electSender([u("b", true, true), u("B", true, true), u("a", true, true)]).id, "B");
  });
});

describe("backoffDelay", () => {
  it("doubles up to the cap, with half of each delay random", () => {
    const opts = { base: 100, max: 1000 };
    assert.equal(backoffDelay(0, opts, () => 0), 50);
    assert.equal(backoffDelay(0, opts, () => 1), 100);
    assert.equal(backoffDelay(3, opts, () => 0), 400);
    assert.equal(backoffDelay(3, opts, () => 1), 800);
    assert.equal(backoffDelay(10, opts, () => 1), 1000);
    assert.equal(backoffDelay(1000, opts, () => 0), 500, "bounded for any attempt count");
  });

  it("spreads clients that retry together", () => {
    const delays = new Set(Array.from({ length: 50 }, () => backoffDelay(4)));
    assert.ok(delays.size > 40);
    for (const d of delays) assert.ok(d >= 4000 && d <= 8000);
  });
});

describe("actorSize", () => {
  it("reads dnd5e, pf1 and pf2e layouts", () => {
    assert.equal(actorSize({ system: { traits: { size: "grg" } } }), "gargantuan");
    assert.equal(actorSize({ system: { traits: { size: "dim" } } }), "diminutive");
    assert.equal(actorSize({ system: { traits: { size: { value: "sm" } } } }), "small");
    assert.equal(actorSize({ system: { traits: { size: { base: "lg" } } } }), "large");
  });

  it("is null when the actor does not say", () => {
    assert.equal(actorSize(null), null);
    assert.equal(actorSize({ system: {} }), null);
    assert.equal(actorSize({ system: { traits: { size: "enormous" } } }), null);
  });
});

describe("actorReach", () => {
  it("reads pf2e's natural reach in feet, else null", () => {
    assert.equal(actorReach({ system: { attributes: { reach: { base: 10 } } } }), 10);
    assert.equal(actorReach({ system: { attributes: { reach: { base: "10" } } } }), null);
    assert.equal(actorReach({ system: { attributes: {} } }), null);
    assert.equal(actorReach(undefined), null);
  });
});

describe("isAttack", () => {
  it("knows the systems' attack markers", () => {
    assert.ok(isAttack({ flags: { dnd5e: { roll: { type: "attack" } } } }));
    assert.ok(isAttack({ flags: { pf2e: { context: { type: "spell-attack-roll" } } } }));
    assert.ok(isAttack({ flags: { pf1: { metadata: { rolls: { attacks: [{}] } } } } }));
    assert.ok(isAttack({ flags: {}, system: { rolls: { attacks: [{ attack: {} }] } } }), "pf1 v11: message.system");
    const d35e = '<div class="D35E chat-card item-card" data-token-id="Scene.s.Token.f"><button data-roll="17">';
    assert.ok(isAttack({ flags: { D35E: { noRollRender: true } }, content: d35e }), "a D35E attack card");
    assert.equal(isAttack({ flags: {}, content: '<div class="D35E chat-card item-card">a spell</div>' }), false,
      "a D35E item card without attack rolls");
  });

  it("ignores other rolls unless every roll counts", () => {
    const save = { flags: { dnd5e: { roll: { type: "save" } } }, rolls: [{}] };
    assert.equal(isAttack(save), false);
    assert.equal(isAttack({ flags: { pf1: { metadata: { rolls: { attacks: [] } } } } }), false);
    assert.equal(isAttack(save, true), true);
    assert.equal(isAttack({ flags: {}, rolls: [] }, true), false);
  });
});

const ann = (attacker, target, mode, extra = {}) => ({
  attacker, target, mode, loe: true, cover: "none", modifiers: [],
  flags: { in_reach: mode === "ranged", flanking: false }, ...extra,
});

describe("AnnotationStore", () => {
  it("replaces on a full set, merges deltas, drops removed keys", () => {
    const store = new AnnotationStore();
    store.apply({ scene: "s", revision: 1, full: true, removed: [],
      annotations: [ann("a", "b", "ranged"), ann("b", "a", "ranged")] });
    assert.equal(store.size, 2);
    store.apply({ scene: "s", revision: 3, full: false, removed: [["b", "a", "ranged"]],
      annotations: [ann("a", "b", "ranged", { cover: "cover" })] });
    assert.equal(store.size, 1);
    assert.equal(store.get("a", "b", "ranged").cover, "cover");
    assert.equal(store.revision, 3);
    store.apply({ scene: "s", revision: 4, full: true, removed: [], annotations: [] });
    assert.equal(store.size, 0);
  });
});

describe("pickMode and describe", () => {
  it("shows melee when the target is in natural reach, else reach, else ranged", () => {
    const store = new AnnotationStore();
    const melee = ann("a", "b", "melee", { flags: { in_reach: false } });
    const reach = ann("a", "b", "reach", { flags: { in_reach: true } });
    store.apply({ scene: "s", revision: 1, full: true, removed: [], annotations: [melee, reach, ann("a", "b", "ranged")] });
    assert.equal(pickMode(store, "a", "b"), "reach");
    store.apply({ scene: "s", revision: 2, full: false, removed: [], annotations: [{ ...melee, flags: { in_reach: true } }] });
    assert.equal(pickMode(store, "a", "b"), "melee");
    assert.equal(pickMode(store, "x", "y"), "ranged");
  });

  it("puts the degree, the modifiers and the flankers in words", () => {
    const improved = describeAnn(ann("a", "b", "ranged", {
      cover: "improved",
      modifiers: [{ stat: "ac", value: 8, kind: "cover", reason: "improved cover" },
        { stat: "reflex", value: 4, kind: "cover", reason: "improved cover" }],
    }));
    assert.equal(improved.label, "improved cover");
    assert.equal(improved.text, "improved cover (+8 AC, +4 Reflex)");
    const blocked = describeAnn(ann("a", "b", "ranged", { loe: false, cover: "total" }));
    assert.equal(blocked.label, "total cover");
    const flanked = describeAnn(ann("a", "b", "melee", {
      flags: { in_reach: true, flanking: true }, flankers: ["r1", "r2"],
      modifiers: [{ stat: "attack", value: 2, kind: "flanking", reason: "flanking" }],
    }), (id) => id.toUpperCase());
    assert.equal(flanked.label, "no cover · flanked");
    assert.equal(flanked.text, "no cover; flanking with R1, R2 (+2 attack)");
  });
});
