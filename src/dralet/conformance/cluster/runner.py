"""Runs the cluster cases against a driver installed on a live cluster.

``run_cluster_suite`` reads the driver's ResourceSlices, then, node by node, makes pods
whose claims the scheduler allocates and the node's kubelet prepares through the
driver, and judges what the API shows: allocation, pod phase, what the probe
container saw, and how claims are released. Everything it makes carries the run's
label and is deleted in a ``finally`` (Ctrl-C included); objects it did not make are
only read, except the driver's pods, which the ``driver.*`` cases delete when asked to.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dralet import releases
from dralet.conformance.cluster import objects, probe, registration
from dralet.conformance.cluster.cases import CASES
from dralet.conformance.cluster.report import ClusterCaseResult, ClusterSuiteResult, Step
from dralet.conformance.report import Status
from dralet.kube import core, resources, versions
from dralet.kube.client import KubeClient
from dralet.kube.status import ApiError

__all__ = [
    "DEFAULT_IMAGE",
    "CaseFailure",
    "ClusterSettings",
    "ClusterSetupError",
    "Run",
    "run_cluster_suite",
]

T = TypeVar("T")
KUBELET_CALL_DEADLINE = 45.0
"""The kubelet's timeout for one call to a DRA driver (k8s.io/kubernetes@v1.37.2
pkg/kubelet/cm/dra/plugin/dra_plugin.go, defaultClientCallTimeout)."""
DEFAULT_IMAGE = "busybox:1.36"
BAD_IMAGE = "registry.invalid/dralet-conformance/absent:0"
"""No registry serves ``.invalid`` (RFC 2606), so the pull fails on every cluster."""
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


@dataclass(frozen=True)
class ClusterSettings:
    """What to check, where, and how long to wait."""

    driver: str
    nodes: tuple[str, ...] = ()
    """Nodes to check ('' = every node the driver published slices for)."""
    namespace: str = "dralet-conformance"
    """Where pods and claims go; made (and removed at the end) if it does not exist."""
    device_class: str = ""
    """The DeviceClass to request ('' = one made for the run, selecting the driver)."""
    image: str = DEFAULT_IMAGE
    """The probe image: needs ``sh``, ``ls``, ``sort`` and ``env``."""
    bad_image: str = BAD_IMAGE
    driver_namespace: str = ""
    driver_selector: str = ""
    """Label selector of the driver's pods in ``driver_namespace`` (the driver.* cases)."""
    timeout: float = 120.0
    """Seconds each wait may take (a pod running, a claim released, ...)."""
    cleanup_timeout: float = 120.0
    poll_interval: float = 0.5
    progress_interval: float = 10.0
    deadline: float = KUBELET_CALL_DEADLINE
    strict: bool = False
    cases: frozenset[str] = frozenset()
    """The cases to run, prerequisites included (``cases.with_prerequisites``); empty:
    every case. A case not chosen is left out of the result."""
    run_id: str = ""
    """'' = a random one."""
    progress: Callable[[str], None] | None = None


class ClusterSetupError(Exception):
    """Nothing to judge: no node to check, an unknown DeviceClass, DRA not served."""


class CaseFailure(Exception):
    """The case failed; the message says how."""


class CaseSkipped(Exception):
    """The case cannot run here; the message says why."""


@dataclass
class _Timer:
    steps: list[Step] = field(default_factory=list)

    async def step(self, name: str, work: Awaitable[T]) -> T:
        start = time.monotonic()
        value = await work
        self.steps.append(Step(name, time.monotonic() - start))
        return value


JUDGED_STEPS = frozenset({"start", "release"})
"""Steps that end with one kubelet call to the driver answered (NodePrepareResources,
NodeUnprepareResources); the others wait for the scheduler or a driver restart."""


@dataclass
class _Placed:
    """A pod of the run and the claim it uses."""

    pod: str
    claim: str
    generated: bool
    device: tuple[str, str, str] = ("", "", "")
    """(driver, pool, device) of the allocation."""
    view: probe.ProbeView | None = None


