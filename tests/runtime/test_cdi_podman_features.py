"""Every CDI feature dralet can emit, written through ``SpecStore`` and resolved by podman.

Each test builds a spec with ``dralet.cdi.spec``, writes it as a claim's spec file, runs
a real container given the device, and checks that the container got exactly the
edits: nothing missing, nothing extra (compared with a container given no device).
Podman 4.3.1's CDI library accepts cdiVersion up to 0.5.0, so features that need 0.6.0
or later are shown to be refused, for the reason the library gives.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.harness import podman

from dralet.cdi import spec, store

pytestmark = pytest.mark.runtime

KIND = "gpu.example.com/claim"  # what the example driver writes
CLAIM_UID = "0b9f1c2e-5d4a-4c3b-9e8f-7a6b5c4d3e2f"
HOST_NULL = (1, 3)  # /dev/null on every Linux host
HOST_ZERO = (1, 5)
FAKE_UID = 1000
FAKE_GID = 1001
OWNER_RW = 0o600
WORLD_RW = 0o666
HOOK_TIMEOUT_S = 10


def write_claim_spec(cdi_dir: Path, value: spec.Spec, claim_uid: str = CLAIM_UID) -> dict[str, Any]:
    """Write ``value`` as ``claim_uid``'s spec file the way the driver does."""
    document = spec.to_json(value)
    path = store.SpecStore(cdi_dir, value.kind).write(claim_uid, document)
    vendor, _, cdi_class = value.kind.partition("/")
    assert path.name == f"{vendor}-{cdi_class}_{claim_uid}.json"
    return document


def one_device(name: str, edits: spec.ContainerEdits, **kwargs: Any) -> spec.Spec:
    return spec.Spec(kind=KIND, devices=(spec.CDIDevice(name, edits),), **kwargs)


def test_env(cdi_dir: Path, baseline: podman.ContainerRun) -> None:
    document = write_claim_spec(
        cdi_dir, one_device("gpu0", spec.ContainerEdits(env=("GPU_ID=0", "GPU_MODE=shared=1")))
    )
    assert document["cdiVersion"] == "0.3.0"

    run = podman.run_container(cdi_dir, [f"{KIND}=gpu0"])

    assert run.ok, run.stderr
    changes = run.changes_from(baseline)
    assert changes.env == {"GPU_ID": "0", "GPU_MODE": "shared=1"}
    assert changes.dev == {}
    assert changes.mounts == ()


def test_device_node_with_host_path(cdi_dir: Path, baseline: podman.ContainerRun) -> None:
    node = spec.DeviceNode(path="/dev/fakegpu0", host_path="/dev/null", permissions="rw")
    document = write_claim_spec(
        cdi_dir, one_device("gpu0", spec.ContainerEdits(device_nodes=(node,)))
    )
    assert document["cdiVersion"] == "0.5.0"

    # The node's cgroup rule allows what permissions say: writing succeeds.
    run = podman.run_container(
        cdi_dir, [f"{KIND}=gpu0"], command=["sh", "-c", "echo x > /dev/fakegpu0"]
    )

    assert run.ok, run.stderr
    changes = run.changes_from(baseline)
    assert changes.dev == {
        "/dev/fakegpu0": podman.DeviceFile("/dev/fakegpu0", "c", *HOST_NULL, WORLD_RW, 0, 0)
    }
    assert changes.env == {}
    assert changes.mounts == ()


def test_device_node_from_type_major_minor_without_host_node(
    cdi_dir: Path, baseline: podman.ContainerRun
) -> None:
    missing = "/dev/dralet-no-such-node"
    assert not os.path.lexists(missing)
    node = spec.DeviceNode(
        path="/dev/fakegpu1",
        host_path=missing,
        type="c",
        major=HOST_ZERO[0],
        minor=HOST_ZERO[1],
        file_mode=OWNER_RW,
        uid=FAKE_UID,
        gid=FAKE_GID,
    )
    write_claim_spec(cdi_dir, one_device("gpu1", spec.ContainerEdits(device_nodes=(node,))))

    run = podman.run_container(cdi_dir, [f"{KIND}=gpu1"])

    assert run.ok, run.stderr
    assert run.changes_from(baseline).dev == {
        "/dev/fakegpu1": podman.DeviceFile(
            "/dev/fakegpu1", "c", *HOST_ZERO, OWNER_RW, FAKE_UID, FAKE_GID
        )
    }
    assert not os.path.lexists(missing)


