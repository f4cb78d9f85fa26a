"""``dralet conformance`` against a driver author's backend, in one call.

    from dralet import testing

    def test_my_backend_is_conformant(tmp_path):
        testing.check_backend(
            lambda settings, config: MyBackend(state_dir=settings.state_dir),
            driver_name="fpga.acme.example.com",
        )

The call starts dralet's API stand-in with this node and the driver's DeviceClass, runs
the backend as a real dralet driver (registration, the kubelet's gRPC services, CDI
files, ResourceSlices), and plays every conformance case through the kubelet emulator
for each kubelet version asked for, restarts of the driver included. It returns the
``dralet.conformance.SuiteResult`` when every case passes (strictly: SHOULD cases count
too unless ``strict=False``) and no CDI spec is left behind; otherwise it raises
``ConformanceFailure`` naming each failed case and its message.

``backend`` is one of:

- a ``dralet.BackendFactory`` (``factory(settings, config)``): called at every start, so a
  restart builds a new backend from what it left in ``settings.state_dir``, as a
  restarted process would;
- the name of an installed driver (an entry point of ``dralet.drivers``) or
  ``package.module:factory``, built by its factory the same way; with ``process=True``
  it runs as ``dralet run --driver NAME``, a separate process killed with SIGKILL at
  each restart;
- a backend object: the same object is served again after each restart (what it keeps
  in memory then survives, which a real restart would not).

``check_backend`` blocks (it runs its own event loop); ``check_backend_async`` is the
same for a test that already runs in one.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dralet.node.backend import ClaimBackend
from dralet.node.config import ApiSettings, Settings
from dralet.node.driver import Driver
from dralet.node.factory import BACKEND_METHODS, BackendFactory, DriverConfig
from dralet.testing.claims import NODE
from dralet.testing.node import node_settings

if TYPE_CHECKING:
    from dralet import conformance
    from dralet.cluster import DriverPaths, DriverProcess

__all__ = ["ConformanceFailure", "check_backend", "check_backend_async"]

KUBELET_VERSIONS = ("1.34", "1.37")
"""The kubelets played unless asked otherwise: the first with the DRA v1 service, and the
one with its health service."""
KUBERNETES_VERSION = "1.37"
"""The API the stand-in serves unless asked otherwise."""
LOG_TAIL = 4000
"""Characters of a driver process's log quoted in a failure."""

Backend = ClaimBackend | BackendFactory | str


class ConformanceFailure(AssertionError):
    """The backend failed conformance: ``result`` has every case; the message names each
    failed one (and any CDI spec left behind)."""

    def __init__(self, message: str, result: conformance.SuiteResult) -> None:
        super().__init__(message)
        self.result = result


def check_backend(
    backend: Backend,
    *,
    driver_name: str,
    config: DriverConfig | None = None,
    node_name: str = NODE,
    kubelet_versions: Sequence[str] = KUBELET_VERSIONS,
    kubernetes_version: str = KUBERNETES_VERSION,
    strict: bool = True,
    restarts: bool = True,
    process: bool = False,
    root: Path | None = None,
) -> conformance.SuiteResult:
    """Run the conformance cases against ``backend``; see the module's docstring.

    ``config`` is a named driver's (or factory's) own configuration; ``kubelet_versions``
    the kubelets played (empty: every one the driver can serve); ``restarts`` False
    leaves out the cases that restart the driver; ``root`` where the node's files go (a
    new temporary directory by default: unix socket paths must stay short)."""
    return asyncio.run(
        check_backend_async(
            backend,
            driver_name=driver_name,
            config=config,
            node_name=node_name,
            kubelet_versions=kubelet_versions,
            kubernetes_version=kubernetes_version,
            strict=strict,
            restarts=restarts,
            process=process,
            root=root,
        )
    )