class Run:
    """One run's objects and waits: setup, the pods and claims of the cases, cleanup."""

    def __init__(self, client: KubeClient, settings: ClusterSettings, *, run_id: str) -> None:
        self.client = client
        self.settings = settings
        self.run_id = run_id
        self.version = ""
        self.device_class = settings.device_class
        self.made_namespace = False
        self.made_class = False
        self.names = 0

    # -- plumbing --------------------------------------------------------------------

    def chosen(self, case: str) -> bool:
        return not self.settings.cases or case in self.settings.cases

    def say(self, message: str) -> None:
        if self.settings.progress is not None:
            self.settings.progress(message)

    def name(self, purpose: str, node_index: int) -> str:
        self.names += 1
        return f"conf-{self.run_id}-n{node_index}-{purpose}-{self.names}"

    @property
    def claims(self) -> resources.Resource:
        return resources.resource_claims(self.version)

    @property
    def templates(self) -> resources.Resource:
        return resources.resource_claim_templates(self.version)

    async def wait(
        self, what: str, check: Callable[[], Awaitable[T | None]], *, within: float = 0.0
    ) -> T:
        """Poll ``check`` until it returns a value; ``CaseFailure`` after the timeout."""
        within = within or self.settings.timeout
        start = time.monotonic()
        told = start
        while True:
            value = await check()
            if value is not None:
                return value
            now = time.monotonic()
            if now - start > within:
                raise CaseFailure(f"not within {within:g}s: {what}")
            if now - told >= self.settings.progress_interval:
                self.say(f"waiting for {what} ({now - start:.0f}s)")
                told = now
            await asyncio.sleep(self.settings.poll_interval)

    async def get(self, resource: resources.Resource, name: str) -> dict[str, Any] | None:
        namespace = self.settings.namespace if resource.namespaced else None
        try:
            return await self.client.get(resource, name, namespace=namespace)
        except ApiError as error:
            if error.not_found:
                return None
            raise

    async def delete(self, resource: resources.Resource, name: str) -> None:
        namespace = self.settings.namespace if resource.namespaced else None
        try:
            await self.client.delete(resource, name, namespace=namespace)
        except ApiError as error:
            if not error.not_found:
                raise

    # -- setup and cleanup -----------------------------------------------------------

    async def setup(self) -> None:
        try:
            self.version = await versions.negotiate_resource_version(self.client)
        except versions.UnsupportedServerError as exc:
            raise ClusterSetupError(str(exc)) from exc
        if await self.get(core.NAMESPACES, self.settings.namespace) is None:
            self.say(f"creating namespace {self.settings.namespace}")
            await self.client.create(
                core.NAMESPACES, objects.namespace(self.settings.namespace, run_id=self.run_id)
            )
            self.made_namespace = True
        classes = resources.device_classes(self.version)
        if self.device_class:
            if await self.get(classes, self.device_class) is None:
                raise ClusterSetupError(f"DeviceClass {self.device_class!r} does not exist")
        else:
            self.device_class = f"dralet-conformance-{self.run_id}"
            await self.client.create(
                classes,
                objects.device_class(
                    self.device_class,
                    driver=self.settings.driver,
                    version=self.version,
                    run_id=self.run_id,
                ),
            )
            self.made_class = True

    async def labelled(self) -> list[tuple[resources.Resource, str]]:
        """Every object of this run still in the API (claims made from its templates too)."""
        selector = f"{objects.RUN_LABEL}={self.run_id}"
        found: list[tuple[resources.Resource, str]] = []
        kinds = [resources.PODS, self.claims, self.templates] if self.version else []
        for resource in kinds:
            try:
                listed = await self.client.list(
                    resource, namespace=self.settings.namespace, label_selector=selector
                )
            except ApiError as error:
                if error.not_found:
                    continue
                raise
            found += [(resource, i["metadata"]["name"]) for i in listed.get("items") or []]
        if self.made_class and await self.get(
            resources.device_classes(self.version), self.device_class
        ):
            found.append((resources.device_classes(self.version), self.device_class))
        if self.made_namespace and await self.get(core.NAMESPACES, self.settings.namespace):
            found.append((core.NAMESPACES, self.settings.namespace))
        return found

    async def other_runs(self) -> list[str]:
        """Pods of other runs in the namespace: deleting it would delete them too."""
        listed = await self.client.list(
            resources.PODS,
            namespace=self.settings.namespace,
            label_selector=f"{objects.RUN_LABEL},{objects.RUN_LABEL}!={self.run_id}",
        )
        return [f"Pod/{i['metadata']['name']}" for i in listed.get("items") or []]

    async def cleanup(self) -> tuple[str, ...]:
        """Delete what this run made; what is still there after the cleanup timeout."""
        self.say("removing what this run created")
        left = await self.labelled()
        # Pods first: their claims are released (and generated ones deleted) after them.
        for resource, name in sorted(left, key=lambda item: item[0] is not resources.PODS):
            if resource is not core.NAMESPACES:
                await self.delete(resource, name)
        deadline = time.monotonic() + self.settings.cleanup_timeout
        while left and time.monotonic() < deadline:
            left = await self.labelled()
            if left == [(core.NAMESPACES, self.settings.namespace)] or not left:
                break
            await asyncio.sleep(self.settings.poll_interval)
        others = await self.other_runs() if self.made_namespace else []
        if self.made_namespace and others:
            self.say(
                f"keeping namespace {self.settings.namespace}: another run is using it "
                f"({', '.join(others[:3])})"
            )
            self.made_namespace = False
        if self.made_namespace:
            await self.delete(core.NAMESPACES, self.settings.namespace)
            while time.monotonic() < deadline:
                if await self.get(core.NAMESPACES, self.settings.namespace) is None:
                    break
                await asyncio.sleep(self.settings.poll_interval)
        return tuple(f"{r.kind}/{n}" for r, n in await self.labelled())

    # -- pods and claims -------------------------------------------------------------

    async def place(
        self, name: str, node: str, *, template: str = "", claim: str = "", image: str = ""
    ) -> _Placed:
        manifest = objects.pod(
            name,
            namespace=self.settings.namespace,
            node=node,
            image=image or self.settings.image,
            run_id=self.run_id,
            template=template,
            claim=claim,
        )
        await self.client.create(resources.PODS, manifest, namespace=self.settings.namespace)
        return _Placed(name, claim, generated=bool(template))

    async def allocated(self, placed: _Placed, node_devices: dict[str, Any]) -> _Placed:
        """Wait until the pod's claim is allocated; check it is the driver's, on the node."""

        async def check() -> dict[str, Any] | None:
            if not placed.claim:
                pod = await self.get(resources.PODS, placed.pod)
                for status in (pod or {}).get("status", {}).get("resourceClaimStatuses") or []:
                    if status.get("name") == objects.CLAIM_NAME_IN_POD and status.get(
                        "resourceClaimName"
                    ):
                        placed.claim = status["resourceClaimName"]
            if not placed.claim:
                return None
            found = await self.get(self.claims, placed.claim)
            if found and (found.get("status") or {}).get("allocation"):
                return found
            return None

        try:
            claim = await self.wait(f"claim of pod {placed.pod} allocated", check)
        except CaseFailure as failure:
            pod = await self.get(resources.PODS, placed.pod)
            raise CaseFailure(f"{failure}; {_pod_problem(pod or {})}") from None
        results = claim["status"]["allocation"].get("devices", {}).get("results") or []
        if len(results) != 1:
            raise CaseFailure(f"claim {placed.claim}: {len(results)} allocation results, not 1")
        result = results[0]
        placed.device = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        if placed.device[0] != self.settings.driver:
            raise CaseFailure(
                f"claim {placed.claim} allocated a device of {placed.device[0]!r}, "
                f"not {self.settings.driver!r}"
            )
        if placed.device[2] not in node_devices:
            raise CaseFailure(
                f"claim {placed.claim} allocated {'/'.join(placed.device[1:])}, "
                "not a device the driver published for the node"
            )
        return placed

    async def running(self, placed: _Placed) -> dict[str, Any]:
        """Wait until the pod runs; fail at once if it failed."""

        async def check() -> dict[str, Any] | None:
            pod = await self.get(resources.PODS, placed.pod)
            if pod is None:
                raise CaseFailure(f"pod {placed.pod} disappeared")
            status = pod.get("status") or {}
            if status.get("phase") == "Failed":
                raise CaseFailure(f"pod {placed.pod} failed: {_pod_problem(pod)}")
            for init in status.get("initContainerStatuses") or []:
                terminated = (init.get("state") or {}).get("terminated")
                if terminated and terminated.get("exitCode"):
                    raise CaseFailure(
                        f"pod {placed.pod}: probe exited {terminated['exitCode']}: "
                        f"{terminated.get('reason', '')}"
                    )
            running = any(
                (c.get("state") or {}).get("running") for c in status.get("containerStatuses") or []
            )
            return pod if status.get("phase") == "Running" and running else None

        try:
            pod = await self.wait(f"pod {placed.pod} running", check)
        except CaseFailure as failure:
            current = await self.get(resources.PODS, placed.pod)
            if current is None or "not within" not in str(failure):
                raise
            raise CaseFailure(f"{failure}; {_pod_problem(current)}") from None
        placed.view = _probe_view(pod)
        return pod

    async def gone(self, resource: resources.Resource, name: str, what: str) -> None:
        async def check() -> bool | None:
            return True if await self.get(resource, name) is None else None

        await self.wait(what, check)

    async def released(self, placed: _Placed) -> None:
        """Delete the pod; wait until it is gone and its claim released (a generated
        claim deleted; another one deallocated)."""
        await self.delete(resources.PODS, placed.pod)
        await self.pod_gone(placed.pod)
        await self.claim_released(placed)

    async def pod_gone(self, pod: str) -> None:
        try:
            await self.gone(resources.PODS, pod, f"pod {pod} gone (unprepared)")
        except CaseFailure as failure:
            current = await self.get(resources.PODS, pod)
            raise CaseFailure(f"{failure}; {_pod_problem(current or {})}") from None

    async def claim_released(self, placed: _Placed) -> None:
        if not placed.claim:
            return
        if placed.generated:
            try:
                await self.gone(self.claims, placed.claim, f"claim {placed.claim} deleted")
            except CaseFailure as failure:
                raise CaseFailure(
                    f"{failure}; {_claim_problem(await self.get(self.claims, placed.claim))}"
                ) from None
            return

        # The resourceclaim controller deallocates a claim once no pod is left in its
        # reservedFor, then drops its finalizer (k8s.io/kubernetes@v1.37.2
        # pkg/controller/resourceclaim/controller.go, syncClaim); a driver's own
        # finalizer, if it keeps one, must go with the unprepare.
        async def deallocated() -> bool | None:
            claim = await self.get(self.claims, placed.claim)
            if claim is None:
                return True
            allocated = (claim.get("status") or {}).get("allocation")
            finalizers = (claim.get("metadata") or {}).get("finalizers")
            return None if allocated or finalizers else True

        try:
            await self.wait(f"claim {placed.claim} deallocated, no finalizer", deallocated)
        except CaseFailure as failure:
            raise CaseFailure(
                f"{failure}; {_claim_problem(await self.get(self.claims, placed.claim))}"
            ) from None

    async def template(self, node_index: int, *, selector: str = "") -> str:
        name = self.name("tmpl", node_index)
        await self.client.create(
            self.templates,
            objects.resource_claim_template(
                name,
                namespace=self.settings.namespace,
                version=self.version,
                device_class=self.device_class,
                run_id=self.run_id,
                selector=selector,
            ),
            namespace=self.settings.namespace,
        )
        return name

    async def driver_pod(self, node: str) -> dict[str, Any]:
        if not (self.settings.driver_namespace and self.settings.driver_selector):
            raise CaseSkipped("needs --driver-namespace and --driver-selector")
        listed = await self.client.list(
            resources.PODS,
            namespace=self.settings.driver_namespace,
            label_selector=self.settings.driver_selector,
            field_selector=f"spec.nodeName={node}",
        )
        pods = [p for p in listed.get("items") or [] if not p["metadata"].get("deletionTimestamp")]
        if len(pods) != 1:
            raise CaseFailure(
                f"{len(pods)} driver pods match {self.settings.driver_selector!r} on {node}, not 1"
            )
        return dict(pods[0])

    async def driver_back(self, node: str, old_uid: str) -> None:
        async def check() -> bool | None:
            try:
                pod = await self.driver_pod(node)
            except CaseFailure:
                return None
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (pod.get("status") or {}).get("conditions") or []
            )
            return True if ready and pod["metadata"]["uid"] != old_uid else None

        await self.wait(f"a new driver pod Ready on {node}", check)

    async def delete_driver_pod(self, pod: dict[str, Any]) -> None:
        self.say(f"deleting driver pod {pod['metadata']['name']}")
        await self.client.delete(
            resources.PODS, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"]
        )


