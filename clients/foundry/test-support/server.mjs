/**
 * The real Covercast server for the module's tests: `covercast serve` as a child process
 * (killed and restarted on the same port to test reconnects), and a plain protocol client
 * that looks at the server's state independently of the module.
 *
 * COVERCAST_BIN names the `covercast` command (the pytest wrapper passes its virtualenv's);
 * by default the repository's .venv/bin/covercast.
 */

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

export function covercastBin() {
  return process.env.COVERCAST_BIN || path.join(ROOT, ".venv/bin/covercast");
}

export function hasServer() {
  return existsSync(covercastBin());
}

export class Server {
  constructor({ token = null } = {}) {
    this.token = token;
    this.port = 0;
    this.child = null;
  }

  get url() {
    return `ws://127.0.0.1:${this.port}`;
  }

  /** Start `covercast serve` (on the port it had before, if restarted); resolve once it
   * says it is listening. */
  start() {
    const args = ["serve", "--host", "127.0.0.1", "--port", String(this.port), "--no-demo", "--state", ":memory:"];
    if (this.token) args.push("--token", this.token);
    const child = spawn(covercastBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
    this.child = child;
    return new Promise((resolve, reject) => {
      let out = "";
      let err = "";
      const timer = setTimeout(() => reject(new Error(`server did not start: ${out}${err}`)), 20000);
      child.stderr.on("data", (d) => { err += d; });
      child.stdout.on("data", (d) => {
        out += d;
        const m = out.match(/listening on ws:\/\/[^:]+:(\d+)/);
        if (m) {
          clearTimeout(timer);
          this.port = Number(m[1]);
          resolve(this);
        }
      });
      child.on("exit", (code) => {
        clearTimeout(timer);
        if (this.child === child && this.port === 0) reject(new Error(`server exited ${code}: ${err}`));
      });
    });
  }

  /** Kill the server outright (no close handshake): every connection just drops. */
  kill() {
    const child = this.child;
    this.child = null;
    if (!child || child.exitCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      child.on("exit", () => resolve());
      child.kill("SIGKILL");
    });
  }
}

/** A bare protocol client (JSON text frames) for checking what the server holds. */
export class Observer {
  static async open(url, token, role = null, compact = false) {
    const obs = new Observer(new WebSocket(url));
    await new Promise((resolve, reject) => {
      obs.ws.onopen = resolve;
      obs.ws.onerror = () => reject(new Error(`cannot connect to ${url}`));
    });
    const welcome = await obs.request({ type: "hello", protocol: 1, client: "node-observer", token, role, compact });
    if (welcome.type !== "welcome") throw new Error(JSON.stringify(welcome));
    return obs;
  }

  constructor(ws) {
    this.ws = ws;
    this.nextId = 1;
    this.waiting = new Map();
    /** Pushes (messages no request asked for), in arrival order. */
    this.pushes = [];
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      const resolve = this.waiting.get(msg.id);
      if (resolve) {
        this.waiting.delete(msg.id);
        resolve(msg);
      } else if (msg.id === undefined) {
        this.pushes.push(msg);
      }
    };
  }

  request(msg) {
    const id = `o${this.nextId++}`;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.ws.send(JSON.stringify({ ...msg, id }));
    });
  }

  async scene(id) {
    return this.request({ type: "scene.get", scene: id });
  }

  async cover(scene, attacker, target, attack = "ranged") {
    return this.request({ type: "cover.query", scene, attacker, target, attack });
  }

  /** The full set a fresh subscription gets, keyed "attacker/target/mode". */
  async fullSet(scene) {
    const full = await this.request({ type: "subscribe", scene });
    await this.request({ type: "unsubscribe", scene });
    return new Map(full.annotations.map((a) => [`${a.attacker}/${a.target}/${a.mode}`, a]));
  }

  close() {
    this.ws.close();
  }
}

/** Poll until `predicate()` holds, or fail naming what was awaited. */
export async function waitFor(predicate, what, timeout = 10000) {
  const start = Date.now();
  for (;;) {
    const value = predicate();
    if (value) return value;
    if (Date.now() - start > timeout) throw new Error(`timed out waiting for ${typeof what === "function" ? what() : what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
