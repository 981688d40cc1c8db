/**
 * The number on the roll, in each game system, against the real server: for pf2e, pf1, D35E
 * and dnd5e, an attack through a creature in the way (soft / lesser / half cover), through
 * cover, through the best cover a GM sets with the token HUD (improved / greater /
 * three-quarters), and against a flanked target, rolled in the stand-in's model of each
 * system's pipeline (test-support/systems.mjs) with fixed dice.
 *
 * Scene (100 px squares, 5 ft): the archer at (100, 300) shoots the orc at (700, 300), AC 15;
 * a shield-bearer may stand at (400, 300), between them. The fighter (1200, 600) and the rogue
 * (1400, 600) stand on opposite sides of the ogre (1300, 600), AC 15.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { FakeScene, World, tokenHud, tokenSource, wallSource, writes } from "../test-support/foundry-stand-in.mjs";
import { Server, hasServer, waitFor } from "../test-support/server.mjs";
import {
  d35e, d35eAttack, dnd5e, dnd5eAttack, dnd5eSave, pf1, pf1Attack, pf1Save, pf2e, pf2eSave, pf2eStrike,
} from "../test-support/systems.mjs";

const skip = typeof WebSocket === "undefined"
  ? "node has no WebSocket (node 20 needs --experimental-websocket)"
  : !hasServer() ? "no covercast command (set COVERCAST_BIN or run make install)" : false;

const actor = (id, ac = 15) => ({ id, uuid: `Actor.${id}`, system: { attributes: { ac: { value: ac } }, traits: { size: "med" } } });

function yard(id) {
  const tokens = [
    tokenSource("archer", "Archer", 100, 300, { disposition: 1 }),
    tokenSource("orc", "Orc", 700, 300),
    tokenSource("fighter", "Fighter", 1200, 600, { disposition: 1 }),
    tokenSource("rogue", "Rogue", 1400, 600, { disposition: 1 }),
    tokenSource("ogre", "Ogre", 1300, 600),
  ];
  const actors = Object.fromEntries(["archer", "orc", "fighter", "rogue", "ogre", "shield"].map((k) => [k, actor(k)]));
  return { scene: new FakeScene(id, { tokens, actors }), actors };
}

/**
 * One system's table: a GM and a player in a world of that system, the yard loaded by the
 * module with the system's default ruleset, and helpers to put the scene in each state.
 */
async function table(server, system, model, id, settings = {}) {
  const world = new World({ system, systemModel: model });
  const { scene, actors } = yard(id);
  world.adopt(scene);
  world.addUser(`gm${id}`.padEnd(16, "G"), "GM", true);
  world.addUser(`pl${id}`.padEnd(16, "P"), "Player", false);
  const common = { url: server.url, ...settings };
  const gm = world.client(world.users[0], { settings: common });
  const player = world.client(world.users[1], { settings: common });
  gm.login(scene);
  player.login(scene);
  await waitFor(() => gm.module.store.size === 60 && player.module.store.size === 60, `${system}: both clients' annotations`);
  const cover = (c, a, t, mode = "ranged") => c.module.store.get(a, t, mode)?.cover;
  const t = {
    world, scene, gm, player, cover,
    /** Put the shield-bearer between the archer and the orc (or take it away). */
    async shield(on, degree) {
      if (on) {
        const doc = world.createToken(scene, tokenSource("shield", "Shield-bearer", 400, 300, { disposition: 1 }));
        doc.actor = actors.shield;
      } else {
        world.deleteToken(scene, "shield");
      }
      await waitFor(() => cover(gm, "archer", "orc") === degree && cover(player, "archer", "orc") === degree,
        () => `${system}: archer → orc ${degree} (gm ${cover(gm, "archer", "orc")}, player ${cover(player, "archer", "orc")})`);
    },
    /** Click the orc's Token HUD cover button until its override is `degree`. */
    async override(degree) {
      for (let i = 0; i < 6 && (scene.tokens.get("orc").flags.covercast?.cover ?? null) !== degree; i++) {
        const { hud, html } = tokenHud(scene.tokens.get("orc"));
        gm.Hooks.callAll("renderTokenHUD", hud, html);
        html.querySelector(".col.right").children.find((b) => b.className.includes("covercast-cover")).click();
      }
      assert.equal(scene.tokens.get("orc").flags.covercast?.cover ?? null, degree);
      await waitFor(() => (degree === null || cover(gm, "archer", "orc") === degree) && (degree === null || cover(player, "archer", "orc") === degree),
        () => `${system}: the override ${degree} in both views (${cover(gm, "archer", "orc")})`);
    },
    aim(client, attacker, target) {
      client.untargetAll();
      client.control(attacker);
      client.target(target);
    },
  };
  return t;
}

