/**
 * The players' view is filtered: the sender's player connection subscribes to the attacks
 * of the tokens players own (docs/protocol.md 3.12), relays only those, and subscribes
 * again when a player's token comes or goes; the GM's own connection stays unfiltered.
 * Against the real Covercast server, Foundry being the stand-in of test-support.
 *
 * Run: node --experimental-websocket --test clients/foundry/test/
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { FakeScene, World, tokenSource } from "../test-support/foundry-stand-in.mjs";
import { Server, hasServer, waitFor } from "../test-support/server.mjs";

const TOKEN = "s3cret-filter";
const PLAYER = "plPPPPPPPPPPPPPP";
const skip = typeof WebSocket === "undefined"
  ? "node has no WebSocket (node 20 needs --experimental-websocket)"
  : !hasServer() ? "no covercast command (set COVERCAST_BIN or run make install)" : false;

const frames = [];
const RecordingWebSocket = typeof WebSocket === "undefined" ? null : class extends WebSocket {
  send(data) {
    frames.push(JSON.parse(data));
    super.send(data);
  }
};

/** An actor the player owns (Foundry's Document#testUserPermission). */
const owned = () => ({ system: {}, testUserPermission: (user, level) => user.id === PLAYER && level === "OWNER" });

function field() {
  return new FakeScene("field00000000000", {
    actors: { archer: owned(), scout: owned() },
    tokens: [
      tokenSource("archer", "Archer", 100, 300, { disposition: 1 }),
      tokenSource("goblin", "Goblin", 700, 300),
      tokenSource("ogre", "Ogre", 1300, 600),
      tokenSource("scout", "Scout", 1500, 600, { disposition: 1, hidden: true }),
    ],
  });
}

const subscribes = () => frames.filter((f) => f.type === "subscribe");

describe("the players' filtered view", { skip }, () => {
  const server = new Server({ token: TOKEN });
  const world = new World();
  let scene;
  let gm;
  let player;

  before(async () => {
    await server.start();
    scene = field();
    world.addUser("gmBBBBBBBBBBBBBB", "GM Bea", true);
    world.addUser(PLAYER, "Player Pat", false);
    const settings = { url: server.url, accessToken: TOKEN };
    gm = world.client(world.users[0], { settings, WebSocket: RecordingWebSocket });
    player = world.client(world.users[1], { settings, WebSocket: RecordingWebSocket });
  });

  after(async () => {
    for (const c of world.clients) c.module.stop();
    await server.kill();
  });

  it("subscribes the player connection to the players' tokens' attacks, the GM's to everything", async () => {
    gm.login(scene);
    player.login(scene);
    // 4 tokens: the GM sees 12 ordered pairs in 3 modes.
    await waitFor(() => gm.module.store.size === 36, "the GM's full set");
    // The scout is hidden: a viewer may not name it, so only the archer's attacks (on the
    // goblin and the ogre) are relayed.
    await waitFor(() => player.module.store.size === 6, "the player's filtered set");
    const asked = subscribes();
    assert.deepEqual(asked.map((f) => f.attackers ?? null).sort(), [null, ["archer"]].sort());
    assert.ok([...player.module.store.values()].every((a) => a.attacker === "archer"));
    player.control("archer");
    player.target("goblin");
    assert.notEqual(player.badge("goblin"), null, "the player's badge still shows");
  });

  it("subscribes again when a player's token is shown or deleted", async () => {
    world.updateToken(scene, "scout", { hidden: false });
    await waitFor(() => player.module.store.size === 18, "the scout's attacks too");
    assert.deepEqual(subscribes().at(-1).attackers, ["archer", "scout"]);
    world.deleteToken(scene, "archer");
    await waitFor(() => player.module.store.size === 6, "the archer's attacks gone");
    assert.deepEqual(subscribes().at(-1).attackers, ["scout"]);
    assert.ok([...player.module.store.values()].every((a) => a.attacker === "scout"));
    assert.equal(gm.module.store.size, 18, "the GM still sees every pair");
  });
});
