"""The package as a user installs it: a wheel built from this tree, installed (not editable)
into a fresh virtual environment outside the source tree.

- Alone (`pip install covercast`), it is the client library and the client commands: no
  numpy or shapely is installed or imported, `py.typed` ships, and `covercast serve` says in
  one line what to install.
- With the server (`pip install 'covercast[server]'`), `covercast serve` runs from anywhere
  and serves the overlay page and its files, which are package data (server/overlay).

Needs the package registry (or pip's cache) for the dependencies, like `make install`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the venv's bin folder, a working folder outside the source tree)."""
    base = tmp_path_factory.mktemp("wheel")
    built = _run(sys.executable, "-m", "build", "--wheel", "--outdir", base / "dist", ROOT,
                 cwd=base)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    # No setuptools warning (packages left out of the configuration, deprecations); the
    # environment's own notes (byte-compiling turned off, a pip index that is absent) aside.
    warnings = [line for line in (built.stdout + built.stderr).lower().splitlines()
                if "warning" in line and "byte-compiling is disabled" not in line
                and "location 'file:" not in line]
    assert warnings == []
    wheel = next((base / "dist").glob("covercast-*.whl"))
    venv = base / "venv"
    made = _run(sys.executable, "-m", "venv", venv, cwd=base)
    assert made.returncode == 0, made.stderr
    done = _run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel, cwd=base)
    assert done.returncode == 0, done.stderr
    yield venv / "bin", base
    # tmp_path_factory cleans up


def test_the_client_installs_alone(installed: tuple[Path, Path]) -> None:
    bin_, cwd = installed
    probe = _run(bin_ / "python", "-c",
                 "import sys, importlib.util, covercast.client, covercast.cli\n"
                 "from importlib import resources\n"
                 "print(sorted(m for m in ('numpy', 'shapely') if m in sys.modules),"
                 " importlib.util.find_spec('numpy') is None,"
                 " resources.files('covercast').joinpath('py.typed').is_file(),"
                 " covercast.client.__file__.startswith(sys.prefix))", cwd=cwd)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["[]", "True", "True", "True"]
    serve = _run(bin_ / "covercast", "serve", "--port", "0", cwd=cwd, timeout=60)
    assert serve.returncode == 2
    assert serve.stderr.strip() == ("error: the server needs numpy and shapely (numpy is "
                                    "missing): pip install 'covercast[server]'")


def test_the_installed_server_serves_the_overlay(installed: tuple[Path, Path]) -> None:
    bin_, cwd = installed
    wheel = next((cwd / "dist").glob("covercast-*.whl"))
    done = _run(bin_ / "python", "-m", "pip", "install", "--quiet", f"{wheel}[server]",
                cwd=cwd)
    assert done.returncode == 0, done.stderr
    server = subprocess.Popen([bin_ / "covercast", "serve", "--port", "0", "--state",
                               ":memory:"], cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        port = re.search(r"ws://127\.0\.0\.1:(\d+)", first)
        assert port, first
        base = f"http://127.0.0.1:{port.group(1)}"
        with urllib.request.urlopen(f"{base}/overlay?scene=demo", timeout=10) as reply:
            page = reply.read().decode()
            assert reply.status == 200 and "overlay.js" in page
        for name in ("overlay.js", "overlay.css", "hex.js"):
            with urllib.request.urlopen(f"{base}/overlay/{name}", timeout=10) as reply:
                assert reply.status == 200
                assert reply.read() == (ROOT / "clients" / "overlay" / name).read_bytes()
    finally:
        server.terminate()
        server.wait(10)
