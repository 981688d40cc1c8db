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


COLLECTOR = ("import gc; from server.memory import tune_collector; "
             "print(tune_collector(), tune_collector(), gc.get_threshold()[0])")


def _collector(env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "COVERCAST_GC_GEN0"}
    out = subprocess.run([sys.executable, "-c", COLLECTOR], capture_output=True, text=True,
                         env={**clean, **env}, check=True, timeout=60)
    return out.stdout.strip()


def test_collector_threshold_set_once_per_process() -> None:
    # The young generation's threshold: the module's by default, another by the
    # environment, Python's own with 0 or with a value that is not a whole number.
    from server.memory import GC_GEN0

    assert _collector({}) == f"{GC_GEN0} {GC_GEN0} {GC_GEN0}"
    assert _collector({"COVERCAST_GC_GEN0": "5000"}) == "5000 5000 5000"
    assert _collector({"COVERCAST_GC_GEN0": "0"}) == "700 700 700"
    assert _collector({"COVERCAST_GC_GEN0": "lots"}) == "700 700 700"
    assert _collector({"COVERCAST_GC_GEN0": "-3"}) == "700 700 700"
