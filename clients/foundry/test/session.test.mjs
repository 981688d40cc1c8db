/**
 * A scripted Foundry session against the real Covercast server: a GM and a player log in,
 * tokens are targeted, a door opens, a token moves, walls and tokens come and go, attacks
 * are rolled, the server is killed and restarted, and a GM with a lower id joins and leaves.
 * Foundry itself is the stand-in of test-support/foundry-stand-in.mjs; the server and the protocol are real.
 *
 * Run: node --experimental-websocket --test clients/foundry/test/  (or pytest
 * tests/test_foundry_module.py, which starts nothing itself and passes COVERCAST_BIN).
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { FakeScene, World, tokenSource, wallSource, writes } from "../test-support/foundry-stand-in.mjs";
import { Observer, Server, hasServer, sleep, waitFor } from "../test-support/server.mjs";

const TOKEN = "s3cret-table";
const skip = typeof WebSocket === "undefined"
  ? "node has no WebSocket (node 20 needs --experimental-websocket)"
  : !hasServer() ? "no covercast command (set COVERCAST_BIN or run make install)" : false;

/** Node's WebSocket, recording what the module does with it. */
const opened = [];
const frames = [];
const RecordingWebSocket = typeof WebSocket === "undefined" ? null : class extends WebSocket {
  constructor(url, ...rest) {
    super(url, ...rest);
    opened.push(url);
  }

  send(data) {
    frames.push(JSON.parse(data));
    super.send(data);
  }
};

function keep() {
  const actors = {
    archer: { system: { traits: { size: "med" } } }, // dnd5e-style size
    goblin: { system: { traits: { size: { value: "sm" } }, attributes: { reach: { base: 5 } } } }, // pf2e-style
  };
  return new FakeScene("keep0000000000aa", {
    actors,
    tokens: [
      tokenSource("archer", "Archer", 100, 300, { disposition: 1 }),
      tokenSource("goblin", "Goblin", 700, 300),
      tokenSource("fighter", "Fighter", 1200, 600, { disposition: 1 }),
      tokenSource("rogue", "Rogue", 1400, 600, { disposition: 1 }),
      tokenSource("ogre", "Ogre", 1300, 600),
    ],
    walls: [
      wallSource("door", [400, 200, 400, 500], { door: 1, ds: 0 }),
      wallSource("north", [0, 0, 2000, 0]),
    ],
  });
}

