/**
 * The table's focus reaches the overlays: against the real server, a GM runs a combat in
 * the stand-in Foundry, and an overlay connection (a viewer, like the stream's page) is
 * pushed the pair play is about: the combatant whose turn it is and its owner's target,
 * each new target, each attack roll's pair; never a hidden token.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { FakeScene, World, tokenSource } from "../test-support/foundry-stand-in.mjs";
import { Observer, Server, hasServer, waitFor } from "../test-support/server.mjs";

const TOKEN = "focus-table";
const skip = typeof WebSocket === "undefined"
  ? "node has no WebSocket (node 20 needs --experimental-websocket)"
  : !hasServer() ? "no covercast command (set COVERCAST_BIN or run make install)" : false;

describe("the overlays follow play", { skip }, () => {
  const server = new Server({ token: TOKEN });
  const world = new World();
  let scene;
  let gm;
  let player;
  let overlay;
  let pat;

  const focusPushes = () => overlay.pushes.filter((m) => m.type === "focus");
  const lastFocus = () => focusPushes().at(-1) ?? null;
  /** Wait until the overlay's latest focus is `attacker -> target`. */
  const focusIs = (attacker, target) => waitFor(() => {
    const f = lastFocus();
    return f && f.attacker === attacker && f.target === target ? f : null;
  }, () => `focus ${attacker} -> ${target}; pushes: ${JSON.stringify(focusPushes())}`);

  before(async () => {
    await server.start();
    scene = world.adopt(new FakeScene("focus00000000000", {
      tokens: [
        tokenSource("archer", "Archer", 100, 300, { disposition: 1 }),
        tokenSource("goblin", "Goblin", 700, 300),
        tokenSource("orc", "Orc", 900, 300),
        tokenSource("spy", "Spy", 900, 600, { hidden: true }),
      ],
    }));
    world.addUser("gmGGGGGGGGGGGGGG", "GM Gil", true);
    pat = world.addUser("plPPPPPPPPPPPPPP", "Player Pat", false);
    const settings = { url: server.url, accessToken: TOKEN };
    gm = world.client(world.users[0], { settings });
    player = world.client(pat, { settings });
    gm.login(scene);
    player.login(scene);
    await waitFor(() => gm.module.store.size > 0, "the GM's full set");
    overlay = await Observer.open(server.url, TOKEN, "overlay");
    const full = await overlay.request({ type: "subscribe", scene: scene.id, modes: ["ranged"] });
    assert.equal(full.full, true);
  });

  after(async () => {
    for (const c of world.clients) c.module.stop();
    overlay?.close();
    await server.kill();
  });

  it("a turn starts: its combatant, and the target its player chose", async () => {
    player.target("goblin");
    const combat = world.startCombat(scene, [["archer", [pat]], ["orc"], ["goblin"]]);
    await focusIs("archer", "goblin");
    // The player changes target during the turn: the overlay follows.
    player.untargetAll();
    player.target("orc");
    await focusIs("archer", "orc");
    // The orc's turn: no player owns it, the GM's target counts.
    gm.target("archer");
    world.nextTurn(combat);
    await focusIs("orc", "archer");
    const count = focusPushes().length;
    world.nextTurn(combat); // goblin
    await focusIs("goblin", "archer");
    assert.equal(focusPushes().length, count + 1, "one push per change, none repeated");
  });

  it("an attack roll points the overlays at its pair, in its mode", async () => {
    player.untargetAll();
    player.target("goblin");
    world.chat(pat, "archer", { dnd5e: { roll: { type: "attack" } } });
    const f = await focusIs("archer", "goblin");
    assert.equal(f.mode, "ranged", "at 30 ft the archer shoots");
  });

  it("a hidden target never reaches the overlay, the GM's own view names it", async () => {
    gm.untargetAll();
    gm.target("spy");
    world.chat(world.users[0], "orc", { dnd5e: { roll: { type: "attack" } } });
    const seen = await focusIs("orc", null);
    assert.ok(!JSON.stringify(overlay.pushes).includes("spy"), "the spy is never named");
    assert.equal(seen.attacker, "orc");
    const sent = gm.module.focus.lastSent;
    assert.equal(sent.target, "spy", "the GM's browser sent the whole pair");
  });

  it("only the sender sends it, and the setting turns it off", async () => {
    assert.equal(player.module.focus.lastSent, null, "a player's client sends nothing");
    const count = focusPushes().length;
    world.settingValues.set("covercast.followPlay", false);
    world.chat(pat, "archer", { dnd5e: { roll: { type: "attack" } } });
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(focusPushes().length, count);
  });
});
