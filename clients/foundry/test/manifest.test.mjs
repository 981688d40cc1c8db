/**
 * The module installs from its manifest: module.json names every file Foundry loads, its
 * download is the zip `make foundry-zip` builds for this version, and every language file
 * has every key the code asks for.
 */

import assert from "node:assert/strict";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { describe, it } from "node:test";

import { VERSION } from "../scripts/link.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const manifest = JSON.parse(readFileSync(path.join(ROOT, "module.json"), "utf8"));

function sources(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory()
    ? sources(path.join(dir, e.name)) : e.name.endsWith(".mjs") ? [path.join(dir, e.name)] : []));
}

describe("module.json", () => {
  it("has url, manifest and a download named for its version", () => {
    assert.equal(manifest.id, "covercast");
    assert.equal(manifest.version, VERSION, "module.json and the client name agree");
    for (const key of ["url", "manifest", "download"]) assert.match(manifest[key], /^https:\/\//, key);
    assert.ok(manifest.download.endsWith(`/covercast-foundry-${VERSION}.zip`), manifest.download);
    assert.ok(manifest.manifest.endsWith("/module.json"));
    assert.equal(manifest.socket, true, "the relay needs the module socket");
  });

  it("names files that exist", () => {
    for (const file of [...manifest.esmodules, ...manifest.styles, ...manifest.languages.map((l) => l.path)]) {
      assert.ok(existsSync(path.join(ROOT, file)), file);
    }
  });

  it("has every string the code asks for, in every language", () => {
    const code = sources(path.join(ROOT, "scripts")).map((f) => readFileSync(f, "utf8")).join("\n");
    // t("Key.sub") and t(`Key.${x}`) calls; the template ones are checked by their prefix.
    const literal = new Set([...code.matchAll(/\bt\("([A-Za-z0-9_.]+)"/g)].map((m) => `COVERCAST.${m[1]}`));
    assert.ok(literal.size > 30);
    for (const { lang, path: file } of manifest.languages) {
      const strings = JSON.parse(readFileSync(path.join(ROOT, file), "utf8"));
      for (const key of literal) assert.ok(key in strings, `${lang}: ${key}`);
      for (const prefix of ["Degree", "Stat", "Mode", "Settings.applyMode"]) {
        assert.ok(Object.keys(strings).some((k) => k.startsWith(`COVERCAST.${prefix}.`)), `${lang}: ${prefix}`);
      }
      const en = JSON.parse(readFileSync(path.join(ROOT, "lang/en.json"), "utf8"));
      assert.deepEqual(Object.keys(strings).sort(), Object.keys(en).sort(), `${lang} has the same keys as en`);
    }
  });
});