def _pod_problem(pod: dict[str, Any]) -> str:
    """The pod's phase and what its containers wait on, for a failure message."""
    status = pod.get("status") or {}
    parts = [f"phase {status.get('phase', '?')}"]
    if pod.get("metadata", {}).get("deletionTimestamp"):
        parts.append("terminating")
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        for state, detail in (c.get("state") or {}).items():
            if state != "running":
                reason = (detail or {}).get("reason", "")
                message = (detail or {}).get("message", "")
                if state == "terminated" and c.get("name") == objects.PROBE_CONTAINER:
                    message = ""
                parts.append(f"{c.get('name')} {state} {reason} {message}".strip())
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True" and condition.get("message"):
            parts.append(f"{condition['type']}: {condition['message']}")
    return ", ".join(parts)


def _claim_problem(claim: dict[str, Any] | None) -> str:
    if claim is None:
        return "the claim is gone"
    metadata = claim.get("metadata") or {}
    status = claim.get("status") or {}
    return (
        f"finalizers {metadata.get('finalizers') or []}, "
        f"{'deleting' if metadata.get('deletionTimestamp') else 'not deleted'}, "
        f"{'allocated' if status.get('allocation') else 'not allocated'}, "
        f"reserved for {len(status.get('reservedFor') or [])} pod(s)"
    )


