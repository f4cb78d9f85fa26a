"""Idle memory of ``dralet run``, one row per driver.

Each driver runs as a real process (``python -m dralet.cli.main run``, as a container
starts it) against the API stand-in (plain HTTP: in a cluster its TLS context and CA
come on top), with the kubelet emulator registering it; once its
ResourceSlice is published and ``--settle`` seconds have passed, its memory is read from
``/proc/<pid>/status`` (VmRSS, and its anonymous and file-backed parts) and
``smaps_rollup`` (Pss). Its modules are loaded from bytecode, as in the image (compiled
there at build): the drivers write theirs to a cache of this run's own in an unmeasured
first start of each. Drivers:

- ``example``: the simulated GPUs (four);
- ``hostdev``: five device nodes made with mknod (needs CAP_MKNOD; the row is left out
  without it);
- ``nvidia``: the NVIDIA driver over the tests' fake NVML (a DGX H100), its device nodes
  made with mknod.

``--src NAME=DIR`` (repeatable) runs each driver from another source tree too (its
``src`` put first on the driver's ``PYTHONPATH``), alternating the trees within each
round so that both see the machine alike; ``--as-deployed`` adds the flags the Helm chart
gives every driver (a gRPC health port, a metrics port, JSON logs; ports chosen by the
kernel here); ``--importtime DIR`` writes each driver's
``-X importtime`` log there (from a run of its own, not one measured).

    .venv/bin/python benchmarks/bench_idle.py [--rounds 3] [--settle 3]
        [--drivers example,hostdev,nvidia] [--src base=/path/to/other/tree]
        [--as-deployed] [--importtime DIR]

It prints a table (medians, with the smallest and largest value); it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.harness.targets import TARGETS  # noqa: E402

from dralet.apiserver import ApiServer  # noqa: E402
from dralet.cluster import ControlPlane  # noqa: E402
from dralet.cluster.process import DriverPaths, DriverProcess, driver_args  # noqa: E402
from dralet.kubelet import KubeletEmulator  # noqa: E402
from dralet.node.settings import DriverSettings  # noqa: E402

DRIVERS = ("example", "hostdev", "nvidia")
DEVICES = {"example": 4, "hostdev": 5, "nvidia": 8}
KUBERNETES = "1.37"
REGISTERED_WITHIN = 120.0
PUBLISHED_WITHIN = 60.0
POLL = 0.1
FIELDS = ("VmRSS", "RssAnon", "RssFile", "Pss")
AS_DEPLOYED = ("--health-port", "0", "--metrics-port", "0", "--log-format", "json")
"""What deploy/chart/dralet/templates/daemonset.yaml adds to every driver's arguments
(beside the paths and --in-cluster), its fixed ports made free ones."""


@dataclass(frozen=True)
class Tree:
    name: str
    src: Path | None
    """The source dir put first on the driver's PYTHONPATH; None: this checkout."""


def memory_mib(pid: int) -> dict[str, float]:
    """The process's VmRSS, RssAnon, RssFile (proc(5) ``status``) and Pss
    (``smaps_rollup``), in MiB."""
    values: dict[str, float] = {}
    for name in ("status", "smaps_rollup"):
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in FIELDS:
                values[key] = int(rest.split()[0]) / 1024
    return values


def can_mknod(directory: Path) -> bool:
    probe = directory / ".mknod-probe"
    try:
        os.mknod(probe, 0o020600, os.makedev(1, 3))
    except PermissionError:
        return False
    probe.unlink()
    return True