describe("Covercast module in a scripted Foundry session", { skip }, () => {
  const server = new Server({ token: TOKEN });
  const world = new World();
  let scene;
  let gmB;
  let player;
  let observer;
  const settings = () => ({ url: server.url, accessToken: TOKEN });

  before(async () => {
    await server.start();
    scene = keep();
    world.addUser("gmBBBBBBBBBBBBBB", "GM Bea", true);
    world.addUser("plPPPPPPPPPPPPPP", "Player Pat", false);
    world.addUser("gmAAAAAAAAAAAAAA", "GM Al", true);
    gmB = world.client(world.users[0], { settings: settings(), WebSocket: RecordingWebSocket });
    player = world.client(world.users[1], { settings: settings(), WebSocket: RecordingWebSocket });
  });

  after(async () => {
    for (const c of world.clients) c.module.stop();
    observer?.close();
    await server.kill();
  });

  it("elects the only GM, who connects with the token in hello and loads the viewed scene", async () => {
    gmB.login(scene);
    assert.equal(gmB.module.isSender, true);
    await waitFor(() => gmB.module.store.size > 0, "the full set of annotations");
    assert.deepEqual(opened, [server.url, server.url], "two sockets, to the configured URL");
    assert.ok(!opened[0].includes(TOKEN), "the access token never goes in the URL");
    const hellos = frames.filter((f) => f.type === "hello");
    assert.deepEqual(hellos.map((h) => h.role), ["gm", "player"],
      "one connection for the GM's numbers, one for what players may be told");
    for (const hello of hellos) {
      assert.equal(hello.token, TOKEN);
      assert.equal(hello.protocol, 1);
      assert.equal(hello.compact, true, "annotations asked for in the compact form");
    }
    const load = frames.find((f) => f.type === "scene.load");
    // Foundry's documents go as Foundry gives them (toObject), the actor's size added.
    assert.equal(load.scene._id, scene.id);
    assert.equal(load.scene.background.src, "maps/keep.webp");
    assert.deepEqual(load.scene.tokens[0].texture, scene.tokens[0]._source.texture);
    observer = await Observer.open(server.url, TOKEN);
    const held = await observer.scene(scene.id);
    const sizes = Object.fromEntries(held.scene.tokens.map((t) => [t.id, t.size ?? null]));
    assert.deepEqual(sizes, { archer: "medium", goblin: "small", fighter: null, rogue: null, ogre: null });
    const reaches = Object.fromEntries(held.scene.tokens.map((t) => [t.id, t.reach ?? null]));
    assert.deepEqual(reaches, { archer: null, goblin: 5, fighter: null, rogue: null, ogre: null });
    // 5 tokens, 20 ordered pairs, 3 modes.
    assert.equal(gmB.module.store.size, 60);
  });

  it("a player's client never connects, and gets the annotations relayed by the GM", async () => {
    const before = opened.length;
    player.login(scene);
    assert.equal(player.module.isSender, false);
    await waitFor(() => player.module.store.size === 60, "the relayed full set");
    assert.equal(opened.length, before, "only the sender opens a socket");
  });

  it("shows a targeted token's cover against the controlled token", async () => {
    gmB.control("archer");
    gmB.target("goblin");
    assert.equal(gmB.badge("goblin"), "total cover", "the closed door blocks every line");
    assert.equal(gmB.badge("archer"), null, "only targeted tokens get a badge");
    player.control("archer");
    player.target("goblin");
    assert.equal(player.badge("goblin"), "total cover");
  });

  it("forwards a door opening as a wall diff and the cover changes", async () => {
    world.updateWall(scene, "door", { ds: 1 });
    await waitFor(() => gmB.badge("goblin") === "no cover", "the GM's badge after the door opens");
    await waitFor(() => player.badge("goblin") === "no cover", "the player's badge after the door opens");
    const sent = frames.filter((f) => f.type === "wall.update").at(-1);
    assert.deepEqual(sent.walls, [{ _id: "door", ds: 1 }], "Foundry's diff, untouched");
    const query = await observer.cover(scene.id, "archer", "goblin");
    assert.equal(query.annotation.cover, "none");
  });

  it("forwards a new wall and a token move; the moved token's cover arrives as a delta", async () => {
    world.createWall(scene, wallSource("crate", [600, 600, 600, 750]));
    await sleep(50);
    assert.equal(gmB.badge("goblin"), "no cover");
    const revision = gmB.module.store.revision;
    world.updateToken(scene, "goblin", { x: 700, y: 700 });
    await waitFor(() => gmB.module.store.revision > revision && gmB.badge("goblin") === "cover",
      "the delta after the goblin moves behind the crate");
    const query = await observer.cover(scene.id, "archer", "goblin");
    assert.equal(query.annotation.cover, "cover", "the server agrees when asked directly");
    const info = gmB.module.status.get("goblin");
    assert.match(info.text, /^cover \(\+4 AC, \+2 Reflex\)$/);
    const move = frames.filter((f) => f.type === "token.update").at(-1);
    assert.deepEqual(move.tokens, [{ _id: "goblin", x: 700, y: 700 }]);
    world.deleteWall(scene, "crate");
    await waitFor(() => gmB.badge("goblin") === "no cover", "the cover gone with the crate");
  });

  it("shows flanking in melee, and a chat line under attack rolls, on every client", async () => {
    gmB.untargetAll();
    gmB.control("fighter");
    gmB.target("ogre");
    assert.equal(gmB.badge("ogre"), "no cover · flanked");
    assert.equal(gmB.badge("goblin"), null, "untargeted: badge removed");
    const { cards } = world.chat(world.users[0], "fighter", { dnd5e: { roll: { type: "attack" } } });
    assert.equal(cards.get(gmB).text, "Fighter → Ogre (melee): no cover; flanking with Rogue (+2 attack)");
    assert.equal(cards.get(player).text, cards.get(gmB).text, "players see the same line");
    // The player attacks with a pf2e-style roll: the line uses the player's targets.
    const { cards: cards2 } = world.chat(world.users[1], "archer", { pf2e: { context: { type: "attack-roll" } } });
    assert.equal(cards2.get(gmB).text, "Archer → Goblin (ranged): no cover");
    // A roll that is no attack gets nothing.
    const { cards: cards3 } = world.chat(world.users[1], "archer", { dnd5e: { roll: { type: "skill" } } });
    assert.equal(cards3.get(gmB).text, "");
  });

  it("tells players what the server computes for a viewer: a hidden creature in the way changes only the GM's numbers", async () => {
    const logged = world.socketLog.length;
    // A hidden lurker on the line from the archer to the goblin (archer at 100,300; goblin
    // at 700,700): soft cover for the GM, nothing for anyone else.
    world.createToken(scene, tokenSource("lurker", "Lurker", 400, 500, { hidden: true }));
    await waitFor(() => gmB.module.store.get("archer", "goblin", "ranged")?.cover === "soft", "the GM's soft cover from the lurker");
    const revision = gmB.module.store.revision;
    await waitFor(() => player.module.store.revision >= revision, "the player's view at the same revision");
    assert.equal(player.module.store.get("archer", "goblin", "ranged").cover, "none");
    // What the player holds is exactly what the server gives a fresh player subscription.
    const viewer = await Observer.open(server.url, TOKEN, "player");
    const fresh = await viewer.fullSet(scene.id);
    viewer.close();
    assert.equal(player.module.store.size, fresh.size);
    for (const [key, ann] of fresh) {
      const [a, t, m] = key.split("/");
      assert.deepEqual(player.module.store.get(a, t, m), ann, key);
    }
    const relayed = JSON.stringify(world.socketLog.slice(logged));
    assert.ok(!relayed.includes("lurker"), "the lurker's id never crosses the module socket");
    assert.ok(!relayed.includes('"soft"'), "nor its soft cover");
    // Hiding a visible token: the players' numbers lose its effect too, not only its name.
    world.updateToken(scene, "ogre", { hidden: true });
    await waitFor(() => player.module.store.get("fighter", "ogre", "melee") === null, "the ogre's pairs removed for the player");
    assert.ok(gmB.module.store.get("fighter", "ogre", "melee"), "the GM still has them");
    world.updateToken(scene, "ogre", { hidden: false });
    world.deleteToken(scene, "lurker");
    await waitFor(() => player.module.store.get("fighter", "ogre", "melee") && gmB.module.store.get("archer", "goblin", "ranged")?.cover === "none",
      "the ogre back, the lurker gone");
  });

  it("takes relayed annotations only from the elected sender", async () => {
    const before = player.module.store.get("archer", "goblin", "ranged");
    // Another client claims to relay (a player, or a GM who is not the sender).
    player.game.socket.handlers.get("module.covercast")({
      kind: "annotations", from: "plPPPPPPPPPPPPPP", scene: scene.id, revision: 999, full: true, annotations: [], removed: [],
    });
    player.game.socket.handlers.get("module.covercast")({
      kind: "annotations", from: "nobody", scene: scene.id, revision: 999, full: true, annotations: [], removed: [],
    });
    assert.deepEqual(player.module.store.get("archer", "goblin", "ranged"), before);
    assert.notEqual(player.module.store.revision, 999);
  });

  it("keeps the badge when Foundry redraws the token", () => {
    assert.equal(gmB.badge("ogre"), "no cover · flanked");
    gmB.redraw("ogre");
    assert.equal(gmB.badge("ogre"), "no cover · flanked");
  });

  it("sends an actor's new size and reach for its tokens", async () => {
    const goblin = scene.tokens.get("goblin");
    world.updateActor(scene, goblin.actor, { system: { traits: { size: { value: "lg" } }, attributes: { reach: { base: 10 } } } });
    const update = await waitFor(() => frames.find((f) => f.type === "token.update" && f.tokens[0].size === "large"), "the size update");
    assert.deepEqual(update.tokens, [{ _id: "goblin", size: "large", reach: 10 }]);
    // The observer's own connection may be served before the module's update: ask until acked.
    let stored = null;
    for (let i = 0; i < 50 && !(stored?.size === "large"); i++) {
      stored = (await observer.scene(scene.id)).scene.tokens.find((t) => t.id === "goblin");
      if (stored.size !== "large") await sleep(20);
    }
    assert.deepEqual([stored.size, stored.reach], ["large", 10]);
    // (The GM's traced-lines query may go out meanwhile: only scene changes are counted.)
    const changes = () => frames.filter((f) => f.type.startsWith("token.") || f.type.startsWith("wall.") || f.type === "scene.load").length;
    const count = changes();
    world.updateActor(scene, goblin.actor, { system: { details: { hp: 3 } } });
    await sleep(30);
    assert.equal(changes(), count, "an actor change that is not size or reach sends nothing");
  });

  it("forwards token creation and deletion", async () => {
    world.deleteToken(scene, "goblin");
    await waitFor(() => gmB.module.store.get("archer", "goblin", "ranged") === null, "the goblin's pairs removed");
    world.createToken(scene, tokenSource("kobold", "Kobold", 700, 300));
    await waitFor(() => gmB.module.store.get("archer", "kobold", "ranged"), "the kobold's pairs");
    assert.equal(gmB.module.store.size, 60);
  });

  it("reconnects with backoff after the server dies, and resyncs the scene as Foundry has it now", async () => {
    await server.kill();
    await waitFor(() => gmB.module.state !== "open", "the module noticing the lost connection");
    assert.equal(gmB.module.store.size, 0, "no stale cover is shown");
    assert.equal(gmB.badge("ogre"), null);
    // Changes made while the server is down cannot be sent; the resync must carry them.
    world.updateToken(scene, "kobold", { x: 800, y: 400 });
    const attempts = opened.length;
    await sleep(300);
    assert.ok(opened.length > attempts, "it keeps trying while the server is down");
    await server.start(); // same port, an empty server: the scene is gone
    await waitFor(() => gmB.module.connections === 2 && gmB.module.store.size === 60,
      () => `reconnect and resync (${gmB.module.state}, ${gmB.module.connections}, ${gmB.module.store.size})`, 15000);
    assert.equal(gmB.badge("ogre"), "no cover · flanked");
    assert.ok(gmB.notifications.some((n) => n.text.includes("reconnected")));
    observer = await Observer.open(server.url, TOKEN);
    const held = await observer.scene(scene.id);
    const kobold = held.scene.tokens.find((t) => t.id === "kobold");
    assert.deepEqual([kobold.x, kobold.y], [800, 400]);
    await waitFor(() => player.module.store.size === 60, "the player's view restored");
  });

  it("hands the connection to a GM with a lower id who joins, and takes it back when they leave", async () => {
    const gmA = world.client(world.users[2], { settings: settings(), WebSocket: RecordingWebSocket });
    gmA.login(scene);
    assert.equal(gmA.module.isSender, true);
    assert.equal(gmB.module.isSender, false);
    assert.equal(gmB.module.role, "reader", "a GM with the token keeps a read-only view of the true numbers");
    await waitFor(() => gmB.module.state === "open" && gmB.module.store.size === 60, "the reader's own subscription");
    await waitFor(() => gmA.module.store.size === 60, "the new sender's full set");
    world.updateToken(scene, "kobold", { x: 900 });
    await waitFor(() => (gmA.module.store.get("archer", "kobold", "ranged") && frames.some((f) => f.type === "token.update" && f.tokens[0].x === 900)), "the new sender forwarding");
    const updates = frames.filter((f) => f.type === "token.update" && f.tokens[0]._id === "kobold" && f.tokens[0].x === 900);
    assert.equal(updates.length, 1, "one sender: each change is sent once");
    gmA.logout();
    assert.equal(gmB.module.isSender, true);
    await waitFor(() => gmB.module.viewer.open && gmB.module.viewerSubscribed === scene.id && gmB.module.store.size === 60,
      "the old sender back, with its viewer connection");
    world.updateToken(scene, "kobold", { x: 800 });
    await waitFor(() => frames.some((f) => f.type === "token.update" && f.tokens[0].x === 800), "the old sender forwarding again");
  });

  it("writes nothing to Foundry's database", () => {
    assert.deepEqual(writes, []);
  });
});

