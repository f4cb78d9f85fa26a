"""``dralet demo``: one pod's claim lifecycle on this machine, no cluster needed.

Starts the API stand-in, the example driver as a real separate process and the kubelet
emulator; plays the scheduler (allocates a claim) and the kubelet (prepare, prepare
again, SIGKILL the driver, restart, prepare again, unprepare, unprepare again), printing
the CDI spec and the driver's state at each step. Exits 1 if any invariant broke.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml

from dralet import releases
from dralet.apiserver import ApiServer
from dralet.cli import exits, options
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.drivers.example.gpus import held_devices
from dralet.kubelet import KubeletClaim, KubeletEmulator, PluginConnection, PrepareResult

__all__ = ["command", "run_demo"]

DRIVER = "gpu.example.com"
SLICE_WAIT = 10.0
POLL = 0.05
FINALIZER_WAIT = 10.0
"""How long the demo waits for the finalizer removal an unprepare owes after its answer."""


async def _eventually(condition: Callable[[], bool], within: float) -> bool:
    """Whether ``condition`` holds within ``within`` seconds (polled every ``POLL``), as
    the slices are waited for."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(POLL)
    return condition()


@dataclass
class Check:
    what: str
    ok: bool


@dataclass
class Step:
    title: str
    checks: list[Check] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


class Narrator:
    """Prints each step as it happens (text) or collects them for ``-o json``."""

    def __init__(self, *, fmt: str, echo: Callable[[str], None]) -> None:
        self.fmt = fmt
        self.echo = echo
        self.steps: list[Step] = []

    def step(self, title: str) -> Step:
        step = Step(title)
        self.steps.append(step)
        if self.fmt == "text":
            self.echo(click.style(f"\n[{len(self.steps)}] {title}", bold=True))
        return step

    def detail(self, step: Step, text: str) -> None:
        step.details.append(text)
        if self.fmt == "text":
            for line in text.splitlines():
                self.echo(f"    {line}")

    def check(self, step: Step, what: str, ok: bool) -> bool:
        step.checks.append(Check(what, ok))
        if self.fmt == "text":
            mark = click.style("ok  ", fg="green") if ok else click.style("FAIL", fg="red")
            self.echo(f"  {mark} {what}")
        return ok

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps)


def _state(paths: DriverPaths) -> dict[str, Any]:
    """The driver's durable state: checkpoint records and the backend's in-use map."""
    claims: dict[str, Any] = {}
    if paths.checkpoint.exists():
        data = json.loads(json.loads(paths.checkpoint.read_text())["data"])
        claims = {uid: r["state"] for uid, r in data["claims"].items()}
    return {"checkpoint": claims, "gpus in use": held_devices(paths.state_dir)}


def _spec_files(paths: DriverPaths) -> list[Path]:
    return sorted(paths.cdi_dir.glob("*.json")) if paths.cdi_dir.exists() else []


def _summary(result: PrepareResult, ref: KubeletClaim) -> str:
    entry = result.claims.get(ref.uid)
    if entry is None:
        return "no entry for the claim"
    if entry.error:
        return f"error: {entry.error}"
    return "\n".join(
        f"{d.device_name} (pool {d.pool_name}, request {','.join(d.request_names)}) -> "
        f"{', '.join(d.cdi_device_ids)}"
        for d in entry.devices
    )


async def _wait_for_slices(cluster: ControlPlane) -> list[dict[str, Any]]:
    deadline = time.monotonic() + SLICE_WAIT
    while time.monotonic() < deadline:
        slices = cluster.slices()
        if slices:
            return slices
        await asyncio.sleep(POLL)
    return []


DRIVER_LOG_TAIL_LINES = 20
"""Lines of the driver's log shown when a check failed and the log is not kept."""