def _probe_view(pod: dict[str, Any]) -> probe.ProbeView | None:
    for init in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if init.get("name") == objects.PROBE_CONTAINER:
            terminated = (init.get("state") or {}).get("terminated") or {}
            if "message" in terminated:
                return probe.parse(str(terminated["message"]))
    return None


def _edits(placed: _Placed, baseline: probe.ProbeView | None) -> frozenset[str]:
    if placed.view is None or baseline is None:
        return frozenset()
    return probe.device_edits(placed.view, baseline)


def _short(items: frozenset[str], limit: int = 4) -> str:
    shown = sorted(items)[:limit]
    return ", ".join(shown) + (f" (+{len(items) - limit})" if len(items) > limit else "")


Case = Callable[[_Timer], Awaitable[str]]


@dataclass
class _Node:
    """One node's run: its cases share the baseline probe and the first claim's device."""

    run: Run
    node: str
    index: int
    results: list[ClusterCaseResult] = field(default_factory=list)
    devices: dict[str, Any] = field(default_factory=dict)
    baseline: probe.ProbeView | None = None
    first: _Placed | None = None
    template_name: str = ""

    async def judge(self, name: str, body: Case) -> None:
        if not self.run.chosen(name):
            return
        timer = _Timer()
        start = time.monotonic()
        status: Status = "pass"
        self.run.say(f"{self.node}: {name}")
        try:
            message = await body(timer)
        except CaseFailure as failure:
            status, message = "fail", str(failure)
        except CaseSkipped as skipped:
            status, message = "skip", str(skipped)
        except ApiError as error:
            status, message = "fail", f"API error: {error}"
        self.results.append(
            ClusterCaseResult(
                name,
                status,
                message,
                seconds=time.monotonic() - start,
                node=self.node,
                steps=tuple(timer.steps),
            )
        )

    # -- registration ----------------------------------------------------------------

    async def registration(self, release: str) -> None:
        run, settings = self.run, self.run.settings
        slices = resources.resource_slices(run.version)

        async def read() -> registration.NodeSlices:
            listed = await run.client.list(
                slices, field_selector=f"spec.driver={settings.driver},spec.nodeName={self.node}"
            )
            return registration.node_slices(
                listed.get("items") or [], driver=settings.driver, node=self.node
            )

        async def published(timer: _Timer) -> str:
            async def check() -> registration.NodeSlices | None:
                found = await read()
                return found if found.devices() else None

            found = await timer.step("publish", run.wait(f"slices of {self.node}", check))
            self.devices = found.devices()
            return f"{len(self.devices)} device(s) in {len(found.pools)} pool(s)"

        async def complete(timer: _Timer) -> str:
            async def check() -> registration.NodeSlices | None:
                found = await read()
                return found if found.pools and not found.incomplete() else None

            try:
                found = await run.wait(f"the pools of {self.node} complete", check)
            except CaseFailure as failure:
                raise CaseFailure(f"{failure}: {'; '.join((await read()).incomplete())}") from None
            self.devices = found.devices()
            return f"pools {', '.join(sorted(found.pools))}"

        async def generations(timer: _Timer) -> str:
            async def check() -> bool | None:
                return True if not (await read()).stale() else None

            try:
                await run.wait(f"no stale slices on {self.node}", check)
            except CaseFailure as failure:
                raise CaseFailure(f"{failure}: {', '.join((await read()).stale())}") from None
            return "no slice of an older generation"

        async def valid(timer: _Timer) -> str:
            found = await read()
            items = [s for pool in found.pools.values() for s in pool]
            if not items:
                raise CaseFailure("no slices to validate")
            errors = registration.validate(items, release=release)
            if errors:
                raise CaseFailure("; ".join(errors[:5]))
            return f"{len(items)} slice(s) valid for Kubernetes {release}"

        await self.judge("slices.published", published)
        await self.judge("slices.pools-complete", complete)
        await self.judge("slices.generations", generations)
        await self.judge("slices.valid", valid)

    # -- workload cases --------------------------------------------------------------

    async def start(self, timer: _Timer, *, template: str = "", claim: str = "") -> _Placed:
        run = self.run
        placed = await run.place(
            run.name("pod", self.index), self.node, template=template, claim=claim
        )
        try:
            await timer.step("allocate", run.allocated(placed, self.devices))
            await timer.step("start", run.running(placed))
        except CaseFailure:
            # Not waited for: a pod that never ran may hold a device the next case needs.
            await run.delete(resources.PODS, placed.pod)
            raise
        return placed

    async def workloads(self) -> None:
        run = self.run
        if not any(run.chosen(c.name) for c in CASES if not c.name.startswith("slices.")):
            return

        async def baseline() -> None:
            name = run.name("baseline", self.index)
            placed = await run.place(name, self.node)
            try:
                await run.running(placed)
                self.baseline = placed.view
            finally:
                await run.delete(resources.PODS, name)

        try:
            await baseline()
        except CaseFailure as failure:
            run.say(f"{self.node}: no baseline probe ({failure}); pod.sees-devices is skipped")
        self.template_name = await run.template(self.index)
        first = _Placed("", "", generated=True)

        async def allocated(timer: _Timer) -> str:
            placed = await run.place(
                run.name("pod", self.index), self.node, template=self.template_name
            )
            first.pod = placed.pod
            await timer.step("allocate", run.allocated(first, self.devices))
            self.first = first
            return f"{first.claim}: {'/'.join(first.device[1:])}"

        async def running(timer: _Timer) -> str:
            if self.first is None:
                raise CaseSkipped("no allocated claim")
            await timer.step("start", run.running(self.first))
            return f"pod {self.first.pod}"

        async def sees(timer: _Timer) -> str:
            if self.first is None or self.first.view is None:
                raise CaseSkipped("no running pod with a probe")
            if self.baseline is None:
                raise CaseSkipped("no baseline probe to compare with")
            edits = _edits(self.first, self.baseline)
            if not edits:
                raise CaseFailure(
                    "the probe saw no environment variable or /dev entry beyond a pod "
                    "without the claim"
                )
            return _short(edits)

        async def distinct(timer: _Timer) -> str:
            if self.first is None or self.first.view is None:
                raise CaseSkipped("no running pod holding a device")
            if len(self.devices) < 2:
                raise CaseSkipped(f"{len(self.devices)} device on the node")
            second = await self.start(timer, template=self.template_name)
            try:
                if second.device == self.first.device:
                    raise CaseFailure(
                        f"claims {self.first.claim} and {second.claim} were both allocated "
                        f"{'/'.join(second.device[1:])}"
                    )
                one, two = _edits(self.first, self.baseline), _edits(second, self.baseline)
                if one and one == two:
                    raise CaseFailure(
                        f"pods of claims on {self.first.device[2]} and {second.device[2]} "
                        f"got the same device edits: {_short(one)}"
                    )
            finally:
                await timer.step("release", run.released(second))
            return f"{self.first.device[2]} and {second.device[2]}"

        async def released(timer: _Timer) -> str:
            if self.first is None or not self.first.pod:
                raise CaseSkipped("no allocated claim")
            await timer.step("release", run.released(self.first))
            return f"{self.first.pod} gone, {self.first.claim} deleted"

        async def reuse(timer: _Timer) -> str:
            if self.first is None or not self.first.device[2]:
                raise CaseSkipped("no device was allocated")
            device = self.first.device[2]
            selector = objects.unique_attribute_selector(
                self.devices, device, driver=run.settings.driver
            )
            if not selector:
                raise CaseSkipped(f"no attribute of {device} is unique on the node")
            template = await run.template(self.index, selector=selector)
            placed = await self.start(timer, template=template)
            try:
                if placed.device[2] != device:
                    raise CaseFailure(f"{selector} allocated {placed.device[2]}, not {device}")
                before, after = _edits(self.first, self.baseline), _edits(placed, self.baseline)
                if before and before != after:
                    raise CaseFailure(
                        f"{device} again: edits {_short(after ^ before)} differ from its first use"
                    )
            finally:
                await timer.step("release", run.released(placed))
            return device

        async def shared(timer: _Timer) -> str:
            claim = run.name("claim", self.index)
            await run.client.create(
                run.claims,
                objects.resource_claim(
                    claim,
                    namespace=run.settings.namespace,
                    version=run.version,
                    device_class=run.device_class,
                    run_id=run.run_id,
                ),
                namespace=run.settings.namespace,
            )
            placed = [await self.start(timer, claim=claim) for _ in range(2)]
            found = await run.get(run.claims, claim) or {}
            reserved = {r.get("name") for r in found.get("status", {}).get("reservedFor") or []}
            if reserved != {p.pod for p in placed}:
                raise CaseFailure(f"claim {claim} reserved for {sorted(reserved)}")
            for p in placed:
                await run.delete(resources.PODS, p.pod)
            for p in placed:
                await timer.step("release", run.pod_gone(p.pod))
            await run.claim_released(placed[0])
            await run.delete(run.claims, claim)
            await run.gone(run.claims, claim, f"claim {claim} deleted")
            return f"{claim} on {placed[0].device[2]}"

        async def driver_deleted(timer: _Timer) -> str:
            driver = await run.driver_pod(self.node)
            placed = await self.start(timer, template=self.template_name)
            await run.delete_driver_pod(driver)
            await timer.step("driver-back", run.driver_back(self.node, driver["metadata"]["uid"]))
            pod = await run.get(resources.PODS, placed.pod) or {}
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if pod.get("status", {}).get("phase") != "Running" or any(
                c.get("restartCount") or not (c.get("state") or {}).get("running") for c in statuses
            ):
                raise CaseFailure(f"the workload did not keep running: {_pod_problem(pod)}")
            await timer.step("release", run.released(placed))
            return "the workload kept running; released after the driver came back"

        async def restart_before_unprepare(timer: _Timer) -> str:
            driver = await run.driver_pod(self.node)
            placed = await self.start(timer, template=self.template_name)
            await run.delete_driver_pod(driver)
            await timer.step(
                "driver-gone",
                self._old_driver_gone(driver),
            )
            await run.delete(resources.PODS, placed.pod)
            await timer.step("driver-back", run.driver_back(self.node, driver["metadata"]["uid"]))
            await timer.step("release-after-restart", run.pod_gone(placed.pod))
            await run.claim_released(placed)
            return "released by the new driver pod"

        async def bad_image(timer: _Timer) -> str:
            placed = await run.place(
                run.name("badimage", self.index),
                self.node,
                template=self.template_name,
                image=run.settings.bad_image,
            )
            await timer.step("allocate", run.allocated(placed, self.devices))

            async def pull_failed() -> str | None:
                pod = await run.get(resources.PODS, placed.pod) or {}
                status = pod.get("status") or {}
                for c in (status.get("initContainerStatuses") or []) + (
                    status.get("containerStatuses") or []
                ):
                    reason = ((c.get("state") or {}).get("waiting") or {}).get("reason", "")
                    if reason in PULL_FAILURES:
                        return str(reason)
                return None

            reason = await timer.step(
                "pull-failed", run.wait(f"pod {placed.pod} failing to pull", pull_failed)
            )
            await timer.step("release", run.released(placed))
            return reason

        await self.judge("claim.allocated", allocated)
        await self.judge("pod.running", running)
        await self.judge("pod.sees-devices", sees)
        await self.judge("exclusive.distinct", distinct)
        await self.judge("claim.released", released)
        await self.judge("claim.reuse", reuse)
        await self.judge("shared.two-pods", shared)
        await self.judge("driver.pod-deleted", driver_deleted)
        await self.judge("driver.restart-before-unprepare", restart_before_unprepare)
        await self.judge("bad-image.released", bad_image)
        await self.judge("deadline", self.deadline)

    async def _old_driver_gone(self, driver: dict[str, Any]) -> None:
        run = self.run
        name, namespace = driver["metadata"]["name"], driver["metadata"]["namespace"]

        async def check() -> bool | None:
            try:
                await run.client.get(resources.PODS, name, namespace=namespace)
            except ApiError as error:
                if error.not_found:
                    return True
                raise
            return None

        await run.wait(f"driver pod {name} gone", check)

    async def deadline(self, timer: _Timer) -> str:
        limit = self.run.settings.deadline
        judged = [(r.name, s) for r in self.results for s in r.steps if s.name in JUDGED_STEPS]
        if not judged:
            raise CaseSkipped("no step was timed")
        slow = [f"{case} {s.name} {s.seconds:.1f}s" for case, s in judged if s.seconds > limit]
        if slow:
            raise CaseFailure(f"over {limit:g}s: {', '.join(slow)}")
        worst = max(judged, key=lambda item: item[1].seconds)
        return f"slowest: {worst[0]} {worst[1].name} {worst[1].seconds:.1f}s"


