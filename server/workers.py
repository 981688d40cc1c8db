"""`covercast serve --workers N`: N worker processes behind one front process.

Rule of this module: start, watch and stop processes (an edge module: the only one that
imports multiprocessing). Worker k runs today's server (a Core behind server/app.py) on a
Unix socket in a private folder and owns the scenes whose id hashes to k
(server/routing.py); the front process (server/front.py) accepts the clients. A worker
that dies is started again on the same socket (its clients are closed with 1011 and
reconnect; its scenes come back as the state store keeps them). A worker whose front
process is gone (killed, even with SIGKILL) stops by itself within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from server.admission import EdgeLimits
from server.routing import owner

log = logging.getLogger("covercast.workers")

#: Seconds a worker has to import the server and listen.
START_S = 120.0
#: Seconds a stopped worker has to end before it is killed.
STOP_S = 5.0


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """What every worker is started with (the `covercast serve` options it needs)."""

    workers: int
    access_token: str | None
    player_token: str | None
    overlay_token: str | None
    state: str
    demo: Any  # the demo scene's SceneLoad, or None
    limits: EdgeLimits
    #: NATS mode (server/mesh.py): the servers' URL, and JetStream's replicas.
    nats: str | None = None
    replicas: int = 3
    #: The state store's sync mode (server/store.py), and whether the demo scene replaces
    #: a stored one (`--fresh-demo`).
    sync: str = "normal"
    fresh_demo: bool = False


def worker_limits(limits: EdgeLimits) -> EdgeLimits:
    """A worker's limits: the front's, except that every link comes from the front itself
    (one address), so the per-address cap is the front's business, not the worker's."""
    return replace(limits, max_per_address=limits.max_connections)


def _orphaned(parent: int) -> None:
    """Leave when the front process is gone (its children are then re-parented)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def _worker_main(k: int, path: str, config: WorkerConfig, ready: Connection,
                 parent: int) -> None:
    """A worker process: the scenes hashing to `k`, served on the Unix socket `path`."""
    threading.Thread(target=_orphaned, args=(parent,), daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the front's ^C stops it, by SIGTERM
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s worker{k} %(name)s %(message)s")
    # One line per link opened and closed would double the front's own.
    logging.getLogger("websockets").setLevel(logging.WARNING)
    from server.app import run
    from server.session import Core
    from server.store import Store, StoreError

    store = Store(config.state, sync=config.sync)
    core = Core(access_token=config.access_token, player_token=config.player_token,
                overlay_token=config.overlay_token, store=store, restore=False,
                keep_scenes=config.nats is None)
    if config.nats is None:
        # Every worker opens the one state file; each brings back the scenes it owns only
        # (on NATS the scenes live in JetStream and follow their leases instead).
        try:
            core.restore([sid for sid in store.scene_ids()
                          if owner(sid, config.workers) == k])
        except StoreError as exc:  # damaged since the front read it: one line, no trace
            print(f"error: {exc}", file=sys.stderr, flush=True)
            sys.exit(1)
        if config.demo is not None and owner(config.demo.scene.id, config.workers) == k:
            core.preload(config.demo, keep_stored=not config.fresh_demo)

    def up(_: object) -> None:
        ready.send(True)
        ready.close()

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        if config.nats is not None:
            from server.mesh import run_worker

            await run_worker(config.nats, core, config.replicas, ready=up)
        else:
            await run(core, "", 0, up, worker_limits(config.limits), unix=path, marks=True)

    with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
        asyncio.run(main())
    store.close()


class Workers:
    """N worker processes, each on a Unix socket of its own (`sockets`)."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.folder = tempfile.mkdtemp(prefix="covercast-workers-")  # mode 0700
        self.sockets = [os.path.join(self.folder, f"w{k}.sock") for k in range(config.workers)]
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: list[BaseProcess | None] = [None] * config.workers
        self._stopping = False

    def _spawn(self, k: int) -> tuple[BaseProcess, Connection]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.sockets[k])
        receiver, sender = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_worker_main, name=f"covercast-worker-{k}",
                                 args=(k, self.sockets[k], self.config, sender, os.getpid()),
                                 daemon=False)
        proc.start()
        sender.close()
        return proc, receiver

    def _wait(self, k: int, proc: BaseProcess, pipe: Connection) -> None:
        if not pipe.poll(START_S) or not pipe.recv():
            proc.kill()
            raise RuntimeError(f"worker {k} did not start (exit code {proc.exitcode})")
        pipe.close()
        self._procs[k] = proc

    def start(self) -> None:
        """Start every worker and wait until each one listens."""
        started = [self._spawn(k) for k in range(self.config.workers)]
        try:
            for k, (proc, pipe) in enumerate(started):
                try:
                    self._wait(k, proc, pipe)
                except EOFError:
                    proc.join(1)
                    raise RuntimeError(f"worker {k} did not start (exit code "
                                       f"{proc.exitcode})") from None
        except BaseException:
            for proc, _ in started:
                proc.kill()
            raise

    async def supervise(self, died: Callable[[int], None] | None = None) -> None:
        """Start again any worker that dies, until cancelled."""
        loop = asyncio.get_running_loop()
        while not self._stopping:
            await asyncio.sleep(0.5)
            for k, proc in enumerate(self._procs):
                if proc is None or proc.is_alive() or self._stopping:
                    continue
                log.error("worker %d (pid %s) died with exit code %s; starting it again",
                          k, proc.pid, proc.exitcode)
                if died is not None:
                    died(k)
                self._procs[k] = None
                fresh, pipe = self._spawn(k)
                try:
                    await loop.run_in_executor(None, self._wait, k, fresh, pipe)
                except (RuntimeError, EOFError) as exc:
                    log.error("%s", exc)

    def pids(self) -> list[int | None]:
        return [p.pid if p is not None else None for p in self._procs]

    def stop(self) -> None:
        """Stop every worker (SIGTERM, then SIGKILL after STOP_S) and remove the sockets."""
        self._stopping = True
        procs = [p for p in self._procs if p is not None]
        for p in procs:
            if p.is_alive() and p.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
        end = time.monotonic() + STOP_S
        for p in procs:
            p.join(max(0.0, end - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1)
        shutil.rmtree(self.folder, ignore_errors=True)
