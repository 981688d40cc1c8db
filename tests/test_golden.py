"""Runs every golden scenario file (tests/golden/**/*.json) as its own test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden_runner import (
    GOLDEN_DIR,
    evaluate_areas,
    evaluate_case,
    evaluate_friendly_fire,
    ff_mismatches,
    golden_files,
    load_case,
    mismatches,
)


@pytest.mark.parametrize("path", golden_files(),
                         ids=lambda p: str(p.relative_to(GOLDEN_DIR)))
def test_golden(path: Path) -> None:
    case = load_case(path)
    failures = []
    for query, actual in evaluate_case(case):
        for problem in mismatches(query["expect"], actual):
            failures.append(f"{query['attacker']} -> {query['target']} "
                            f"({query.get('attack', 'ranged')}): {problem}")
    for area, hits in evaluate_areas(case):
        want = {e["token"] for e in area["expect"]}
        if want != set(hits):
            failures.append(f"area {area['template']}: affected {sorted(hits)}, "
                            f"expected {sorted(want)}")
        for entry in area["expect"]:
            if entry["token"] in hits:
                failures.extend(f"area {area['template']} on {entry['token']}: {problem}"
                                for problem in mismatches(entry, hits[entry["token"]]))
    for entry, attacks in evaluate_friendly_fire(case):
        if len(attacks) != len(entry["expect"]):
            failures.append(f"friendly fire: {len(attacks)} attacks, expected "
                            f"{len(entry['expect'])}")
        for k, (want, got) in enumerate(zip(entry["expect"], attacks, strict=False)):
            failures.extend(f"friendly fire attack {k}: {problem}"
                            for problem in ff_mismatches(want, got))
    assert not failures, f"{case['description']}\n" + "\n".join(failures)


def test_there_are_golden_cases() -> None:
    assert len(golden_files()) >= 10