async def _select_nodes(client: KubeClient, settings: ClusterSettings, version: str) -> list[str]:
    if settings.nodes:
        for node in settings.nodes:
            try:
                await client.get(resources.NODES, node)
            except ApiError as error:
                if error.not_found:
                    raise ClusterSetupError(f"no node named {node!r}") from None
                raise
        return list(settings.nodes)
    listed = await client.list(
        resources.resource_slices(version), field_selector=f"spec.driver={settings.driver}"
    )
    nodes = {
        str((s.get("spec") or {}).get("nodeName"))
        for s in listed.get("items") or []
        if (s.get("spec") or {}).get("nodeName")
    }
    if not nodes:
        raise ClusterSetupError(
            f"no node has ResourceSlices of driver {settings.driver!r}: name nodes with --nodes"
        )
    return sorted(nodes)


def _release(minor: str) -> str:
    """The validation release for the server's: itself, or the nearest dralet knows."""
    known = releases.KUBERNETES_RELEASES
    if minor in known:
        return minor
    key = tuple(int(p) for p in minor.split(".") if p.isdigit())
    return known[0] if key < tuple(int(p) for p in known[0].split(".")) else known[-1]


async def run_cluster_suite(client: KubeClient, settings: ClusterSettings) -> ClusterSuiteResult:
    """Run every case on every selected node; clean up whatever happens (cancellation
    included, which is re-raised once the cleanup is done)."""
    run_id = settings.run_id or secrets.token_hex(3)
    run = Run(client, settings, run_id=run_id)
    results: list[ClusterCaseResult] = []
    nodes: list[str] = []
    leftovers: tuple[str, ...] = ()
    release = ""
    try:
        release = _release(await core.server_minor(client))
        await run.setup()
        nodes = await _select_nodes(client, settings, run.version)
        run.say(
            f"run {run_id}: driver {settings.driver} on {', '.join(nodes)} (Kubernetes {release})"
        )
        for index, node in enumerate(nodes):
            checked = _Node(run, node, index)
            await checked.registration(release)
            await checked.workloads()
            results += checked.results
    finally:
        leftovers = await run.cleanup()
        if leftovers:
            run.say(f"left after cleanup: {', '.join(leftovers)}")
    order = {c.name: i for i, c in enumerate(CASES)}
    return ClusterSuiteResult(
        tuple(sorted(results, key=lambda r: (nodes.index(r.node), order[r.name]))),
        driver=settings.driver,
        server=f"{client.host} (Kubernetes {release})",
        run_id=run_id,
        nodes=tuple(nodes),
        strict=settings.strict,
        leftovers=leftovers,
    )
