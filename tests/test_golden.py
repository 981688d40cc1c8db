"""Runs every golden scenario file (tests/golden/**/*.json) as its own test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden_runner import GOLDEN_DIR, evaluate_case, golden_files, load_case, mismatches


@pytest.mark.parametrize("path", golden_files(),
                         ids=lambda p: str(p.relative_to(GOLDEN_DIR)))
def test_golden(path: Path) -> None:
    case = load_case(path)
    failures = []
    for query, actual in evaluate_case(case):
        for problem in mismatches(query["expect"], actual):
            failures.append(f"{query['attacker']} -> {query['target']} "
                            f"({query.get('attack', 'ranged')}): {problem}")
    assert not failures, f"{case['description']}\n" + "\n".join(failures)


def test_there_are_golden_cases() -> None:
    assert len(golden_files()) >= 10