async def check_backend_async(
    backend: Backend,
    *,
    driver_name: str,
    config: DriverConfig | None = None,
    node_name: str = NODE,
    kubelet_versions: Sequence[str] = KUBELET_VERSIONS,
    kubernetes_version: str = KUBERNETES_VERSION,
    strict: bool = True,
    restarts: bool = True,
    process: bool = False,
    root: Path | None = None,
) -> conformance.SuiteResult:
    """``check_backend`` in the running event loop."""
    # Imported here: the API stand-in and the API client are for this call alone, not for
    # every user of the kit (``dralet run --driver example-strict`` among them).
    from dralet import conformance, kube
    from dralet.apiserver import ApiServer
    from dralet.cluster import ControlPlane, DriverPaths

    if process and not isinstance(backend, str):
        raise TypeError("process=True runs `dralet run --driver NAME`: name the driver")
    given: object = backend  # from an untyped caller, anything
    if not isinstance(given, str | ClaimBackend) and not callable(given):
        missing = [m for m in BACKEND_METHODS if not callable(getattr(given, m, None))]
        raise TypeError(
            f"{type(given).__name__} is not a ClaimBackend (missing: {', '.join(missing)}), "
            "a factory or a driver's name"
        )
    with _node_root(root) as where:
        async with ApiServer(kubernetes_version=kubernetes_version) as api:
            ControlPlane(api, driver_name=driver_name, node_name=node_name).add_node()
            paths = DriverPaths(where, driver_name=driver_name, node_name=node_name)
            if process:
                assert isinstance(backend, str)
                node: _Node = _ProcessNode(paths, backend, config or DriverConfig(), api.url)
            else:
                node = _InProcessNode(paths, backend, config, api.url)
            suite = conformance.ConformanceSettings(
                registry_dir=paths.registry_dir,
                driver_name=driver_name,
                cdi_dir=paths.cdi_dir,
                node_name=node_name,
                kubelet_versions=tuple(kubelet_versions),
                restart=node.restart if restarts else None,
                strict=strict,
            )
            try:
                async with await kube.connect(url=api.url) as client:
                    claims = conformance.ApiClaimFactory(client, node_name=node_name)
                    result = await _run(suite, claims, node)
            finally:
                await node.stop()
        left = sorted(spec.name for spec in paths.cdi_dir.glob("*.json"))
        log = node.log()  # before a temporary root goes
    problems = [
        f"{case.label} [{case.level}]: {case.message}"
        for case in result.cases
        if result.counts(case)
    ]
    if left:
        problems.append(f"CDI specs left behind after every claim was unprepared: {left}")
    if problems:
        raise ConformanceFailure(
            f"{driver_name} failed conformance:\n  "
            + "\n  ".join(problems)
            + (f"\ndriver log (last part):\n{log[-LOG_TAIL:]}" if log else ""),
            result,
        )
    return result


async def _run(
    suite: conformance.ConformanceSettings, claims: conformance.ClaimFactory, node: _Node
) -> conformance.SuiteResult:
    """The suite, with the driver started once the suite watches the registry directory
    (so it sees the driver register); the first error of either is raised as it is."""
    from dralet import conformance

    try:
        async with asyncio.TaskGroup() as group:
            running = group.create_task(conformance.run_suite(suite, claims=claims))
            await node.start()
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return running.result()


@contextlib.contextmanager
def _node_root(root: Path | None) -> Iterator[Path]:
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="dralet-") as made:
        yield Path(made)


class _Node(Protocol):
    async def start(self) -> None: ...

    async def restart(self) -> None: ...

    async def stop(self) -> None: ...

    def log(self) -> str: ...


@dataclass
class _InProcessNode:
    """The backend served by a ``dralet.Driver`` in this event loop."""

    paths: DriverPaths
    backend: Backend
    config: DriverConfig | None
    api_url: str
    driver: Driver | None = None

    def _settings(self) -> Settings:
        driver = node_settings(
            self.paths.root,
            driver_name=self.paths.driver_name,
            node_name=self.paths.node_name,
            backend_state_dir=self.paths.state_dir,
        )
        return Settings(driver=driver, api=ApiSettings(url=self.api_url))

    def _new_driver(self) -> Driver:
        settings = self._settings()
        if isinstance(self.backend, str):
            return Driver(self.backend, settings, config=self.config)
        if isinstance(self.backend, ClaimBackend):
            return Driver(self.backend, settings)
        settings.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return Driver(self.backend(settings, self.config or DriverConfig()), settings)

    async def start(self) -> None:
        self.driver = self._new_driver()
        await self.driver.start()

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def stop(self) -> None:
        if self.driver is not None:
            await self.driver.stop()
            self.driver = None

    def log(self) -> str:
        return ""  # the driver logs to this process's own logging


@dataclass
class _ProcessNode:
    """``dralet run --driver NAME`` as a separate process."""

    paths: DriverPaths
    name: str
    config: DriverConfig
    api_url: str
    process: DriverProcess | None = None

    def _args(self) -> list[str]:
        from dralet.cluster import driver_args

        config_path = self.config.path
        if config_path is None and self.config.text:
            config_path = self.paths.root / "driver-config.yaml"
            config_path.write_text(self.config.text)
        extra = [f"--driver-option={key}={value}" for key, value in self.config.options.items()]
        return driver_args(
            self.paths,
            api_url=self.api_url,
            driver=self.name,
            driver_config=config_path,
            extra=extra,
        )

    async def start(self) -> None:
        if self.process is None:
            from dralet.cluster import DriverProcess

            log = self.paths.root / "driver.log"
            self.process = DriverProcess(self._args(), log_path=log)
        self.process.start()

    async def restart(self) -> None:
        """SIGKILL, as a crash or the OOM killer would, and start again."""
        assert self.process is not None
        await self.process.kill()
        self.process.start()

    async def stop(self) -> None:
        if self.process is not None:
            await self.process.terminate()

    def log(self) -> str:
        return self.process.log() if self.process is not None else ""
