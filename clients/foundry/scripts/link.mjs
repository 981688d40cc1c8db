/**
 * One WebSocket connection to the Covercast server, kept open: hello (with the role asked
 * for, and annotations in the compact form, read back here into the verbose one), welcome,
 * reconnection with jittered backoff, request ids and their replies.
 *
 * Rule of this module: it knows the protocol's framing and handshake, nothing of Foundry or
 * of scenes. Its owner decides what to send after a welcome and what a reply means
 * (`onWelcome`, `onMessage`, `onLost` callbacks).
 */

import { expandAnnotations } from "./util.mjs";

export const VERSION = "0.2.0";
export const CLIENT_NAME = `foundry-covercast/${VERSION}`;

/**
 * How long to wait before reconnect attempt `attempt` (0-based): exponential from `base`,
 * capped at `max`, with equal jitter (half fixed, half random) so that clients dropped by one
 * server restart do not all come back in the same millisecond.
 * @param {number} attempt
 * @param {{base?: number, max?: number}} [limits]
 * @param {() => number} [random]
 */
export function backoffDelay(attempt, { base = 500, max = 30000 } = {}, random = Math.random) {
  const cap = Math.min(max, base * 2 ** Math.min(attempt, 30));
  return cap / 2 + random() * (cap / 2);
}

/**
 * @typedef {object} LinkOptions
 * @property {() => string} url             the server's address, read at each attempt
 * @property {() => string} token           the access token, read at each attempt
 * @property {string} role                  "gm" or "player": what hello asks for
 * @property {any} WebSocket                the WebSocket class
 * @property {(msg: any) => void} onWelcome
 * @property {(msg: any, request: any) => void} onMessage   a reply or a push, with the request it answers
 * @property {(info: {code: number, reason: string, wasOpen: boolean, refused: boolean}) => void} onLost
 * @property {(fn: () => void, ms: number) => any} setTimer
 * @property {(t: any) => void} clearTimer
 * @property {() => number} random
 * @property {{base: number, max: number}} backoff
 * @property {number} connectTimeout
 */

export class Link {
  /** @param {LinkOptions} options */
  constructor(options) {
    this.o = options;
    /** @type {any} */
    this.ws = null;
    /** idle | connecting | open | closed | refused | stopped */
    this.state = "idle";
    this.wanted = false;
    this.attempt = 0;
    this.retryTimer = null;
    this.nextId = 1;
    /** @type {Map<number, {type: string, scene: string | null}>} */
    this.pending = new Map();
    /** @type {any} */
    this.welcome = null;
    this.connections = 0;
  }

  get open() {
    return this.state === "open";
  }

  start() {
    if (this.wanted) return;
    this.wanted = true;
    this.attempt = 0;
    this.connect();
  }

  /** Close for good (the owner no longer needs this connection). */
  stop(reason = "no longer needed") {
    this.wanted = false;
    if (this.retryTimer !== null) this.o.clearTimer(this.retryTimer);
    this.retryTimer = null;
    const ws = this.ws;
    this.ws = null;
    this.pending.clear();
    this.state = "stopped";
    if (ws) ws.close(1000, reason);
  }

  /** The URL or the token changed: connect again with the new values. */
  restart() {
    const wanted = this.wanted;
    this.stop("settings changed");
    if (wanted) this.start();
  }

  connect() {
    const url = this.o.url();
    let ws;
    try {
      ws = new this.o.WebSocket(url);
    } catch (err) {
      this.state = "refused";
      this.o.onLost({ code: 0, reason: `cannot connect to "${url}": ${err.message}`, wasOpen: false, refused: true });
      return;
    }
    this.ws = ws;
    this.state = "connecting";
    ws.onopen = () => {
      const token = this.o.token();
      this.raw({ type: "hello", protocol: 1, client: CLIENT_NAME, token: token || null, role: this.o.role,
                 compact: true });
    };
    ws.onmessage = (/** @type {{data: any}} */ event) => this.receive(event.data);
    ws.onclose = (/** @type {{code: number, reason: string}} */ event) => this.closed(ws, event);
    // Browsers follow an error with a close event, but not every WebSocket does (node 20's
    // fires only `error` when the connection is refused): an error ends this socket here,
    // and its later close, if any, is ignored.
    ws.onerror = () => this.closed(ws, { code: 1006, reason: "error" });
    // A connection that is not welcomed in time (a silent network, a stuck proxy) is given up.
    this.o.setTimer(() => {
      if (ws === this.ws && this.state === "connecting") {
        this.closed(ws, { code: 1006, reason: "timeout" });
        ws.close();
      }
    }, this.o.connectTimeout);
  }

  /** @param {any} ws @param {{code: number, reason: string}} event */
  closed(ws, event) {
    if (ws !== this.ws) return; // an old socket we already left
    this.ws = null;
    const wasOpen = this.state === "open";
    this.pending.clear();
    // A refused hello (wrong token, wrong protocol) will be refused again: wait for the
    // settings to change instead of hammering the server.
    const refused = event?.code === 1008;
    this.state = refused ? "refused" : "closed";
    this.o.onLost({ code: event?.code ?? 1006, reason: event?.reason ?? "", wasOpen, refused });
    if (!refused && this.wanted) this.scheduleReconnect();
  }

  scheduleReconnect() {
    const delay = backoffDelay(this.attempt++, this.o.backoff, this.o.random);
    this.retryTimer = this.o.setTimer(() => {
      this.retryTimer = null;
      if (this.wanted && this.ws === null) this.connect();
    }, delay);
  }

  /** @param {any} msg */
  raw(msg) {
    this.ws?.send(JSON.stringify(msg));
  }

  /**
   * Send a request with a fresh id; its reply reaches `onMessage` with `{type, scene}`.
   * False when the connection is not open (nothing is queued: a resync follows a reconnect).
   * @param {any} msg @param {string | null} [scene]
   */
  send(msg, scene = null) {
    const ws = this.ws;
    if (!ws || ws.readyState !== 1 || this.state !== "open") return false;
    const id = this.nextId++;
    this.pending.set(id, { type: msg.type, scene });
    ws.send(JSON.stringify({ ...msg, id }));
    return true;
  }

  /** @param {any} data */
  receive(data) {
    if (typeof data !== "string") return; // we only ever send JSON, so replies are JSON
    let msg;
    try {
      msg = expandAnnotations(JSON.parse(data));
    } catch {
      return;
    }
    if (msg.type === "welcome" && this.state === "connecting") {
      this.welcome = msg;
      this.state = "open";
      this.attempt = 0;
      this.connections += 1;
      this.o.onWelcome(msg);
      return;
    }
    const request = msg.id !== undefined ? this.pending.get(msg.id) : undefined;
    if (request) this.pending.delete(msg.id);
    this.o.onMessage(msg, request ?? null);
  }
}
