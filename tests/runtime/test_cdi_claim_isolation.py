"""Two claims' spec files in one CDI directory, as a node with two prepared claims has.

A container given claim A's device sees A's edits only; once A is unprepared (its spec
file removed) the same run is refused as unresolvable, while B still resolves.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from tests.harness import podman

from dralet.cdi import spec, store

pytestmark = pytest.mark.runtime

KIND = "gpu.example.com/claim"  # what the example driver writes
CLAIM_A = "6f1e2d3c-aaaa-4b5a-8c7d-000000000001"
CLAIM_B = "6f1e2d3c-bbbb-4b5a-8c7d-000000000002"


# The harness creates missing CDI mount points for a run and removes them after.
def host_cdi_dirs() -> list[bool]:
    return [os.path.lexists(p) for p in ("/etc/cdi", "/run/cdi")]


HOST_CDI_DIRS_BEFORE = host_cdi_dirs()


def claim_spec(claim_uid: str, label: str, host_node: str) -> spec.Spec:
    return spec.Spec(
        kind=KIND,
        devices=(
            spec.CDIDevice(
                f"{claim_uid}-gpu0",
                spec.ContainerEdits(
                    env=(f"CLAIM_{label}=1", f"GPU_OWNER={label}"),
                    device_nodes=(spec.DeviceNode(path=f"/dev/gpu-{label}", host_path=host_node),),
                ),
            ),
        ),
        container_edits=spec.ContainerEdits(env=(f"SPEC_{label}=1",)),
    )


def test_a_claims_device_gets_only_that_claims_edits_and_goes_with_its_spec(
    cdi_dir: Path, baseline: podman.ContainerRun
) -> None:
    specs = store.SpecStore(cdi_dir, KIND)
    spec_a = claim_spec(CLAIM_A, "A", "/dev/null")
    spec_b = claim_spec(CLAIM_B, "B", "/dev/zero")
    specs.write(CLAIM_A, spec.to_json(spec_a))
    specs.write(CLAIM_B, spec.to_json(spec_b))
    assert [f.claim_uid for f in specs.scan()] == [CLAIM_A, CLAIM_B]
    (device_a,) = spec_a.qualified_names()
    (device_b,) = spec_b.qualified_names()

    run_a = podman.run_container(cdi_dir, [device_a])

    assert run_a.ok, run_a.stderr
    changes = run_a.changes_from(baseline)
    assert changes.env == {"CLAIM_A": "1", "GPU_OWNER": "A", "SPEC_A": "1"}
    assert list(changes.dev) == ["/dev/gpu-A"]
    assert changes.mounts == ()

    assert specs.remove(CLAIM_A)
    gone = podman.run_container(cdi_dir, [device_a])

    assert gone.unresolvable
    assert gone.exit_code == podman.EXIT_CANNOT_INVOKE
    assert f"unresolvable CDI devices {device_a}" in gone.stderr
    assert not gone.env

    run_b = podman.run_container(cdi_dir, [device_b])
    assert run_b.ok, run_b.stderr
    assert run_b.changes_from(baseline).env == {"CLAIM_B": "1", "GPU_OWNER": "B", "SPEC_B": "1"}


def test_one_unresolvable_device_means_nothing_is_injected(cdi_dir: Path) -> None:
    specs = store.SpecStore(cdi_dir, KIND)
    spec_b = claim_spec(CLAIM_B, "B", "/dev/zero")
    specs.write(CLAIM_B, spec.to_json(spec_b))

    run = podman.run_container(cdi_dir, [*spec_b.qualified_names(), f"{KIND}={CLAIM_A}-gpu0"])

    assert run.unresolvable
    assert not run.started


async def test_concurrent_runs_from_an_async_test(cdi_dir: Path, tmp_path: Path) -> None:
    # How the driver end-to-end tests call the harness: in threads, several at once.
    specs = store.SpecStore(cdi_dir, KIND)
    spec_a = claim_spec(CLAIM_A, "A", "/dev/null")
    spec_b = claim_spec(CLAIM_B, "B", "/dev/zero")
    specs.write(CLAIM_A, spec.to_json(spec_a))
    specs.write(CLAIM_B, spec.to_json(spec_b))
    requests = [spec_a.qualified_names(), spec_b.qualified_names(), [f"{KIND}=missing"]]

    runs = await asyncio.gather(
        *(asyncio.to_thread(podman.run_container, cdi_dir, devices) for devices in requests)
    )

    assert [run.env.get("GPU_OWNER") for run in runs] == ["A", "B", None]
    assert runs[2].unresolvable
    assert host_cdi_dirs() == HOST_CDI_DIRS_BEFORE
