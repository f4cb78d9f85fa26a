"""Driver processes: start ``dralet run`` as a real separate process, SIGKILL it, start
it again.

Two ways to start one. ``exec`` runs ``python -m dralet.cli.main run ...`` like a
container would (about a second and a half of imports). ``fork`` (the default) forks
the process from a fork server that imported the driver stack once, so a crash suite
can kill and restart drivers hundreds of times; the child is still a separate process
with its own pid, sockets and files, started before any gRPC object exists in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["DriverPaths", "DriverProcess", "driver_args"]

PRELOAD = ["dralet.cli.run", "dralet.kube.client", "dralet.kube.claims", "dralet.node.publisher"]
EXIT_POLL_INTERVAL = 0.01

_context: Any = None


def _fork_context() -> Any:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _child_main(argv: list[str], env: dict[str, str], log_path: str) -> None:
    os.environ.update(env)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # Run the program's entry point, as ``python -m dralet.cli.main`` would.
    sys.argv = ["dralet", *argv]
    try:
        runpy.run_module("dralet.cli.main", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        os._exit(exc.code if isinstance(exc.code, int) else 1)
    os._exit(0)


@dataclass(frozen=True)
class DriverPaths:
    """Where one simulated node keeps a driver's files."""

    root: Path
    driver_name: str = "gpu.example.com"
    node_name: str = "node-a"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugins" / self.driver_name

    @property
    def registry_dir(self) -> Path:
        return self.root / "plugins_registry"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def state_dir(self) -> Path:
        return self.root / "backend"

    @property
    def checkpoint(self) -> Path:
        """Where releases before the record database kept their single checkpoint file."""
        return self.plugin_dir / "checkpoint.json"

    @property
    def store(self) -> Path:
        """The claim record database."""
        return self.plugin_dir / "claims.db"

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver_name}-reg.sock"


_API_FLAGS = frozenset({"--api-url", "--kubeconfig", "--in-cluster"})
"""Flags of ``dralet run`` that point it at an API server; without one it runs standalone."""


_EXAMPLE_DRIVERS = frozenset({"example", "example-strict"})


def driver_args(
    paths: DriverPaths,
    *,
    api_url: str | None,
    gpus: int = 4,
    extra: Sequence[str] = (),
    driver: str = "example",
    driver_config: Path | None = None,
) -> list[str]:
    """The ``dralet run`` arguments for ``driver`` on ``paths``: the example driver (or
    ``example-strict``) with ``gpus`` simulated GPUs, or any other driver with its
    ``driver_config`` file."""
    args = [
        "run",
        "--driver", driver,
        "--driver-name", paths.driver_name,
        "--node-name", paths.node_name,
        "--plugin-dir", str(paths.plugin_dir),
        "--registry-dir", str(paths.registry_dir),
        "--cdi-dir", str(paths.cdi_dir),
        "--state-dir", str(paths.state_dir),
    ]  # fmt: skip
    if driver in _EXAMPLE_DRIVERS:
        args += ["--gpus", str(gpus)]
    if driver_config is not None:
        args += ["--driver-config", str(driver_config)]
    if api_url is not None:
        args += ["--api-url", api_url]
    elif not any(arg.split("=")[0] in _API_FLAGS for arg in extra):
        args.append("--standalone")
    return [*args, *extra]


@dataclass
class DriverProcess:
    """One driver process; start it, SIGKILL it, SIGTERM it, start it again."""

    args: list[str]
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    mode: Literal["fork", "exec"] = "fork"
    _process: Any = field(default=None, repr=False)
    _popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, *, env: Mapping[str, str] | None = None) -> None:
        if self.alive:
            raise RuntimeError("driver process is already running")
        merged = {**self.env, **(env or {})}
        if self.mode == "exec":
            log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
            with log:
                self._popen = subprocess.Popen(
                    [sys.executable, "-m", "dralet.cli.main", *self.args],
                    env={**os.environ, **merged},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            return
        process = _fork_context().Process(
            target=_child_main, args=(self.args, merged, str(self.log_path)), daemon=False
        )
        process.start()
        self._process = process

    @property
    def pid(self) -> int | None:
        if self._popen is not None:
            return self._popen.pid
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None
        return self._process is not None and bool(self._process.is_alive())

    def returncode(self) -> int | None:
        if self._popen is not None:
            return self._popen.poll()
        if self._process is None:
            return None
        code = self._process.exitcode
        return int(code) if code is not None else None

    async def wait(self, *, within: float) -> int | None:
        """Wait for the process to exit; its return code (-9 after SIGKILL), or None."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self._popen is not None:
                code = self._popen.poll()
                if code is not None:
                    return code
            elif self._process is not None:
                self._process.join(0)
                if self._process.exitcode is not None:
                    return int(self._process.exitcode)
            else:
                return None
            await asyncio.sleep(EXIT_POLL_INTERVAL)
        return None

    async def kill(self) -> int | None:
        """SIGKILL, like a node's OOM killer or a crash; no cleanup runs."""
        if self.pid is not None and self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        return await self.wait(within=10)

    async def terminate(self, *, within: float = 15.0) -> int | None:
        """SIGTERM and wait for the staged shutdown; SIGKILL if it overstays."""
        if self.pid is not None and self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            code = await self.wait(within=within)
            if code is not None:
                return code
        return await self.kill()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
