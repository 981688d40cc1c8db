/**
 * The GM's tools on the canvas:
 * - a Token HUD button that sets the GM's cover override (`flags.covercast.cover`) to each of
 *   the scene's ruleset's degrees in turn, then clears it (the one document write the module
 *   makes, and only on a GM's click);
 * - the lines the ruleset traced between the controlled token and the first target
 *   (`cover.query` with `lines`), drawn on the canvas: clear in one colour, blocked in
 *   another. Only where a gm connection exists (the sender, a reader).
 *
 * Rule of this module: it asks the server only through the module's gm connection and
 * draws only PIXI objects of its own.
 */

import { MODULE_ID } from "./util.mjs";

const CLEAR = 0x40e0ff;
const BLOCKED = 0xff3030;
const LAYER = "covercast-lines";

/** The degrees a GM may set on a token in this ruleset: every degree but none and total.
 * @param {any} cc */
export function overrideDegrees(cc) {
  const ruleset = (cc.welcome?.rulesets ?? []).find((/** @type {any} */ r) => r.name === cc.setting("ruleset"));
  return (ruleset?.degrees ?? []).filter((/** @type {string} */ d) => d !== "none" && d !== "total");
}

/** The override after `current` in the cycle: each degree, then none (null).
 * @param {string[]} degrees @param {string | null | undefined} current */
export function nextOverride(degrees, current) {
  if (degrees.length === 0) return null;
  const i = current ? degrees.indexOf(current) : -1;
  return i + 1 < degrees.length ? degrees[i + 1] : null;
}

/** @param {any} cc the module */
export function installGmTools(cc) {
  const tools = new GmTools(cc);
  cc.env.Hooks.on("renderTokenHUD", (/** @type {any} */ hud, /** @type {any} */ html) => tools.addHudButton(hud, html));
  return tools;
}

class GmTools {
  /** @param {any} cc */
  constructor(cc) {
    this.cc = cc;
    this.pair = null; // "attacker/target/revision" last asked about
    this.lines = null; // the last traced lines, for tests
  }

  /** @param {any} hud @param {any} html */
  addHudButton(hud, html) {
    const cc = this.cc;
    if (!cc.game.user?.isGM) return;
    const doc = hud?.object?.document ?? hud?.document;
    const root = html?.jquery ? html[0] : html;
    const column = root?.querySelector?.(".col.right");
    if (!doc || !column) return;
    const degrees = overrideDegrees(cc);
    if (degrees.length === 0) return;
    const current = doc.flags?.[MODULE_ID]?.cover ?? null;
    const button = cc.env.document.createElement("div");
    button.className = `control-icon covercast-cover${current ? " active" : ""}`;
    button.dataset.action = "covercast-cover";
    button.title = `${cc.t("HUD.title")}: ${cc.t("HUD.current", { degree: current ?? cc.t("HUD.cleared") })}`;
    button.innerHTML = '<i class="fas fa-shield-halved"></i>';
    button.addEventListener("click", () => this.cycle(doc));
    column.appendChild(button);
  }

  /** Set the token's override to the next degree (or clear it). @param {any} doc */
  cycle(doc) {
    const current = doc.flags?.[MODULE_ID]?.cover ?? null;
    const next = nextOverride(overrideDegrees(this.cc), current);
    return next === null ? doc.unsetFlag(MODULE_ID, "cover") : doc.setFlag(MODULE_ID, "cover", next);
  }

  /** Ask for the traced lines of the selected pair when it or the scene changed. */
  redraw() {
    const cc = this.cc;
    if (!cc.game.user?.isGM || !cc.link?.open || !cc.setting("showLines")) return this.draw(null);
    const attacker = cc.attacker();
    const target = [...(cc.game.user.targets ?? [])][0];
    const scene = cc.canvas?.scene?.id;
    if (!attacker || !target || !scene || attacker.id === target.id || cc.subscribed !== scene) return this.draw(null);
    const ann = cc.annotation(attacker.id, target.id);
    if (!ann) return this.draw(null);
    const key = `${attacker.id}/${target.id}/${ann.mode}/${cc.store.revision}`;
    if (key === this.pair) return undefined;
    this.pair = key;
    cc.link.send({ type: "cover.query", scene, attacker: attacker.id, target: target.id, attack: ann.mode, lines: true }, scene);
    return undefined;
  }

  /** A `cover.result` for the pair last asked about. @param {any} msg */
  onResult(msg) {
    const [attacker, target] = (this.pair ?? "").split("/");
    if (msg.annotation?.attacker !== attacker || msg.annotation?.target !== target) return;
    this.draw(msg.annotation.lines ?? []);
  }

  /** Draw (or clear, with null) the lines on the canvas's controls layer.
   * @param {any[] | null} lines */
  draw(lines) {
    const cc = this.cc;
    if (lines === null) this.pair = null;
    this.lines = lines;
    const layer = cc.canvas?.controls;
    const PIXI = cc.env.PIXI;
    if (!layer || !PIXI) return;
    let g = (layer.children ?? []).find((/** @type {any} */ c) => c.name === LAYER);
    if (!lines || lines.length === 0) {
      if (g) {
        layer.removeChild(g);
        g.destroy();
      }
      return;
    }
    if (!g) {
      g = new PIXI.Graphics();
      g.name = LAYER;
      g.eventMode = "none";
      layer.addChild(g);
    }
    g.clear();
    for (const line of lines) {
      g.lineStyle(3, line.blocked ? BLOCKED : CLEAR, 0.9);
      g.moveTo(line.start[0], line.start[1]);
      g.lineTo(line.end[0], line.end[1]);
    }
  }
}