describe("Covercast module on a scene the server refuses", { skip }, () => {
  const server = new Server();
  after(() => server.kill());

  it("warns with the server's reason, sends no diffs, and loads the scene once it is fixed", async () => {
    await server.start();
    const world = new World();
    world.addUser("gm00000000000000", "GM", true);
    const gm = world.client(world.users[0], { settings: { url: server.url }, WebSocket: RecordingWebSocket });
    const scene = keep();
    scene._source.grid.type = 0; // gridless
    gm.login(scene);
    await waitFor(() => gm.notifications.some((n) => n.level === "warn"), "the warning");
    const warning = gm.notifications.find((n) => n.level === "warn").text;
    assert.match(warning, /grid type 0 \(GRIDLESS, gridless\) is not supported/);
    const sent = frames.length;
    world.updateToken(scene, "goblin", { x: 600 });
    await sleep(50);
    assert.equal(frames.slice(sent).filter((f) => f.type === "token.update").length, 0,
      "no diffs against a scene the server does not hold");
    world.updateToken(scene, "goblin", { x: 500 });
    await sleep(300);
    assert.equal(gm.notifications.filter((n) => n.level === "warn").length, 1, "the refusal is told once");
    world.updateScene(scene, { grid: { type: 1 } });
    await waitFor(() => gm.module.store.size === 60, "the annotations once the grid is square");
    assert.equal(gm.notifications.filter((n) => n.level === "warn").length, 1);
    gm.module.stop();
  });
});

