"""The docs a newcomer reads: the README's two commands are the ones CI runs, every local
link and image in the README and docs/ points at a file that exists, and the covercast
commands the README shows are ones the CLI has."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from covercast.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "clients" / "foundry" / "README.md"]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line and not line.startswith("#") and not line.startswith("set ")
                and not line.startswith("cd ")]
    assert commands == ["make test"]


def test_local_links_and_images_exist() -> None:
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_readme_shows_only_commands_the_cli_has() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = set(sub.choices)
    shown = set(re.findall(r"(?:bin/|`)covercast (\w+)", (ROOT / "README.md").read_text()))
    assert shown >= {"watch", "move", "door", "query", "load", "serve", "record", "replay"}
    assert shown <= commands, shown - commands


def test_the_readme_is_short() -> None:
    # What a newcomer reads in two minutes; the rest lives in docs/.
    assert len((ROOT / "README.md").read_text().splitlines()) <= 140
