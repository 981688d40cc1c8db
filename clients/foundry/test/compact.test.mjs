/**
 * The compact form of `annotations` (docs/protocol.md section 12) read back by the module
 * (`expandAnnotations`, which its Link applies to every frame): real frames from the real
 * server, a full set with lines and a move's delta, equal to the verbose frames a client
 * that did not ask for the compact form gets.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { expandAnnotations } from "../scripts/util.mjs";
import { Observer, Server, hasServer, waitFor } from "../test-support/server.mjs";

const skip = typeof WebSocket === "undefined"
  ? "node has no WebSocket (node 20 needs --experimental-websocket)"
  : !hasServer() ? "no covercast command (set COVERCAST_BIN or run make install)" : false;

const SCENE = {
  id: "hall", grid: { type: 1, size: 100, distance: 5 },
  walls: [{ _id: "low", c: [300, 0, 300, 300], flags: { covercast: { cover: "low" } } }],
  tokens: [
    { _id: "a", x: 0, y: 100, disposition: 1 },
    { _id: "f", x: 200, y: 100, disposition: 1 },
    { _id: "t", x: 100, y: 100, disposition: -1 },
    { _id: "b", x: 500, y: 100, disposition: -1 },
  ],
};

describe("the compact form", { skip }, () => {
  const server = new Server();
  /** @type {Observer} */ let verbose;
  /** @type {Observer} */ let compact;

  before(async () => {
    await server.start();
    verbose = await Observer.open(server.url, null, null, false);
    compact = await Observer.open(server.url, null, null, true);
    const ack = await verbose.request({ type: "scene.load", scene: SCENE, ruleset: "pf2" });
    assert.equal(ack.type, "ack", JSON.stringify(ack));
  });

  after(async () => {
    verbose?.close();
    compact?.close();
    await server.kill();
  });

  it("decodes to exactly the verbose full set and delta", async () => {
    const sub = { type: "subscribe", scene: "hall", lines: true };
    const fullV = await verbose.request(sub);
    const fullC = await compact.request(sub);
    assert.equal(fullC.form, "compact");
    assert.equal(fullV.form, undefined);
    assert.ok(JSON.stringify(fullC).length * 3 < JSON.stringify(fullV).length);
    assert.deepEqual({ ...expandAnnotations(fullC), id: null }, { ...fullV, id: null }); // ids: each observer's own
    assert.ok(fullV.annotations.some((a) => a.flankers), "a flanked pair (trailing map)");
    await verbose.request({ type: "token.update", scene: "hall", tokens: [{ _id: "b", x: 400, y: 200 }] });
    const push = (obs) => obs.pushes.find((m) => m.type === "annotations");
    await waitFor(() => push(verbose) && push(compact), "both deltas");
    assert.equal(push(compact).form, "compact");
    assert.deepEqual(expandAnnotations(push(compact)), push(verbose));
    assert.ok(push(verbose).annotations.length > 0);
  });

  it("leaves every other message as it is", () => {
    const ack = { type: "ack", scene: "s", revision: 2 };
    assert.equal(expandAnnotations(ack), ack);
    const plain = { type: "annotations", scene: "s", revision: 2, full: false, annotations: [], removed: [] };
    assert.equal(expandAnnotations(plain), plain);
  });
});
