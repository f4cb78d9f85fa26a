"""Random request sequences against an in-process claim engine, with crashes, restarts, reboots
and disk errors in between; after every step the node must be consistent.

Invariants after each step: the auditor finds nothing (every spec has a completed record
and vice versa, no device in use without a record, none recorded twice, finalizers match
prepared claims); a claim unprepared successfully is gone everywhere; a claim prepared
successfully holds exactly its devices.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dralet import failpoints
from tests.recovery.nodekit import EngineNode, SimulatedCrash, crash_at

CLAIMS = 4
GPUS = 3
MAX_STEPS = 12
EXAMPLES = 150

claim_sets = st.lists(st.integers(0, CLAIMS - 1), min_size=1, max_size=3, unique=True)
crash_points = st.sampled_from(sorted(failpoints.known()))
error_points = st.sampled_from(
    sorted(n for n in failpoints.known() if n.startswith(("cdi.write", "checkpoint.write")))
)
steps = st.one_of(
    st.tuples(st.just("prepare"), claim_sets),
    st.tuples(st.just("unprepare"), claim_sets),
    st.tuples(st.just("crash-prepare"), claim_sets, crash_points, st.integers(1, 3)),
    st.tuples(st.just("crash-unprepare"), claim_sets, crash_points, st.integers(1, 3)),
    st.tuples(
        st.just("error-prepare"), claim_sets, error_points, st.sampled_from(["enospc", "eacces"])
    ),
    st.tuples(st.just("restart")),
    st.tuples(st.just("reboot"), st.booleans()),
)
allocations = st.lists(
    st.lists(st.integers(0, GPUS - 1), min_size=1, max_size=2, unique=True),
    min_size=CLAIMS,
    max_size=CLAIMS,
)


@contextlib.contextmanager
def node_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dralet-prop-") as root:
        yield Path(root)


async def _restart(node: EngineNode, *, boot_id: str | None = None, survives: bool = True) -> None:
    await node.engine.work.cancel_all()  # a dead process's in-flight work dies with it
    await node.restart(boot_id=boot_id, survives_reboot=survives).recover()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(allocation=allocations, sequence=st.lists(steps, max_size=MAX_STEPS))
async def test_random_sequences_keep_the_node_consistent(
    allocation: list[list[int]], sequence: list[tuple[object, ...]]
) -> None:
    with node_root() as root:
        node = EngineNode.create(root, gpus=GPUS)
        await node.engine.recover()
        refs = [
            node.add_claim(f"c{i}", *(f"gpu-{g}" for g in sorted(devices)))
            for i, devices in enumerate(allocation)
        ]
        boots = 1
        for step in sequence:
            kind = step[0]
            chosen = (
                [refs[i] for i in step[1]] if len(step) > 1 and isinstance(step[1], list) else []
            )
            if kind == "prepare":
                outcomes = await node.prepare(*chosen)
                for ref in chosen:
                    if not outcomes[ref.uid].error:
                        devices = allocation[refs.index(ref)]
                        node.assert_prepared(ref, *(f"gpu-{g}" for g in devices))
            elif kind == "unprepare":
                outcomes_u = await node.unprepare(*chosen)
                for ref in chosen:
                    assert outcomes_u[ref.uid] == ""
                    node.assert_gone(ref)
            elif kind in ("crash-prepare", "crash-unprepare"):
                point, nth = str(step[2]), int(str(step[3]))
                call = node.prepare if kind == "crash-prepare" else node.unprepare
                with crash_at(point, nth=nth), contextlib.suppress(SimulatedCrash):
                    await call(*chosen)
                await _restart(node)
            elif kind == "error-prepare":
                failpoints.arm(str(step[2]), str(step[3]), nth=1)
                try:
                    await node.prepare(*chosen)
                finally:
                    failpoints.disarm()
            elif kind == "restart":
                await _restart(node)
            elif kind == "reboot":
                boots += 1
                shutil.rmtree(node.settings.cdi_dir, ignore_errors=True)
                await _restart(node, boot_id=f"boot-{boots}", survives=bool(step[1]))
            assert await node.findings() == [], f"after {step}"
        # Whatever happened, unpreparing everything leaves nothing behind.
        assert set((await node.unprepare(*refs)).values()) == {""}
        for ref in refs:
            node.assert_gone(ref)
        assert node.backend.in_use() == {}
        await node.engine.work.cancel_all()
