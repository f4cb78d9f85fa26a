"""The hostdev backend: host device nodes handed to containers through CDI.

This backend keeps no state of its own and changes nothing on the host. Preparing a
device is giving the container its node (CDI ``deviceNodes``: path, type, major/minor,
file mode, owner; the runtime adds the cgroup device rule) and the group's mounts and
environment; releasing it is nothing. So ``devices_in_use`` comes from dralet's own
claim records, told at start and followed through prepares and releases since
(``dralet.drivers.held``). The records are the only place that knows which container
has which node, which is why the framework refuses a second claim on an exclusive
device until the first is unprepared.

A device that disappears while a claim holds it stays published, reported unhealthy
(and tainted where the cluster serves device taints), and its claim is kept until the
kubelet unprepares it. A device that appears is published at once (inotify) or at the
next rescan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dralet
from dralet.drivers.held import HeldDevices, NoHardwareState
from dralet.drivers.hostdev import nodes
from dralet.drivers.hostdev.config import HostdevConfig
from dralet.drivers.hostdev.watch import NodeEvents

__all__ = ["SHARES", "HostDevices"]

log = logging.getLogger(__name__)

SHARES = "shares"
"""The capacity a device shared through consumable capacity publishes: each claim
takes one share unless it asks for more."""
_DEBOUNCE = 0.2
"""Seconds to let a burst of node events (create, then chmod and chown by udev) end."""
_KNOWN_PARAMETERS = frozenset({"env"})


class HostDevices(NoHardwareState):
    """A ``dralet.ClaimBackend`` over the device nodes ``config`` selects."""

    def __init__(self, config: HostdevConfig) -> None:
        self.config = config
        self.held = HeldDevices()
        self._lock = threading.Lock()
        self._reported: set[str] = set()
        self._watch_task: asyncio.Task[None] | None = None
        self._events: NodeEvents | None = None

    # ------------------------------------------------------------------ discovery

    def scan(self) -> Mapping[str, nodes.FoundDevice]:
        """The devices on the host now (each problem logged once)."""
        discovery = nodes.discover(self.config)
        with self._lock:
            for problem in discovery.problems:
                if problem not in self._reported:
                    self._reported.add(problem)
                    log.warning("hostdev: %s", problem)
        return discovery.devices

    # ------------------------------------------------------------------ ClaimBackend

    def devices(self) -> list[dralet.Device]:
        """The devices found, and any device a claim still holds that has gone."""
        found = self.scan()
        published = [self._device(found[name]) for name in sorted(found)]
        for name, holders in sorted(self.held.holders().items()):
            if name not in found:
                published.append(_gone_device(name, holders))
        return published

    def _device(self, device: nodes.FoundDevice) -> dralet.Device:
        group = device.group
        capacity: dict[str, str | dralet.Capacity] = dict(device.capacity)
        shared = group.share > 1 and group.sharing == "capacity"
        if shared:
            # Consumable capacity (KEP-5075; beta and on by default in 1.36): one claim
            # takes one share unless its request asks for more, up to all of them.
            capacity[SHARES] = dralet.Capacity(
                value=str(group.share),
                request_policy=dralet.RequestPolicy(
                    default="1",
                    valid_range=dralet.QuantityRange(min="1", max=str(group.share), step="1"),
                ),
            )
        return dralet.Device(
            name=device.name,
            attributes=device.attributes,
            capacity=capacity,
            allow_multiple_allocations=shared,
        )

    def prepare_claim(self, allocation: dralet.ClaimAllocation) -> list[dralet.PreparedDevice]:
        """The container edits of each device; nothing on the host changes."""
        uid = allocation.claim.uid
        found = self.scan()
        prepared: list[dralet.PreparedDevice] = []
        container_paths: dict[str, str] = {}
        per_group: dict[str, int] = {}
        for allocated in allocation.devices:
            device = found.get(allocated.device)
            if device is None:
                raise dralet.ClaimError(
                    uid, f"device {allocated.device} is not on this node now (unplugged?)"
                )
            env = _env(uid, allocated)
            index = per_group.get(device.group.name, 0)
            per_group[device.group.name] = index + 1
            path = _container_path(device, index)
            if path in container_paths:
                raise dralet.ClaimError(
                    uid,
                    f"devices {container_paths[path]} and {allocated.device} would both be "
                    f"{path} in the container; give group {device.group.name} a containerPath "
                    "with {basename}, {device} or {index}",
                )
            container_paths[path] = allocated.device
            prepared.append(_prepared(device, path, env))
        self.held.prepared(allocation, prepared)
        return prepared

    def survives_reboot(self, device: dralet.AllocatedDevice, state: Mapping[str, Any]) -> bool:
        """Still prepared when the same node (type, major, minor) is at the same path."""
        return _still_there(state)

    def health(self) -> dict[str, dralet.DeviceHealth]:
        """Healthy while present; a held device whose node went (or changed) is not."""
        health = {name: dralet.DeviceHealth(dralet.HealthStatus.HEALTHY) for name in self.scan()}
        for name, holders in self.held.holders().items():
            for uid, state in holders:
                if state and not _still_there(state):
                    path = (state.get("node") or {}).get("path", "?")
                    health[name] = dralet.DeviceHealth(
                        dralet.HealthStatus.UNHEALTHY,
                        f"device node {path} of claim {uid} is gone or was replaced",
                    )
        return health

    # ------------------------------------------------------------------ hot-plug

    def use_publish(self, publish: Callable[[], bool]) -> None:
        """Watch for device nodes coming and going; re-publish when the set changes."""
        self.close()
        patterns = [p for group in self.config.groups for p in group.match.paths]
        self._events = NodeEvents(patterns)
        self._events.start()
        self._watch_task = asyncio.get_running_loop().create_task(
            self._watch(self._events, publish), name="hostdev-watch"
        )

    async def _watch(self, events: NodeEvents, publish: Callable[[], bool]) -> None:
        last = _fingerprint(await asyncio.to_thread(self.scan))
        while True:
            if await events.wait(self.config.rescan_seconds):
                await asyncio.sleep(_DEBOUNCE)
            now = _fingerprint(await asyncio.to_thread(self.scan))
            if now != last:
                log.info("hostdev: devices changed (%d now); publishing", len(now))
                last = now
                publish()

    def close(self) -> None:
        """Stop watching (``use_publish`` starts it)."""
        if self._watch_task is not None:
            self._watch_task.cancel()
            self._watch_task = None
        if self._events is not None:
            self._events.close()
            self._events = None

    async def aclose(self) -> None:
        """``close`` and wait for the watch task to end."""
        task = self._watch_task
        self.close()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _fingerprint(found: Mapping[str, nodes.FoundDevice]) -> dict[str, Any]:
    return {
        name: (d.node.identity(), d.node.mode, d.node.uid, d.node.gid, dict(d.attributes))
        for name, d in found.items()
    }


def _still_there(state: Mapping[str, Any]) -> bool:
    recorded = state.get("node") or {}
    node = nodes.stat_node(str(recorded.get("path", "")))
    return node is not None and node.identity() == recorded


def _gone_device(name: str, holders: Sequence[tuple[str, Mapping[str, Any]]]) -> dralet.Device:
    """A held device whose node has gone: still published (so its claim's allocation
    stays valid and the device can carry the unhealthy taint), from the record alone."""
    attributes: dict[str, dralet.AttributeValue] = {}
    for _, state in holders:
        node = state.get("node") or {}
        for key in ("type", "major", "minor"):
            if key in node:
                attributes[key] = node[key]
        if "group" in state:
            attributes["group"] = str(state["group"])
    return dralet.Device(name=name, attributes=attributes)


def _env(uid: str, allocated: dralet.AllocatedDevice) -> tuple[str, ...]:
    """``env`` of the opaque configs in precedence order (a later one wins per key)."""
    merged: dict[str, str] = {}
    for config in allocated.configs:
        unknown = sorted(set(config.parameters) - _KNOWN_PARAMETERS - {"apiVersion", "kind"})
        if unknown:
            raise dralet.ClaimError(
                uid,
                f"{config.source} config for {allocated.device}: unknown parameter(s) "
                f"{', '.join(unknown)} (hostdev takes: env)",
            )
        env = config.parameters.get("env") or {}
        if not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise dralet.ClaimError(
                uid, f"{config.source} config for {allocated.device}: env must map names to strings"
            )
        merged.update(env)
    return tuple(f"{k}={v}" for k, v in sorted(merged.items()))


def _container_path(device: nodes.FoundDevice, index: int) -> str:
    """Where the ``index``-th device of its group in a claim appears in the container."""
    template = device.group.container_path
    if template is None:
        return device.node.path
    if "{" not in template:
        return template if index == 0 else f"{template}-{index}"
    basename = device.node.path.rsplit("/", 1)[-1]
    return (
        template.replace("{basename}", basename)
        .replace("{device}", device.name)
        .replace("{index}", str(index))
    )


def _prepared(device: nodes.FoundDevice, path: str, env: Sequence[str]) -> dralet.PreparedDevice:
    group, node = device.group, device.node
    edits = dralet.ContainerEdits(
        env=tuple(f"{k}={v}" for k, v in sorted(group.env.items())) + tuple(env),
        device_nodes=(
            dralet.DeviceNode(
                path=path,
                host_path=node.path,
                type=node.cdi_type,
                major=node.major,
                minor=node.minor,
                file_mode=group.file_mode if group.file_mode is not None else node.mode,
                permissions=group.permissions,
                uid=group.uid if group.uid is not None else node.uid,
                gid=group.gid if group.gid is not None else node.gid,
            ),
        ),
        mounts=tuple(
            dralet.Mount(
                host_path=m.host_path,
                container_path=m.container_path,
                options=tuple(dict.fromkeys(["bind", "ro" if m.read_only else "rw", *m.options])),
            )
            for m in group.mounts
        ),
    )
    state = {"node": node.identity(), "group": group.name, "containerPath": path}
    return dralet.PreparedDevice(edits=edits, state=state)