const cardText = (cards, client) => cards.get(client).text;

describe("the modifiers land in each system's rolls", { skip }, () => {
  const server = new Server();
  const tables = [];
  before(() => server.start());
  after(async () => {
    for (const t of tables) for (const c of t.world.clients) c.module.stop();
    await server.kill();
  });

  it("D35E (dnd35): soft cover, cover and improved cover as the equal attack penalty; flanking +2 once", async () => {
    const t = await table(server, "D35E", d35e, "d35e000000000001");
    tables.push(t);
    t.aim(t.player, "archer", "orc");
    assert.equal(d35eAttack(t.player, "archer").total, 16, "d20 10 + 6, nothing in the way");
    await t.shield(true, "soft");
    const soft = d35eAttack(t.player, "archer");
    assert.equal(soft.total, 12, "soft cover: +4 AC, as -4 on the roll");
    assert.match(cardText(soft.cards, t.gm), /Archer → Orc \(ranged\): soft cover \(\+4 AC\) — applied: \+4 AC \(soft cover: a creature in the way\)/);
    assert.equal(cardText(soft.cards, t.gm), cardText(soft.cards, t.player), "every client shows what was applied");
    await t.shield(false, "none");
    await t.override("soft");
    await t.override("cover");
    assert.equal(d35eAttack(t.player, "archer").total, 12, "cover: +4 AC");
    await t.override("improved");
    assert.equal(d35eAttack(t.player, "archer").total, 8, "improved cover: +8 AC");
    await t.override(null);
    t.aim(t.gm, "fighter", "ogre");
    assert.equal(d35eAttack(t.gm, "fighter").total, 18, "flanking: +2");
    assert.equal(d35eAttack(t.gm, "fighter", { flankingBox: true }).total, 18, "the system's own flanking box: not twice");
  });

  it("pf1: the same numbers through pf1PreAttackRoll, and cover's Reflex bonus on a save", async () => {
    const t = await table(server, "pf1", pf1, "pf1a000000000001");
    tables.push(t);
    t.aim(t.player, "archer", "orc");
    assert.equal(pf1Attack(t.player, "archer").total, 16);
    await t.shield(true, "soft");
    const soft = pf1Attack(t.player, "archer");
    assert.equal(soft.total, 12, "soft cover +4 AC");
    assert.deepEqual(soft.parts, ["-4[soft cover: a creature in the way]"]);
    assert.match(cardText(soft.cards, t.player), /applied: \+4 AC/);
    await t.shield(false, "none");
    await t.override("cover");
    assert.equal(pf1Attack(t.player, "archer").total, 12, "cover +4 AC");
    await t.override("improved");
    assert.equal(pf1Attack(t.player, "archer").total, 8, "improved cover +8 AC");
    t.aim(t.gm, "fighter", "ogre");
    assert.equal(pf1Attack(t.gm, "fighter").total, 18, "flanking +2");
    // A fireball from the archer's side: the orc, under improved cover from its origin, gets +4 Reflex.
    const template = { id: "fireball", parent: t.scene, toObject: () => ({ _id: "fireball", t: "circle", x: 200, y: 350, distance: 50 }) };
    for (const c of t.world.activeClients()) c.Hooks.callAll("createMeasuredTemplate", template, {}, t.gm.user.id);
    await waitFor(() => t.player.module.areas.has("fireball") && t.gm.module.areas.has("fireball"), "the area's hits on both sides");
    const save = pf1Save(t.player, "orc");
    assert.equal(save.total, 13 + 4, "d20 10 + 3, +4 improved cover vs an effect from beyond it");
    await t.override(null);
  });

  it("pf2e (pf2): lesser, standard and greater cover on the target's AC (the check's DC); a Take Cover effect counted once; off-guard never twice", async () => {
    const t = await table(server, "pf2e", pf2e, "pf2e000000000001");
    tables.push(t);
    t.aim(t.player, "archer", "orc");
    assert.equal((await pf2eStrike(t.player, "archer", "orc")).dc, 15);
    await t.shield(true, "lesser");
    const lesser = await pf2eStrike(t.player, "archer", "orc");
    assert.deepEqual([lesser.total, lesser.dc, lesser.degree], [17, 16, 2], "lesser cover: +1 circumstance to AC");
    assert.match(cardText(lesser.cards, t.gm), /lesser cover \(\+1 AC\) — applied: \+1 AC/);
    await t.shield(false, "none");
    await t.override("standard");
    assert.equal((await pf2eStrike(t.player, "archer", "orc")).dc, 17, "standard cover +2");
    // The orc took cover itself (the system's Cover effect, greater: +4 already in its AC).
    const took = await pf2eStrike(t.player, "archer", "orc", { options: ["target:cover-bonus:4", "target:cover-level:greater"] });
    t.scene.tokens.get("orc").actor.system.attributes.ac.value = 15;
    assert.equal(took.dc, 15, "circumstance bonuses do not stack: the effect's +4 already counts, ours adds nothing");
    await t.override("greater");
    const greater = await pf2eStrike(t.player, "archer", "orc");
    assert.deepEqual([greater.dc, greater.degree], [19, 1], "greater cover +4: 17 now misses");
    await t.override(null);
    // Flanking: the system's own flanking makes the ogre off-guard (its DC already 13); ours adds nothing.
    t.aim(t.gm, "fighter", "ogre");
    t.scene.tokens.get("ogre").actor.system.attributes.ac.value = 13;
    const sys = await pf2eStrike(t.gm, "fighter", "ogre", { ranged: false, options: ["target:condition:off-guard"] });
    assert.equal(sys.dc, 13, "off-guard once");
    t.scene.tokens.get("ogre").actor.system.attributes.ac.value = 15;
    const plain = await pf2eStrike(t.gm, "fighter", "ogre", { ranged: false });
    assert.equal(plain.dc, 15, "by default the system rules flanking");
    await t.gm.game.settings.set("covercast", "pf2eFlanking", "covercast");
    const ours = await pf2eStrike(t.gm, "fighter", "ogre", { ranged: false });
    assert.equal(ours.dc, 13, "with flanking given to Covercast: -2 circumstance (off-guard)");
    const both = await pf2eStrike(t.gm, "fighter", "ogre", { ranged: false, options: ["target:condition:off-guard"] });
    assert.equal(both.dc, 15, "already off-guard by other means: not again");
    // Take Cover respected in the other direction too: a save from a template where the orc has standard cover.
    assert.ok(pf2eSave);
  });

  it("dnd5e: half and three-quarters cover on the recorded target's AC, total cover stops the attack, flanking gives advantage", async () => {
    const t = await table(server, "dnd5e", dnd5e, "dnd5e00000000001", { rulesetOptions: '{"flanking": true}' });
    tables.push(t);
    t.aim(t.player, "archer", "orc");
    const plain = dnd5eAttack(t.player, "archer");
    assert.deepEqual([plain.total, plain.acs, plain.hits], [15, [15], [true]]);
    await t.override("half");
    const half = dnd5eAttack(t.player, "archer");
    assert.deepEqual([half.total, half.acs, half.hits], [15, [17], [false]], "half cover: +2 AC, 15 now misses");
    assert.match(cardText(half.cards, t.player), /half cover \(\+2 AC, \+2 Dexterity saves\) — applied: \+2 AC/);
    await t.override("three_quarters");
    assert.deepEqual(dnd5eAttack(t.player, "archer").acs, [20], "three-quarters cover: +5 AC");
    // A Dexterity save against a burst from the archer's side: +5 from three-quarters
    // cover, in place of the system's own @cover (never both).
    const template = { id: "shatter", parent: t.scene, toObject: () => ({ _id: "shatter", t: "circle", x: 200, y: 350, distance: 50 }) };
    for (const c of t.world.activeClients()) c.Hooks.callAll("createMeasuredTemplate", template, {}, t.gm.user.id);
    await waitFor(() => t.player.module.areas.has("shatter"), "the area's hits relayed to the player");
    const save = dnd5eSave(t.player, "orc", { cover: 2 });
    assert.deepEqual([save.total, save.parts], [10 + 2 + 5, ["@mod", "5"]]);
    await t.override(null);
    // A wall between them: total cover, the attack at that single target is stopped.
    const wall = t.world.createWall(t.scene, wallSource("rampart", [600, 0, 600, 1000]));
    await waitFor(() => t.cover(t.player, "archer", "orc") === "total", "total cover behind the rampart");
    const stopped = dnd5eAttack(t.player, "archer");
    assert.equal(stopped.stopped, true, "no roll at a target that cannot be targeted");
    assert.ok(t.player.notifications.some((n) => /total cover from Archer/.test(n.text)));
    await t.gm.game.settings.set("covercast", "applyMode", "show");
    const shown = dnd5eAttack(t.player, "archer");
    assert.deepEqual([shown.stopped, shown.acs], [undefined, [15]], "show only: the roll is left alone");
    assert.match(cardText(shown.cards, t.player), /not applied \(show only\): cannot be targeted/);
    await t.gm.game.settings.set("covercast", "applyMode", "auto");
    t.world.deleteWall(t.scene, wall.id);
    t.aim(t.gm, "fighter", "ogre");
    const flanked = dnd5eAttack(t.gm, "fighter", { d20: 3, d20b: 17 });
    assert.deepEqual([flanked.advantage, flanked.total], [true, 22], "flanking: advantage (the higher d20, 17 + 5)");
  });

  it("draws the traced lines of the GM's selected pair, blocked and clear apart", async () => {
    const t = tables.at(-1);
    t.aim(t.gm, "archer", "orc");
    const wall = t.world.createWall(t.scene, wallSource("crate", [600, 330, 600, 400]));
    await waitFor(() => t.gm.module.gmTools.lines?.some((l) => l.blocked) && t.gm.module.gmTools.lines.some((l) => !l.blocked),
      () => `lines with one blocked (${JSON.stringify(t.gm.module.gmTools.lines)})`);
    const drawn = t.gm.canvas.controls.children.find((c) => c.name === "covercast-lines");
    const colours = new Set(drawn.segments.map((seg) => seg.color));
    assert.equal(drawn.segments.length, t.gm.module.gmTools.lines.length);
    assert.equal(colours.size, 2, "clear and blocked lines in two colours");
    assert.equal(t.player.canvas.controls.children.length, 0, "players get no lines");
    t.world.deleteWall(t.scene, wall.id);
  });

  it("runs the v12 path: jQuery chat cards, the same applied line", async () => {
    const world = new World({ system: "D35E", systemModel: d35e });
    const { scene } = yard("v12a000000000001");
    world.adopt(scene);
    world.addUser("gmv12GGGGGGGGGGG", "GM", true);
    const gm = world.client(world.users[0], { settings: { url: server.url }, generation: 12 });
    tables.push({ world });
    gm.login(scene);
    await waitFor(() => gm.module.store.size === 60, "v12: annotations");
    gm.control("fighter");
    gm.target("ogre");
    const roll = d35eAttack(gm, "fighter");
    assert.equal(roll.total, 18);
    assert.match(cardText(roll.cards, gm), /Fighter → Ogre \(melee\): no cover; flanking with Rogue \(\+2 attack\) — applied: \+2 attack/);
  });

  it("hands the table to a GM whose browser has the token when the first GM's has none", async () => {
    const guarded = new Server({ token: "t0ken" });
    await guarded.start();
    try {
      const world = new World({ system: "D35E", systemModel: d35e });
      const { scene } = yard("tok0000000000001");
      world.adopt(scene);
      world.addUser("gmaaaaaaaaaaaaaa", "GM Ann", true); // first in activeGM order, no token
      world.addUser("gmbbbbbbbbbbbbbb", "GM Bob", true, 3); // an assistant with the token
      const ann = world.client(world.users[0], { settings: { url: guarded.url } });
      const bob = world.client(world.users[1], { settings: { url: guarded.url, accessToken: "t0ken" } });
      tables.push({ world });
      ann.login(scene);
      bob.login(scene);
      await waitFor(() => bob.module.isSender && bob.module.store.size === 60, "the GM with the token sends");
      assert.equal(ann.module.role, "relayed");
      assert.ok(ann.notifications.some((n) => n.text.includes("GM Bob's browser talks to the server")),
        JSON.stringify(ann.notifications));
      await waitFor(() => ann.module.store.size === 60, "the GM without the token gets the viewer annotations");
    } finally {
      await guarded.kill();
    }
  });

  it("writes nothing but the GM's cover overrides", () => {
    assert.ok(writes.length > 0);
    assert.ok(writes.every((w) => (w.what === "setFlag" || w.what === "unsetFlag") && w.args[0] === "covercast" && w.args[1] === "cover"),
      JSON.stringify(writes.filter((w) => w.what !== "setFlag" && w.what !== "unsetFlag")));
  });
});
