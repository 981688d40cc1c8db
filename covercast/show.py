"""What the `covercast` command prints: annotations as a person reads them at the table.

Rule of this module: pure functions from the protocol's plain data (dicts, as
`msgspec.to_builtins` makes them) to text; no I/O, nothing of the server. Positions are
printed in grid squares (the scene's grid size), never pixels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Reverse video around a changed row of `watch` on a terminal.
_MARK_ON, _MARK_OFF = "\x1b[7m", "\x1b[0m"


def modifiers_text(modifiers: Iterable[Mapping[str, Any]]) -> str:
    """`+4 ac, +2 reflex` (each modifier once, with the damage types it is limited to)."""
    parts = []
    for m in modifiers:
        only = f" vs {'/'.join(m['damage'])}" if m.get("damage") else ""
        parts.append(f"{m['value']:+d} {m['stat']}{only}")
    return ", ".join(parts)


def summary(ann: Mapping[str, Any]) -> str:
    """One cell of the watch table: the cover degree and its numbers, or why there are none
    (no line of effect, out of reach)."""
    if not ann["loe"]:
        return "total cover"
    if ann["mode"] != "ranged" and not ann["flags"].get("in_reach"):
        return "out of reach"
    mods = modifiers_text(ann["modifiers"])
    return str(ann["cover"]) + (f" ({mods})" if mods else "")


def render_table(table: Mapping[tuple[str, str, str], Mapping[str, Any]], revision: int,
                 changed: set[tuple[str, str]], *, attackers: Iterable[str] = (),
                 targets: Iterable[str] = (), color: bool = False) -> str:
    """The live cover table of `watch`: one row per attacker and target, ranged and melee
    side by side. Rows the last update changed start with `*` (and, with `color`, are shown
    in reverse video); `attackers` / `targets`, when given, keep only those rows."""
    only_a, only_t = set(attackers), set(targets)
    pairs = sorted({(a, t) for a, t, _ in table
                    if (not only_a or a in only_a) and (not only_t or t in only_t)})
    head = f" {'attacker':<10} {'target':<10} {'ranged':<40} {'melee':<40}"
    kept = [f"{what} {', '.join(sorted(ids))}"
            for what, ids in (("attackers", only_a), ("targets", only_t)) if ids]
    shown = "   showing " + "; ".join(kept) if kept else ""
    lines = [f"revision {revision}   (* = changed by the last update){shown}", head,
             "-" * len(head)]
    for a, t in pairs:
        ranged = table.get((a, t, "ranged"))
        melee = table.get((a, t, "melee"))
        hit = (a, t) in changed
        row = (f"{'*' if hit else ' '}{a:<10} {t:<10} {summary(ranged) if ranged else '-':<40} "
               f"{summary(melee) if melee else '-':<40}").rstrip()
        lines.append(f"{_MARK_ON}{row}{_MARK_OFF}" if hit and color else row)
    if not pairs:
        lines.append(" (no pair matches)" if only_a or only_t else " (no pairs yet)")
    return "\n".join(lines)


def _squares(point: Iterable[float], size: float) -> str:
    # Lines start a hair inside a corner (the crossing convention); squares to 0.01.
    x, y = point
    return f"({round(x / size, 2):g}, {round(y / size, 2):g})"


def render_query(answer: Mapping[str, Any], scene: Mapping[str, Any], ruleset: str) -> str:
    """`covercast query`: one pair's cover as a GM reads it: the degree, the numbers and
    why, the flags that are true, and the traced lines in grid squares."""
    ann = answer["annotation"]
    size = float(scene["grid"]["size"])
    distance = answer.get("distance")
    head = (f"{ann['attacker']} -> {ann['target']}, {ann['mode']} attack "
            f"(scene {answer['scene']}, revision {answer['revision']}, {ruleset})"
            + (f", {distance:g} {scene['grid'].get('units', 'ft')} apart"
               if distance is not None else ""))
    if not ann["loe"]:
        cover = "total: no line of effect, it cannot be targeted"
    else:
        cover = str(ann["cover"])
    out = [head, f"  cover:     {cover}"]
    mods = ann["modifiers"]
    out.append(f"  modifiers: {modifiers_text(mods) if mods else 'none'}")
    # Each reason once, after the numbers it explains.
    by_reason: dict[str, list[Mapping[str, Any]]] = {}
    for m in mods:
        by_reason.setdefault(m.get("reason") or "", []).append(m)
    for reason, group in by_reason.items():
        if reason:
            out.append(f"    {modifiers_text(group)}: {reason}")
    true = sorted(name for name, on in ann["flags"].items() if on)
    out.append(f"  true:      {', '.join(true) if true else 'nothing'}")
    if ann.get("flankers"):
        out.append(f"  flanked with: {', '.join(ann['flankers'])}")
    if ann.get("visible") is not None:
        out.append(f"  visible:   {ann['visible']:.0%} of the target")
    lines = ann.get("lines")
    if lines is not None:
        blocked = sum(1 for line in lines if line["blocked"])
        out.append(f"  lines:     {len(lines)} traced, {blocked} blocked (in squares)")
        for line in lines:
            what = [f"wall {w}" for w in line.get("walls", [])] + [
                f"token {t}" for t in line.get("tokens", [])] + [
                f"region {r}" for r in line.get("regions", [])]
            state = ("blocked by " + ", ".join(what) if line["blocked"] else
                     "clear" + (f" (through {', '.join(what)})" if what else ""))
            if line["blocked"] and not what:
                state = "blocked"
            out.append(f"    {_squares(line['start'], size)} -> "
                       f"{_squares(line['end'], size)}  {state}")
    return "\n".join(out)
