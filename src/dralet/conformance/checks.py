"""The bodies of the conformance cases: each judges what a kubelet (or the runtime it
feeds) would see, and records a verdict under the case's name."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import grpc

from dralet import kubelet as emulator
from dralet.cdi import names as cdi_names
from dralet.conformance.cdifiles import defined_devices, invalid_specs
from dralet.conformance.claims import request_names

if TYPE_CHECKING:
    from dralet.conformance.runner import Discovered, Run

MAX_FILES_SHOWN = 2
NOT_SERVED = frozenset({grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNAVAILABLE})


def rpc_error(exc: grpc.aio.AioRpcError) -> str:
    return f"gRPC error {exc.code().name}: {exc.details()}"


def _qualified_problems(ids: Sequence[str]) -> list[str]:
    bad = []
    for device_id in ids:
        try:
            cdi_names.parse_qualified_name(device_id)
        except cdi_names.CDINameError as exc:
            bad.append(str(exc))
    return bad


# ---------------------------------------------------------------------- registration


def check_info(run: Run, found: Discovered) -> None:
    info = found.info
    if found.endpoint_listening:
        run.record("registration.order", "pass", f"{info.endpoint} listened at GetInfo")
    else:
        run.record(
            "registration.order",
            "fail",
            f"GetInfo answered but nothing listens on {info.endpoint or found.socket} yet; "
            "the kubelet may call it at once",
        )
    if info.type == emulator.DRA_PLUGIN_TYPE:
        run.record("registration.type", "pass", info.type)
    else:
        run.record("registration.type", "fail", f"type {info.type!r}, not 'DRAPlugin'")
    expected = run.settings.driver_name
    if not info.name:
        run.record("registration.name", "fail", "GetInfo name is empty")
    elif expected and info.name != expected:
        run.record("registration.name", "fail", f"{info.name!r}, not {expected!r}")
    else:
        run.record("registration.name", "pass", info.name)
    if not info.endpoint:
        run.record(
            "registration.endpoint", "fail", "empty: the kubelet would dial the registration socket"
        )
    elif not info.endpoint.startswith("/"):
        run.record("registration.endpoint", "fail", f"{info.endpoint!r} is not an absolute path")
    else:
        run.record("registration.endpoint", "pass", info.endpoint)
    advertised = list(info.supported_versions)
    ours = [v for v in advertised if v in emulator.KUBELET_134_SERVICES]
    if not ours:
        run.record(
            "registration.versions",
            "fail",
            f"{advertised} has neither {emulator.V1} nor {emulator.V1BETA1}",
        )
    elif len(ours) == len(emulator.KUBELET_134_SERVICES) and ours[0] != emulator.V1:
        run.record(
            "registration.versions",
            "fail",
            f"{advertised}: {emulator.V1} must come first (1.34+ kubelets take the first)",
        )
    else:
        run.record("registration.versions", "pass", ", ".join(advertised))


async def check_service(run: Run) -> None:
    name = "kubelet.service"
    try:
        plugin = await run.register()
    except (grpc.aio.AioRpcError, emulator.KubeletError) as exc:
        run.record(name, "fail", f"registration failed: {exc}")
        return
    run.plugin = plugin
    try:
        await run.timed("NodeUnprepareResources", plugin.unprepare_raw([]))
    except grpc.aio.AioRpcError as exc:
        if exc.code() in NOT_SERVED:
            run.record(name, "fail", f"picks {plugin.service}, but {rpc_error(exc)}")
            return
    detail = f"picks {plugin.service}"
    if plugin.health_service:
        stream = plugin.watch_health()
        try:
            await asyncio.wait_for(anext(stream), HEALTH_FIRST_MESSAGE)
        except (grpc.aio.AioRpcError, TimeoutError, StopAsyncIteration) as exc:
            why = rpc_error(exc) if isinstance(exc, grpc.aio.AioRpcError) else "no first message"
            run.record(name, "fail", f"{detail}; {plugin.health_service} advertised, but {why}")
            return
        finally:
            await stream.aclose()
        detail += f" and {plugin.health_service}"
    run.record(name, "pass", detail)


HEALTH_FIRST_MESSAGE = 10.0
QUIET_STREAM_WINDOW = 1.0
"""How long a health stream of a driver that advertises none must stay quiet and open."""
WATCH_POLL = 0.02


async def check_health_watch(run: Run) -> None:
    """The kubelet's own health loop (``dralet.kubelet.HealthWatch``) for this release:
    where health is advertised it gets a first report; where a 1.36 kubelet watches a
    driver that advertises none, the stream stays open without an error (an error is
    logged and retried every 5 s); 1.37+ kubelets watch only what is advertised."""
    name = "kubelet.health-watch"
    plugin = run.dra
    watcher = emulator.HealthWatch(plugin, run.kubelet)
    service = watcher.service
    if not service:
        run.record(name, "pass", f"a {run.kubelet} kubelet does not watch health here")
        return
    advertised = service in plugin.info.supported_versions
    task = asyncio.ensure_future(watcher.run())
    window = HEALTH_FIRST_MESSAGE if advertised else QUIET_STREAM_WINDOW
    try:
        async with asyncio.timeout(window):
            while not (watcher.messages or watcher.logged_errors or task.done()):  # noqa: ASYNC110
                await asyncio.sleep(WATCH_POLL)
    except TimeoutError:
        pass
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if watcher.logged_errors:
        run.record(
            name,
            "fail",
            f"{service}: a {run.kubelet} kubelet logs {watcher.logged_errors[0]!r} and "
            "retries every 5 s",
        )
    elif watcher.stopped:
        run.record(
            name, "fail", f"{watcher.stopped}: advertised, so the kubelet watched, then gave up"
        )
    elif advertised and not watcher.messages:
        run.record(name, "fail", f"{service}: no first report within {window:g}s")
    elif advertised:
        run.record(name, "pass", f"{service} reports")
    else:
        run.record(name, "pass", f"{service} not advertised; the stream stays quiet")


# ---------------------------------------------------------------------- DRA cases


async def check_invalid_argument(run: Run) -> None:
    bad = emulator.KubeletClaim(run.settings.namespace, "", "dralet-conformance-empty-uid")
    problems: list[str] = []
    for what, call in (
        ("NodePrepareResources", run.dra.prepare_raw),
        ("NodeUnprepareResources", run.dra.unprepare_raw),
    ):
        try:
            await run.timed(what, call([bad]))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                problems.append(f"{what}: {rpc_error(exc)}")
            continue
        problems.append(f"{what} accepted a claim with an empty UID")
    run.verdict("invalid-argument.empty-uid", problems, "InvalidArgument from both calls")


async def check_unprepare_unknown(run: Run) -> None:
    result = await run.unprepare([run.missing_claim()])
    if result.kubelet_error:
        run.record("unprepare.unknown-claim", "fail", result.kubelet_error)
    else:
        run.record("unprepare.unknown-claim", "pass", "OK with an entry")


async def check_one_entry_per_claim(run: Run) -> None:
    devices = run.devices
    first = await run.claim("entries", devices[:1])
    second = await run.claim("entries", devices[1:2]) if len(devices) > 1 else run.missing_claim()
    result = await run.prepare([first, second])
    keys = set(result.claims)
    expected = {first.uid, second.uid}
    problems = []
    if keys - expected:
        problems.append(f"entries for claims not asked for: {sorted(keys - expected)}")
    if expected - keys:
        problems.append(f"no entry for {sorted(expected - keys)}")
    if len(devices) > 1 and result.kubelet_error:
        problems.append(result.kubelet_error)
    run.verdict("prepare.one-entry-per-claim", problems, f"{len(keys)} entries for 2 claims")
    await run.unprepare([first, second])


async def check_prepare_twice(run: Run) -> None:
    name = "prepare.twice"
    ref = await run.claim("twice", run.devices[:1])
    first = await run.prepare([ref])
    if first.kubelet_error:
        run.record(name, "fail", f"first prepare: {first.kubelet_error}")
        return
    again = await run.prepare([ref])
    before, after = (
        first.cdi_ids(ref.uid),
        again.cdi_ids(ref.uid) if not again.kubelet_error else [],
    )
    if again.kubelet_error:
        run.record(name, "fail", f"second prepare: {again.kubelet_error}")
    elif sorted(before) != sorted(after):
        run.record(name, "fail", f"CDI ids changed: {before} then {after}")
    else:
        run.record(name, "pass", "same CDI ids " + ", ".join(before))
    await run.unprepare([ref])


async def check_per_claim_error(run: Run) -> None:
    # SHOULD, not MUST: the Go kubeletplugin helper (1.33+) fetches every claim first and
    # fails the whole call when one GET fails; the kubelet copes by retrying the pod.
    name = "prepare.per-claim-error"
    good = await run.claim("good", run.devices[:1])
    bad = run.missing_claim()
    try:
        result = await run.prepare([good, bad])
    except grpc.aio.AioRpcError as exc:
        run.record(name, "fail", f"{rpc_error(exc)}: the whole call failed for one missing claim")
        await run.unprepare([good])
        return
    problems = []
    if bad.uid not in result.claims:
        problems.append("no entry for the missing claim")
    elif not result.claims[bad.uid].error:
        problems.append("the missing claim has no error")
    if good.uid not in result.claims:
        problems.append("no entry for the good claim")
    elif result.claims[good.uid].error:
        problems.append(f"the good claim failed too: {result.claims[good.uid].error}")
    run.verdict(name, problems, "only the missing claim has an error")
    await run.unprepare([good])


async def check_devices_match(run: Run) -> None:
    name = "prepare.devices-match-allocation"
    devices = run.devices[:2]
    ref = await run.claim("match", devices)
    result = await run.prepare([ref])
    if result.kubelet_error:
        run.record(name, "fail", f"prepare: {result.kubelet_error}")
        return
    # The allocation: request r{i} got devices[i] of the pool, with no shareID.
    expected = {
        (run.pool, d, (r,), None) for r, d in zip(request_names(len(devices)), devices, strict=True)
    }
    returned = {
        (d.pool_name, d.device_name, tuple(sorted(d.request_names)), d.share_id or None)
        for d in result.claims[ref.uid].devices
    }
    problems = []
    for pool, device, requests, share in sorted(returned - expected, key=str):
        problems.append(
            f"returned {pool}/{device} for requests {list(requests)}"
            + (f" shareID {share}" if share else "")
        )
    for pool, device, requests, _ in sorted(expected - returned, key=str):
        problems.append(f"allocated {pool}/{device} for request {requests[0]} not returned")
    run.verdict(name, problems, f"{len(returned)} devices as allocated, with request names")
    await run.unprepare([ref])


def _own(ids: list[str]) -> list[str]:
    """The ids of the driver's own specs: those of the first id's kind (a device's own id
    comes first; ids of other kinds name devices of another spec, such as the NVIDIA
    Container Toolkit's, which outlive the claim)."""
    kind = ids[0].partition("=")[0] if ids else ""
    return [i for i in ids if i.partition("=")[0] == kind]


async def check_cdi(run: Run) -> None:
    names = ("cdi.qualified-ids", "cdi.resolvable", "cdi.spec-valid", "cdi.spec-removed")
    cdi_dir = run.settings.cdi_dir
    ref = await run.claim("cdi", run.devices[:1])
    result = await run.prepare([ref])
    if result.kubelet_error:
        for name in names:
            run.record(name, "fail", f"prepare failed: {result.kubelet_error}")
        return
    ids = result.cdi_ids(ref.uid)
    if not ids:
        for name in names:
            run.record(name, "skip", "the driver returned no CDI device ids")
        await run.unprepare([ref])
        return
    run.verdict("cdi.qualified-ids", _qualified_problems(ids), ", ".join(ids))
    kinds = {i.partition("=")[0] for i in ids}
    invalid = invalid_specs(cdi_dir, kinds)
    run.verdict("cdi.spec-valid", invalid, f"every spec of {', '.join(sorted(kinds))} is valid")
    defined = defined_devices(cdi_dir)
    unresolved = [i for i in ids if i not in defined]
    if unresolved:
        run.record(
            "cdi.resolvable", "fail", f"no valid spec in {cdi_dir} defines {', '.join(unresolved)}"
        )
    else:
        run.record(
            "cdi.resolvable",
            "pass",
            "defined in " + ", ".join(sorted({defined[i].name for i in ids})),
        )
    unprepared = await run.unprepare([ref])
    resolved = [i for i in _own(ids) if i in defined]
    if unprepared.kubelet_error:
        run.record("cdi.spec-removed", "fail", f"unprepare: {unprepared.kubelet_error}")
    elif not resolved:
        run.record("cdi.spec-removed", "skip", "no spec file defined the claim's devices")
    else:
        remaining = defined_devices(cdi_dir)
        left = sorted({remaining[i].name for i in resolved if i in remaining})
        run.verdict(
            "cdi.spec-removed",
            [f"still defined by {', '.join(left)}"] if left else [],
            "spec files gone",
        )


async def check_unique_ids(run: Run) -> None:
    name = "cdi.unique-ids"
    if len(run.devices) < 2:
        run.record(name, "skip", "needs two devices (give --device twice)")
        return
    first = await run.claim("unique", run.devices[:1])
    second = await run.claim("unique", run.devices[1:2])
    a, b = await run.prepare([first]), await run.prepare([second])
    if a.kubelet_error or b.kubelet_error:
        run.record(name, "fail", f"prepare: {a.kubelet_error or b.kubelet_error}")
        return
    ids_a, ids_b = a.cdi_ids(first.uid), b.cdi_ids(second.uid)
    problems = [f"both claims got {i}" for i in sorted(set(ids_a) & set(ids_b))]
    await run.unprepare([first])
    remaining = defined_devices(run.settings.cdi_dir)
    problems += [
        f"{i} still resolvable through {remaining[i].name} after its claim was unprepared"
        for i in _own(ids_a)
        if i in remaining
    ]
    run.verdict(name, problems, "disjoint ids; none resolvable after unprepare")
    await run.unprepare([second])


async def check_unprepare_twice(run: Run) -> None:
    name = "unprepare.twice"
    ref = await run.claim("unprepare", run.devices[:1])
    prepared = await run.prepare([ref])
    if prepared.kubelet_error:
        run.record(name, "fail", f"prepare: {prepared.kubelet_error}")
        return
    problems = []
    for attempt in ("first", "second"):
        try:
            result = await run.unprepare([ref])
        except grpc.aio.AioRpcError as exc:
            problems.append(f"{attempt} unprepare: {rpc_error(exc)}")
            continue
        if result.kubelet_error:
            problems.append(f"{attempt} unprepare: {result.kubelet_error}")
    run.verdict(name, problems, "OK both times")


async def check_restart(run: Run) -> None:
    kept, idempotent = "restart.state-kept", "restart.unprepare-idempotent"
    if run.settings.restart is None:
        for name in (kept, idempotent):
            run.record(name, "skip", "no restart command given (--restart-cmd)")
        return
    cdi_dir = run.settings.cdi_dir
    ref = await run.claim("restart", run.devices[:1])
    first = await run.prepare([ref])
    if first.kubelet_error:
        run.record(kept, "fail", f"prepare: {first.kubelet_error}")
        return
    before = sorted(first.cdi_ids(ref.uid))
    resolvable = set(defined_devices(cdi_dir))  # unresolvable ids are cdi.resolvable's verdict
    await run.restart()
    again = await run.prepare([ref])
    after = sorted(again.cdi_ids(ref.uid)) if not again.kubelet_error else []
    missing = [i for i in after if i in resolvable and i not in defined_devices(cdi_dir)]
    if again.kubelet_error:
        run.record(kept, "fail", f"prepare after restart: {again.kubelet_error}")
    elif after != before:
        run.record(kept, "fail", f"CDI ids changed across the restart: {before} then {after}")
    elif missing:
        run.record(kept, "fail", f"after the restart no spec defines {', '.join(missing)}")
    else:
        run.record(kept, "pass", "same ids, spec present after the restart")
    run.case_started = time.monotonic()
    problems = []
    first_unprepare = await run.unprepare([ref])
    if first_unprepare.kubelet_error:
        problems.append(f"unprepare: {first_unprepare.kubelet_error}")
    await run.restart()
    second = await run.unprepare([ref])
    if second.kubelet_error:
        problems.append(f"unprepare after restart: {second.kubelet_error}")
    left = [i for i in before if i in defined_devices(cdi_dir)]
    if left:
        problems.append(f"still defined after unprepare: {', '.join(left)}")
    run.verdict(idempotent, problems, "OK after the restart, spec gone")


def check_deadline(run: Run) -> None:
    limit = run.settings.call_timeout * run.settings.deadline_fraction
    if not run.calls:
        run.record("deadline", "skip", "no call was made")
        return
    what, slowest = max(run.calls, key=lambda c: c[1])
    summary = f"slowest of {len(run.calls)} calls: {what} in {slowest:.3f}s"
    if slowest > limit:
        run.record("deadline", "fail", f"{summary} (limit {limit:.1f}s)")
    else:
        run.record("deadline", "pass", summary)


def check_atomic_write(run: Run) -> None:
    name = "cdi.atomic-write"
    watch = run.watch
    if watch is None:
        run.record(name, "skip", run.unwatched)
        return
    watch.drain()
    if watch.in_place:
        shown = sorted(watch.in_place)[:MAX_FILES_SHOWN]
        more = len(watch.in_place) - len(shown)
        files = ", ".join(shown) + (f" and {more} more" if more else "")
        run.record(name, "fail", f"written in place (a runtime may read it half-written): {files}")
    elif not watch.whole:
        run.record(name, "skip", "no spec file appeared while watching")
    else:
        run.record(name, "pass", f"{len(watch.whole)} spec files put in place whole")


STEPS: tuple[tuple[str, Callable[[Run], Awaitable[None]]], ...] = (
    ("invalid-argument.empty-uid", check_invalid_argument),
    ("unprepare.unknown-claim", check_unprepare_unknown),
    ("prepare.one-entry-per-claim", check_one_entry_per_claim),
    ("prepare.twice", check_prepare_twice),
    ("prepare.per-claim-error", check_per_claim_error),
    ("prepare.devices-match-allocation", check_devices_match),
    ("cdi.qualified-ids", check_cdi),
    ("cdi.unique-ids", check_unique_ids),
    ("unprepare.twice", check_unprepare_twice),
    ("restart.state-kept", check_restart),
)