describe("Covercast module on a scene with a token larger than the largest creature", { skip }, () => {
  const server = new Server();
  after(() => server.kill());

  it("leaves the token out, tells the GM once, and follows a token resized past the limit and back", async () => {
    await server.start();
    const world = new World();
    world.addUser("gm00000000000000", "GM", true);
    const gm = world.client(world.users[0], { settings: { url: server.url }, WebSocket: RecordingWebSocket });
    const scene = keep();
    // A ship drawn as a token: 12 x 12 squares, over the server's 6 (welcome.limits).
    scene.tokens.push(new scene.tokens[0].constructor(scene, tokenSource("ship", "Ship", 3000, 3000, { width: 12, height: 12 })));
    const sent = frames.length;
    gm.login(scene);
    // (The player connection's subscribe too: on a loaded machine it may go out after the
    // gm connection's annotations are in, inside the window counted below.)
    await waitFor(() => gm.module.store.size === 60 && gm.module.viewer.open
      && gm.module.viewerSubscribed === scene.id, "the annotations of the five creatures");
    const load = frames.slice(sent).find((f) => f.type === "scene.load");
    assert.deepEqual(load.scene.tokens.map((t) => t._id).sort(), ["archer", "fighter", "goblin", "ogre", "rogue"]);
    const warned = () => gm.notifications.filter((n) => n.level === "warn");
    assert.equal(warned().length, 1);
    assert.match(warned()[0].text, /leaves out Ship \(12 x 12 squares\).* up to 6 squares/);
    const before = frames.length;
    world.updateToken(scene, "ship", { x: 3100 });
    await sleep(100);
    assert.equal(frames.slice(before).length, 0, `a token left out is nothing to the server: ${JSON.stringify(frames.slice(before)).slice(0, 300)}`);
    world.updateToken(scene, "goblin", { width: 7, height: 7 });
    await waitFor(() => gm.module.store.size === 36, "the scene again, without the goblin");
    world.updateToken(scene, "goblin", { width: 1, height: 1 });
    await waitFor(() => gm.module.store.size === 60, "the goblin back");
    assert.equal(warned().length, 2, "the ship and the goblin, each told once");
    gm.module.stop();
  });
});