async def idle_driver(
    api: ApiServer,
    root: Path,
    driver: str,
    tree: Tree,
    *,
    pycache: Path,
    settle: float,
    flags: Sequence[str] = (),
    importtime: bool = False,
) -> tuple[dict[str, float], str]:
    """Start ``driver`` under ``root``; its memory once idle, and its log."""
    root.mkdir(parents=True)  # noqa: ASYNC240
    target_class = TARGETS[driver]
    paths = DriverPaths(root, driver_name=target_class.driver_name)
    settings = DriverSettings(
        driver_name=paths.driver_name,
        node_name=paths.node_name,
        plugin_dir=paths.plugin_dir,
        registry_dir=paths.registry_dir,
        cdi_dir=paths.cdi_dir,
        backend_state_dir=paths.state_dir,
    )
    target = target_class(settings, strict=False)
    target.setup(root, DEVICES[driver])
    selection = target.driver_args(root)
    at = selection.index("--driver")
    # Bytecode cached in the run's own directory, written even where the caller's
    # environment says not to (an empty value unsets it).
    env = {**target.env(root), "PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(pycache)}
    if tree.src is not None:
        inherited = env.get("PYTHONPATH", "").split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join([str(tree.src), *filter(None, inherited)])
    if importtime:
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    process = DriverProcess(
        driver_args(
            paths,
            api_url=api.url,
            gpus=DEVICES[driver],
            driver=selection[at + 1],
            extra=[*selection[:at], *selection[at + 2 :], *flags],
        ),
        log_path=root / "driver.log",
        env=env,
        mode="exec",
    )
    cluster = ControlPlane(api, driver_name=paths.driver_name, node_name=paths.node_name)
    cluster.add_node()
    kubelet = KubeletEmulator(paths.registry_dir, kubelet_version=KUBERNETES)
    process.start()
    try:
        await kubelet.wait_for_plugin(paths.driver_name, within=REGISTERED_WITHIN)
        deadline = time.monotonic() + PUBLISHED_WITHIN
        while not [s for s in cluster.slices() if s["spec"]["driver"] == paths.driver_name]:
            if time.monotonic() > deadline or not process.alive:
                raise RuntimeError(f"{driver}: no ResourceSlice\n{process.log()}")
            await asyncio.sleep(POLL)  # the stand-in's store, polled
        await asyncio.sleep(settle)
        assert process.pid is not None
        return memory_mib(process.pid), process.log()
    finally:
        await kubelet.close()
        await process.terminate()


def spread(samples: Sequence[float]) -> str:
    return f"{statistics.median(samples):6.1f} ({min(samples):.1f}-{max(samples):.1f})"


async def run(args: argparse.Namespace, root: Path) -> None:
    trees = [Tree("this", None), *args.src]
    drivers = [d for d in args.drivers.split(",") if d]
    if {"hostdev", "nvidia"} & set(drivers) and not can_mknod(root):
        print("making device nodes needs CAP_MKNOD: hostdev and nvidia left out")
        drivers = [d for d in drivers if d == "example"]
    samples: dict[tuple[str, str], list[dict[str, float]]] = {}
    flags = AS_DEPLOYED if args.as_deployed else ()
    async with ApiServer(kubernetes_version=KUBERNETES) as api:
        for driver in drivers:
            for tree in trees:
                await idle_driver(
                    api, root / f"warm-{driver}-{tree.name}", driver, tree,
                    pycache=root / f"pycache-{tree.name}", settle=0, flags=flags,
                )  # fmt: skip
        if args.importtime is not None:
            args.importtime.mkdir(parents=True, exist_ok=True)
            for driver in drivers:
                for tree in trees:
                    _, log = await idle_driver(
                        api, root / f"imports-{driver}-{tree.name}", driver, tree,
                        pycache=root / f"pycache-{tree.name}", settle=0, flags=flags,
                        importtime=True,
                    )  # fmt: skip
                    (args.importtime / f"{driver}-{tree.name}.log").write_text(log)
        for round_ in range(args.rounds):
            for driver in drivers:
                # Alternate which tree goes first, so neither always follows the other.
                order = trees if round_ % 2 == 0 else trees[::-1]
                for tree in order:
                    where = root / f"{round_}-{driver}-{tree.name}"
                    memory, _ = await idle_driver(
                        api, where, driver, tree,
                        pycache=root / f"pycache-{tree.name}", settle=args.settle, flags=flags,
                    )  # fmt: skip
                    shutil.rmtree(where, ignore_errors=True)
                    samples.setdefault((driver, tree.name), []).append(memory)
    width = max(len(f"{d} ({t.name})") for d in drivers for t in trees)
    print(
        f"\nidle memory, MiB: median (min-max) of {args.rounds} rounds, "
        f"{args.settle:g} s after the first ResourceSlice"
        + (f", with {' '.join(flags)}" if flags else "")
    )
    print(f"{'driver':{width}}  " + "  ".join(f"{field:>18}" for field in FIELDS))
    for driver in drivers:
        for tree in trees:
            rows = samples[(driver, tree.name)]
            cells = [f"{spread([row[field] for row in rows]):>18}" for field in FIELDS]
            print(f"{driver + ' (' + tree.name + ')':{width}}  " + "  ".join(cells))


def tree(value: str) -> Tree:
    name, _, directory = value.partition("=")
    src = Path(directory).resolve() / "src"
    if not name or not (src / "dralet").is_dir():
        raise argparse.ArgumentTypeError(f"expected NAME=DIR with DIR/src/dralet: {value}")
    return Tree(name, src)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--drivers", default=",".join(DRIVERS))
    parser.add_argument("--src", type=tree, action="append", default=[])
    parser.add_argument("--importtime", type=Path, default=None)
    parser.add_argument("--as-deployed", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dralet-idle-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