async def run_demo(
    work_dir: Path,
    *,
    kubernetes_version: str,
    fmt: str,
    echo: Callable[[str], None],
    keep_files: bool = True,
) -> Narrator:
    say = Narrator(fmt=fmt, echo=echo)
    paths = DriverPaths(work_dir / "node")
    async with ApiServer(kubernetes_version=kubernetes_version) as api:
        cluster = ControlPlane(api, driver_name=DRIVER, node_name=paths.node_name)
        cluster.add_node()
        cluster.add_device_class()
        driver = DriverProcess(
            driver_args(paths, api_url=api.url), log_path=work_dir / "driver.log", mode="exec"
        )
        kubelet = KubeletEmulator(paths.registry_dir, kubelet_version=kubernetes_version)
        try:
            await _lifecycle(say, paths, api, cluster, driver, kubelet)
        finally:
            await kubelet.close()
            await driver.terminate()
        if fmt == "text":
            _point_at_driver_log(say, work_dir / "driver.log", keep_files=keep_files, echo=echo)
    return say


def _point_at_driver_log(
    say: Narrator, log_path: Path, *, keep_files: bool, echo: Callable[[str], None]
) -> None:
    """Name the log only where it will still exist; else show its end if something failed."""
    if keep_files:
        echo(f"\nDriver log: {log_path}")
        return
    if any(not c.ok for s in say.steps for c in s.checks) and log_path.is_file():
        tail = log_path.read_text(errors="replace").splitlines()[-DRIVER_LOG_TAIL_LINES:]
        echo("\nEnd of the driver's log:")
        for line in tail:
            echo(f"    {line}")
    echo("\nThe node's files were removed; --work-dir DIR keeps them, with the driver's log.")


REGISTRATION_TIMEOUT_S = 30.0
DRIVER_EXIT_POLL_S = 0.1


class DemoError(click.ClickException):
    """The demo could not go on (the driver died, say); one line, exit 1."""


async def _registered_or_exited(
    driver: DriverProcess, kubelet: KubeletEmulator
) -> PluginConnection:
    """Wait for registration, but stop at once if the driver process exits meanwhile."""
    registration = asyncio.ensure_future(
        kubelet.wait_for_plugin(DRIVER, within=REGISTRATION_TIMEOUT_S)
    )
    try:
        while not registration.done():
            if not driver.alive:
                lines = [line for line in driver.log().splitlines() if line.strip()]
                reason = lines[-1] if lines else f"exit status {driver.returncode()}"
                raise DemoError(f"the driver exited before it registered: {reason}")
            await asyncio.wait({registration}, timeout=DRIVER_EXIT_POLL_S)
        return registration.result()
    finally:
        registration.cancel()


async def _start(
    say: Narrator, step: Any, driver: DriverProcess, kubelet: KubeletEmulator
) -> PluginConnection:
    driver.start()
    plugin = await _registered_or_exited(driver, kubelet)
    info = plugin.info
    say.detail(
        step,
        f"pid {driver.pid}; GetInfo: type={info.type} name={info.name}\n"
        f"endpoint={info.endpoint}\nsupported_versions={list(info.supported_versions)}\n"
        f"kubelet picked {plugin.service}",
    )
    return plugin


