"""The allocator settings the server starts with (server/memory.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

CHECK = ("from server.memory import tune_allocator; "
         "print(tune_allocator(), tune_allocator())")


def _run(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         env={**os.environ, **env}, check=True, timeout=60)
    return out.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_applied_once_per_process_on_glibc() -> None:
    assert _run({"COVERCAST_TUNE_MALLOC": "1"}) == "True True"


def test_turned_off_by_the_environment() -> None:
    assert _run({"COVERCAST_TUNE_MALLOC": "0"}) == "False False"