def test_mounts_with_options_and_type(
    cdi_dir: Path, tmp_path: Path, baseline: podman.ContainerRun
) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "model.bin").write_text("weights\n")
    edits = spec.ContainerEdits(
        mounts=(
            spec.Mount(str(share), "/mnt/share", options=("ro", "bind", "nosuid")),
            spec.Mount("tmpfs", "/mnt/scratch", options=("nosuid", "size=1m"), type="tmpfs"),
        )
    )
    document = write_claim_spec(cdi_dir, one_device("gpu0", edits))
    assert document["cdiVersion"] == "0.4.0"

    run = podman.run_container(
        cdi_dir,
        [f"{KIND}=gpu0"],
        command=["sh", "-c", "cat /mnt/share/model.bin; ! touch /mnt/share/x 2>/dev/null"],
    )

    assert run.ok, run.stderr
    assert run.stdout == "weights\n"
    changes = run.changes_from(baseline)
    by_target = {m.target: m for m in changes.mounts}
    assert sorted(by_target) == ["/mnt/scratch", "/mnt/share"]
    shared, scratch = by_target["/mnt/share"], by_target["/mnt/scratch"]
    assert shared.read_only
    assert "nosuid" in shared.options
    assert scratch.fstype == "tmpfs"
    assert not scratch.read_only
    assert {"nosuid", "size=1024k"} <= set(scratch.options)
    assert changes.env == {}
    assert changes.dev == {}
    assert not (share / "x").exists()