async def _lifecycle(
    say: Narrator,
    paths: DriverPaths,
    api: ApiServer,
    cluster: ControlPlane,
    driver: DriverProcess,
    kubelet: KubeletEmulator,
) -> None:
    step = say.step(f"API stand-in serving resource.k8s.io/{api.preferred_version} at {api.url}")
    say.check(step, f"Node {paths.node_name} and DeviceClass {cluster.device_class} exist", True)

    step = say.step("Start the example driver as a separate process; the kubelet registers it")
    plugin = await _start(say, step, driver, kubelet)
    say.check(step, "registered; DRA socket listening", paths.dra_socket.exists())

    step = say.step("The driver publishes its devices as ResourceSlices")
    slices = await _wait_for_slices(cluster)
    for s in slices:
        spec = s["spec"]
        names = [d["name"] for d in spec.get("devices", [])]
        say.detail(step, f"{s['metadata']['name']}: pool {spec['pool']['name']} devices {names}")
    say.check(step, "a ResourceSlice for this node exists", bool(slices))

    step = say.step("The scheduler allocates claim default/train: gpu-0 and gpu-1")
    ref = cluster.allocate_claim("train", [("gpus", "gpu-0"), ("gpus", "gpu-1")])
    say.detail(step, f"claim UID {ref.uid}")

    step = say.step("kubelet: NodePrepareResources")
    first = await plugin.prepare([ref])
    say.detail(step, _summary(first, ref))
    specs = _spec_files(paths)
    for path in specs:
        say.detail(step, f"{path.name}:\n{path.read_text().rstrip()}")
    say.detail(step, f"state: {json.dumps(_state(paths))}")
    say.check(step, "prepared without error", first.kubelet_error == "")
    ids = first.cdi_ids(ref.uid) if ref.uid in first.claims else []
    say.check(
        step,
        "CDI ids are fully qualified vendor/class=name",
        all("/" in i and "=" in i for i in ids) and bool(ids),
    )
    say.check(step, "one CDI spec file for the claim", len(specs) == 1)
    say.check(
        step,
        f"finalizer {DRIVER}/prepared on the claim",
        f"{DRIVER}/prepared" in cluster.finalizers(ref),
    )

    step = say.step("kubelet: NodePrepareResources again (idempotent)")
    mtime = specs[0].stat().st_mtime_ns if specs else 0
    second = await plugin.prepare([ref])
    say.check(step, "same CDI ids", second.claims == first.claims)
    say.check(step, "spec file not rewritten", bool(specs) and specs[0].stat().st_mtime_ns == mtime)

    step = say.step("SIGKILL the driver, then start it again")
    code = await driver.kill()
    say.detail(step, f"driver exited with {code}")
    await plugin.close()
    kubelet.plugins.clear()
    plugin = await _start(say, step, driver, kubelet)
    third = await plugin.prepare([ref])
    say.check(step, "restarted driver answers the same", third.claims == first.claims)
    say.detail(step, f"state: {json.dumps(_state(paths))}")

    step = say.step("kubelet: NodeUnprepareResources")
    result = await plugin.unprepare([ref])
    say.check(step, "unprepared without error", result.kubelet_error == "")
    say.check(step, "CDI spec removed", not _spec_files(paths))
    say.check(step, "devices released", _state(paths)["gpus in use"] == {})
    # The answer follows the local teardown; the finalizer removal it owes comes after.
    removed = await _eventually(lambda: cluster.finalizers(ref) == [], FINALIZER_WAIT)
    say.check(step, "finalizer removed (after the answer)", removed)
    say.detail(step, f"state: {json.dumps(_state(paths))}")

    step = say.step("kubelet: NodeUnprepareResources again (idempotent)")
    again = await plugin.unprepare([ref])
    say.check(step, "OK, with an entry for the claim", again.claims == {ref.uid: ""})


@click.command("demo", epilog=exits.epilog("an invariant broke"))
@click.option(
    "--kubernetes-version",
    type=click.Choice(releases.KUBERNETES_RELEASES),
    default=releases.newest(releases.KUBERNETES_RELEASES),
    show_default=True,
    help="Kubernetes release the stand-ins play.",
)
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the node's files here [default: a temporary directory].",
)
@options.output(help="The narrated steps, or the steps and checks as one JSON/YAML document.")
def command(kubernetes_version: str, work_dir: Path | None, output: str) -> None:
    """Run the whole claim lifecycle locally, no cluster needed."""
    fmt = "text" if output == "table" else "json"
    with tempfile.TemporaryDirectory(prefix="dralet-demo-") as tmp:
        root = work_dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        narrator = asyncio.run(
            run_demo(
                root,
                kubernetes_version=kubernetes_version,
                fmt=fmt,
                echo=click.echo,
                keep_files=work_dir is not None,
            )
        )
    failed = [c.what for s in narrator.steps for c in s.checks if not c.ok]
    document = {"ok": not failed, "steps": [asdict(s) for s in narrator.steps]}
    if output == "json":
        click.echo(json.dumps(document, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(document, sort_keys=False), nl=False)
    elif failed:
        click.echo(
            click.style(f"\n{len(failed)} invariant(s) broke: {'; '.join(failed)}", fg="red")
        )
    else:
        checks = sum(len(s.checks) for s in narrator.steps)
        click.echo(click.style(f"\nAll {checks} checks passed.", fg="green"))
    sys.exit(1 if failed else 0)
