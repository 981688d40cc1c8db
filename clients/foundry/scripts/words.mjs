/**
 * What an annotation says, in the table's language: the badge label, the chat text, the
 * modifiers as "+4 AC". Every string comes from `lang/*.json` through `game.i18n`.
 *
 * Rule of this module: words only; it decides nothing about which numbers apply (rolls.mjs).
 */

/**
 * A translator over Foundry's `game.i18n`: `t("Degree.cover")`, `t("FlankingWith", {who})`.
 * Keys are given without the `COVERCAST.` prefix.
 * @param {any} i18n Foundry's game.i18n (localize, format)
 * @returns {(key: string, data?: Record<string, string>) => string}
 */
export function translator(i18n) {
  return (key, data) => {
    const id = `COVERCAST.${key}`;
    if (!i18n) return id;
    return data ? i18n.format(id, data) : i18n.localize(id);
  };
}

const COLORS = {
  none: 0xffffff, soft: 0xfff3a0, lesser: 0xfff3a0, half: 0xfff3a0, partial: 0xffc870,
  cover: 0xffa040, standard: 0xffa040, improved: 0xff6040, greater: 0xff6040,
  three_quarters: 0xff6040, total: 0xa0a0a0,
};

/** A degree's name ("soft cover"), the ruleset's degree names translated.
 * @param {(key: string, data?: Record<string, string>) => string} t @param {string} degree */
export function degreeName(t, degree) {
  const key = `Degree.${degree}`;
  const name = t(key);
  return name === `COVERCAST.${key}` ? degree.replaceAll("_", "-") : name;
}

/** "+4 AC, +2 Reflex": a list of modifiers in words.
 * @param {(key: string, data?: Record<string, string>) => string} t
 * @param {{stat: string, value: number}[]} mods */
export function formatMods(t, mods) {
  return mods.map((m) => `${m.value >= 0 ? "+" : ""}${m.value} ${t(`Stat.${m.stat}`)}`).join(", ");
}

/**
 * An annotation in words: `label` for the token badge ("cover · flanked"), `text` for the
 * chat line ("cover (+4 AC, +2 Reflex); flanking with Rogue (+2 attack)"), and its degree.
 * @param {any} ann the annotation (protocol section 7.2)
 * @param {(key: string, data?: Record<string, string>) => string} t
 * @param {(id: string) => string} [nameOf]
 */
export function describe(ann, t, nameOf = (id) => id) {
  const degree = ann.loe ? ann.cover : "total";
  const short = degreeName(t, degree);
  const coverPhrase = degree === "total" ? t("Degree.totalLong") : short;
  const coverMods = ann.modifiers.filter((/** @type {any} */ m) => m.kind !== "flanking");
  const flankMods = ann.modifiers.filter((/** @type {any} */ m) => m.kind === "flanking");
  const flanking = Boolean(ann.flags?.flanking);
  let text = coverPhrase + (coverMods.length ? ` (${formatMods(t, coverMods)})` : "");
  if (flanking) {
    const who = (ann.flankers ?? []).map(nameOf).join(", ");
    const extra = [];
    if (flankMods.length) extra.push(formatMods(t, flankMods));
    if (ann.flags?.advantage) extra.push(t("Advantage"));
    text += `; ${who ? t("FlankingWith", { who }) : t("Flanking")}${extra.length ? ` (${extra.join(", ")})` : ""}`;
  }
  return {
    degree, flanking, mode: ann.mode, text,
    label: flanking ? `${short} · ${t("Flanked")}` : short,
    color: COLORS[degree] ?? 0xffffff,
  };
}