def test_hooks_run_on_the_host_with_the_container_state(cdi_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "hooks"
    out.mkdir()
    hooks = tuple(
        spec.Hook(
            hook_name=stage,
            path="/bin/sh",
            args=("sh", "-c", f'cat > {out}/{stage}.json; echo "$HOOK_STAGE" > {out}/{stage}.env'),
            env=(f"HOOK_STAGE={stage}",),
            timeout=HOOK_TIMEOUT_S,
        )
        for stage in ("createRuntime", "poststop")
    )
    write_claim_spec(cdi_dir, one_device("gpu0", spec.ContainerEdits(env=("GPU=0",), hooks=hooks)))

    run = podman.run_container(cdi_dir, [f"{KIND}=gpu0"])

    assert run.ok, run.stderr
    for stage in ("createRuntime", "poststop"):
        state = json.loads((out / f"{stage}.json").read_text())
        assert state["id"]
        assert state["ociVersion"]
        assert (out / f"{stage}.env").read_text() == f"{stage}\n"


def test_spec_level_edits_apply_once_for_any_device_of_the_spec(
    cdi_dir: Path, baseline: podman.ContainerRun
) -> None:
    value = spec.Spec(
        kind=KIND,
        devices=(
            spec.CDIDevice("gpu0", spec.ContainerEdits(env=("GPU0=yes",))),
            spec.CDIDevice("gpu1", spec.ContainerEdits(env=("GPU1=yes",))),
        ),
        container_edits=spec.ContainerEdits(
            env=("DRIVER_LEVEL=yes",),
            device_nodes=(spec.DeviceNode(path="/dev/fakectl", host_path="/dev/null"),),
        ),
    )
    write_claim_spec(cdi_dir, value)

    both = podman.run_container(cdi_dir, [f"{KIND}=gpu0", f"{KIND}=gpu1"])
    one = podman.run_container(cdi_dir, [f"{KIND}=gpu1"])

    assert both.ok, both.stderr
    assert one.ok, one.stderr
    assert both.changes_from(baseline).env == {"DRIVER_LEVEL": "yes", "GPU0": "yes", "GPU1": "yes"}
    assert one.changes_from(baseline).env == {"DRIVER_LEVEL": "yes", "GPU1": "yes"}
    for run in (both, one):
        assert list(run.changes_from(baseline).dev) == ["/dev/fakectl"]


def test_device_name_starting_with_a_digit_needs_0_5_0(
    cdi_dir: Path, baseline: podman.ContainerRun
) -> None:
    document = write_claim_spec(cdi_dir, one_device("0", spec.ContainerEdits(env=("GPU=0",))))
    assert document["cdiVersion"] == "0.5.0"

    run = podman.run_container(cdi_dir, [f"{KIND}=0"])

    assert run.ok, run.stderr
    assert run.changes_from(baseline).env == {"GPU": "0"}


def test_claim_uid_device_names(cdi_dir: Path, baseline: podman.ContainerRun) -> None:
    claim_uid = str(uuid.uuid4())
    names = [f"{claim_uid}-gpu0", f"{claim_uid}_mig-1g.5gb:0"]
    value = spec.Spec(
        kind=KIND,
        devices=tuple(
            spec.CDIDevice(name, spec.ContainerEdits(env=(f"DEV{i}={name}",)))
            for i, name in enumerate(names)
        ),
    )
    write_claim_spec(cdi_dir, value, claim_uid=claim_uid)

    run = podman.run_container(cdi_dir, value.qualified_names())

    assert run.ok, run.stderr
    assert run.changes_from(baseline).env == {"DEV0": names[0], "DEV1": names[1]}


@pytest.mark.parametrize(
    ("value", "needs", "field"),
    [
        pytest.param(
            one_device("gpu0", spec.ContainerEdits(env=("A=1",)), annotations={"a.io/b": "c"}),
            "0.6.0",
            "annotations",
            id="spec-annotations",
        ),
        pytest.param(
            spec.Spec(
                kind=KIND,
                devices=(
                    spec.CDIDevice(
                        "gpu0", spec.ContainerEdits(env=("A=1",)), annotations={"a.io/b": "c"}
                    ),
                ),
            ),
            "0.6.0",
            "annotations",
            id="device-annotations",
        ),
        pytest.param(
            one_device("gpu0", spec.ContainerEdits(env=("A=1",), additional_gids=(FAKE_GID,))),
            "0.7.0",
            "additionalGids",
            id="additional-gids",
        ),
    ],
)
def test_features_needing_0_6_0_or_later_are_refused_by_podman_4_3(
    cdi_dir: Path, value: spec.Spec, needs: str, field: str
) -> None:
    assert spec.minimum_version(value) == needs
    document = write_claim_spec(cdi_dir, value)
    assert document["cdiVersion"] == needs

    run = podman.run_container(cdi_dir, value.qualified_names())

    # Its library parses strictly before it looks at the version: the field is unknown.
    assert run.unresolvable, (run.exit_code, run.stderr)
    assert run.cdi_error is not None
    assert f'json: unknown field "{field}"' in run.cdi_error


def test_dotted_class_is_not_even_a_cdi_name_to_podman_4_3(cdi_dir: Path) -> None:
    value = spec.Spec(
        kind="example.com/gpu.v2",
        devices=(spec.CDIDevice("gpu0", spec.ContainerEdits(env=("A=1",))),),
    )
    assert spec.minimum_version(value) == "0.6.0"
    write_claim_spec(cdi_dir, value)

    run = podman.run_container(cdi_dir, value.qualified_names())

    # Its library (v0.5.x) allows no '.' in a class: the id is taken for a host path.
    assert run.podman_failed
    assert run.exit_code == podman.EXIT_PODMAN_ERROR
    assert "stat example.com/gpu.v2=gpu0: no such file or directory" in run.stderr


@pytest.mark.parametrize(
    ("cdi_version", "accepted"),
    [("0.3.0", True), ("0.4.0", True), ("0.5.0", True), ("0.6.0", False), ("1.1.0", False)],
)
def test_podman_4_3_accepts_spec_versions_up_to_0_5_0(
    cdi_dir: Path, cdi_version: str, accepted: bool
) -> None:
    # The same env-only spec under each version: only the version decides.
    document = spec.to_json(one_device("gpu0", spec.ContainerEdits(env=("A=1",))))
    document["cdiVersion"] = cdi_version
    spec.from_json(document)  # every one is a valid spec for dralet
    (cdi_dir / "gpu.example.com-claim_raw.json").write_text(json.dumps(document))

    run = podman.run_container(cdi_dir, [f"{KIND}=gpu0"])

    if accepted:
        assert run.ok, run.stderr
        assert run.env["A"] == "1"
    else:
        assert run.unresolvable
        assert run.cdi_error is not None
        assert f'invalid version "{cdi_version}"' in run.cdi_error


def test_spec_files_are_world_readable_and_the_host_dirs_untouched(cdi_dir: Path) -> None:
    before = {p: os.path.lexists(p) for p in ("/etc/cdi", "/var/run/cdi")}
    write_claim_spec(cdi_dir, one_device("gpu0", spec.ContainerEdits(env=("A=1",))))
    (path,) = cdi_dir.iterdir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644

    run = podman.run_container(cdi_dir, [f"{KIND}=gpu0"])

    assert run.ok, run.stderr
    assert {p: os.path.lexists(p) for p in before} == before
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        assert not [line for line in mounts if " /etc/cdi " in line or " /run/cdi " in line]
