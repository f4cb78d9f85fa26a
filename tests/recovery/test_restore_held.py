"""At start a backend with a ``restore_held`` hook is told what dralet's records hold,
each device with the state its prepare returned; one without the hook costs nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

import dralet
from dralet.checkpoint.model import Checkpoint
from dralet.node.claims import findings
from dralet.testing import MemoryDevices
from tests.recovery.nodekit import EngineNode


class Remembering(MemoryDevices):
    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.told: list[dralet.HeldDevice] = []

    def restore_held(self, held: Sequence[dralet.HeldDevice]) -> None:
        self.told = list(held)


async def test_the_records_are_told_only_to_a_backend_that_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = EngineNode.create(tmp_path)
    ref = node.add_claim("a", "gpu-1")
    assert not (await node.prepare(ref))[ref.uid].error
    records = node.checkpoint()

    built: list[int] = []
    real = findings.held_devices  # type: ignore[attr-defined]

    def counted(checkpoint: Checkpoint) -> tuple[dralet.HeldDevice, ...]:
        built.append(1)
        return real(checkpoint)

    monkeypatch.setattr(findings, "held_devices", counted)
    await findings.take_snapshot(node.settings, backend=MemoryDevices(4))
    assert built == []  # no hook: nothing built for it

    asking = Remembering(4)
    await findings.take_snapshot(node.settings, backend=asking)
    assert built == [1]
    assert [(h.claim, h.device) for h in asking.told] == [(ref.uid, "gpu-1")]
    assert asking.told[0].state == dict(records.claims[ref.uid].devices[0].prepared_state)
