/**
 * Foundry's `game.i18n` for the tests: `localize` and `format` over one of the module's
 * language files, as Foundry reads them (a missing key comes back as the key itself, and
 * `format` fills `{name}` placeholders).
 */

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

const LANG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../lang");

export function i18n(lang = "en") {
  const strings = JSON.parse(readFileSync(path.join(LANG, `${lang}.json`), "utf8"));
  return {
    lang,
    has: (key) => key in strings,
    localize: (key) => strings[key] ?? key,
    format: (key, data = {}) => (strings[key] ?? key).replace(/\{([^}]+)\}/g, (_, k) => (k in data ? String(data[k]) : `{${k}}`)),
  };
}
