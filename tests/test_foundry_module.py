"""The Foundry VTT module (clients/foundry/) under node's own test runner, against the real server.

The node suite starts `covercast serve` itself (this virtualenv's, passed as COVERCAST_BIN),
because one of its steps kills the server and restarts it on the same port to check that the
module reconnects and resynchronises. Skipped only when `node` is not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "clients" / "foundry" / "test"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NODE is None, reason="node is not installed (the Foundry module is tested with node --test)")


def _websocket_flags(node: str) -> list[str]:
    """Node 22+ has a global WebSocket; node 20 needs --experimental-websocket."""
    probe = "process.exit(typeof WebSocket === 'function' ? 0 : 1)"
    for flags in ([], ["--experimental-websocket"]):
        if subprocess.run([node, *flags, "-e", probe], capture_output=True).returncode == 0:
            return flags
    pytest.fail(f"{node} has no WebSocket, even with --experimental-websocket (node 20+ needed)")


def _covercast() -> str:
    beside = Path(sys.executable).with_name("covercast")
    found = str(beside) if beside.exists() else shutil.which("covercast")
    assert found, "the covercast command is not installed (make install)"
    return found


def test_foundry_module_scripted_session() -> None:
    assert NODE is not None
    files = sorted(str(p) for p in TESTS.glob("*.test.mjs"))
    assert files, f"no node tests under {TESTS}"
    env = {**os.environ, "COVERCAST_BIN": _covercast()}
    result = subprocess.run(
        [NODE, *_websocket_flags(NODE), "--test", "--test-reporter=tap", *files],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    report = result.stdout[-8000:] + result.stderr[-4000:]
    assert result.returncode == 0, report
    counts = {k: int(v) for k, v in re.findall(r"^# (pass|fail|skipped|cancelled) (\d+)$",
                                                result.stdout, re.MULTILINE)}
    # A suite skipped for want of WebSocket or server would pass silently: refuse that.
    assert counts.get("skipped") == 0 and counts.get("fail") == 0, report
    assert counts.get("pass", 0) >= 20, report