describe("Covercast module on a scene larger than a frame", { skip }, () => {
  const server = new Server();
  after(() => server.kill());

  it("loads the scene without its walls, then sends the walls in batches that fit", async () => {
    await server.start();
    const world = new World();
    world.addUser("gm00000000000000", "GM", true);
    const maxFrameBytes = 20000;
    const gm = world.client(world.users[0], { settings: { url: server.url }, WebSocket: RecordingWebSocket, maxFrameBytes });
    const scene = keep();
    // A maze of 400 short walls, each a Foundry wall with all its fields (~300 bytes).
    for (let k = 0; k < 400; k++) {
      const x = 1500 + (k % 20) * 20;
      const y = 100 + Math.floor(k / 20) * 40;
      scene.walls.push(new scene.walls[0].constructor(scene, wallSource(`maze${k}`, [x, y, x + 10, y])));
    }
    scene._source.lights = Array.from({ length: 50 }, (_, k) => ({ _id: `light${k}`, x: k, y: k, config: { dim: 30 } }));
    const sent = frames.length;
    gm.login(scene);
    await waitFor(() => gm.module.store.size === 60, "the annotations");
    const mine = frames.slice(sent);
    const load = mine.find((f) => f.type === "scene.load");
    const batches = mine.filter((f) => f.type === "wall.create");
    assert.equal(load.scene.walls.length, 0);
    assert.deepEqual(load.scene.lights, [], "collections Covercast ignores are left out");
    assert.ok(batches.length >= 4, `${batches.length} batches`);
    for (const f of [load, ...batches]) {
      assert.ok(Buffer.byteLength(JSON.stringify(f)) <= maxFrameBytes, "every frame fits");
    }
    assert.equal(batches.reduce((n, b) => n + b.walls.length, 0), 402);
    const observer = await Observer.open(server.url);
    const held = await observer.scene(scene.id);
    observer.close();
    assert.equal(held.scene.walls.length, 402);
    assert.equal(gm.notifications.filter((n) => n.level !== "info").length, 0);
    gm.module.stop();
  });
});

describe("Covercast module with a wrong access token", { skip }, () => {
  const server = new Server({ token: TOKEN });
  after(() => server.kill());

  it("reports the refusal once and does not retry until the settings change", async () => {
    await server.start();
    const world = new World();
    world.addUser("gm00000000000000", "GM", true);
    let sockets = 0;
    const Counting = class extends WebSocket {
      constructor(url) { super(url); sockets += 1; }
    };
    const gm = world.client(world.users[0], { settings: { url: server.url, accessToken: "wrong" }, WebSocket: Counting });
    gm.login(keep());
    await waitFor(() => gm.module.state === "refused", "the refusal");
    assert.ok(gm.notifications.some((n) => n.level === "error" && n.text.includes("access denied")));
    await sleep(300);
    assert.equal(sockets, 1, "no retry with a token the server refuses");
    await gm.game.settings.set("covercast", "accessToken", TOKEN);
    await waitFor(() => gm.module.store.size > 0, "connection with the right token");
    gm.module.stop();
  });
});
