"""Device metadata files (``DriverSettings.device_metadata``, KEP-5304): a file per
request of a prepared claim, in upstream's format, bind-mounted read-only through the
claim's own CDI spec at upstream's container path; gone at unprepare before the devices
are released; rewritten from the record when lost; swept at start when no record owns
them; and nothing at all when the setting is off."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import dralet
from dralet.cdi import store as cdi_store
from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.testing import (
    MemoryClaims,
    allocated_claim,
    kubelet_claim,
    node_settings,
    running_node,
)
from tests.node.quietbackend import QuietBackend

DRIVER = "gpu.example.com"
UID = "5d6f0e3a-2222-4a2b-8c3d-000000000020"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"


class WithMetadata(QuietBackend):
    """Three GPUs; each prepared device reports a model attribute, a NIC its network."""

    def __init__(self) -> None:
        self.released_with_files: list[bool] = []
        self.files: MetadataFiles | None = None

    def devices(self) -> list[dralet.Device]:
        return [dralet.Device(name=f"gpu-{i}") for i in range(3)]

    def prepare_claim(self, allocation: dralet.ClaimAllocation) -> list[dralet.PreparedDevice]:
        return [
            dralet.PreparedDevice(
                edits=dralet.ContainerEdits(env=(f"GPU={d.device}",)),
                metadata=dralet.DeviceMetadata(
                    attributes={"model": "A100", "index": int(d.device[-1])},
                    network=dralet.NetworkData(interface_name="net1", ips=("10.0.0.7/24",))
                    if d.device == "gpu-2"
                    else None,
                ),
            )
            for d in allocation.devices
        ]

    def release_claim(
        self, allocation: dralet.ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        assert self.files is not None
        self.released_with_files.append(self.files.has_any(str(allocation.claim.uid)))


def setup(
    tmp: Path, *, enabled: bool = True, devices: Sequence[tuple[str, str]] | None = None
) -> tuple[dralet.DriverSettings, MemoryClaims, dict[str, Any], MetadataFiles]:
    settings = dataclasses.replace(
        node_settings(tmp / "node", driver_name=DRIVER), device_metadata=enabled
    )
    claims = MemoryClaims()
    wanted = devices or [("gpu", "gpu-0"), ("gpu", "gpu-1"), ("nic", "gpu-2")]
    claim = claims.add(allocated_claim("c", uid=UID, driver=DRIVER, devices=wanted))
    return settings, claims, claim, MetadataFiles(settings.plugin_dir)


def stream(text: str) -> list[dict[str, Any]]:
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        value, end = decoder.raw_decode(text, at)
        out.append(value)
        at = end
        while at < len(text) and text[at].isspace():
            at += 1
    return out


def spec_of(settings: dralet.DriverSettings) -> dict[str, Any]:
    document = cdi_store.SpecStore(settings.cdi_dir, settings.cdi_kind).read(UID)
    assert document is not None
    return document


def mounts_by_device(document: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {d["name"]: d["containerEdits"].get("mounts", []) for d in document["devices"]}


async def test_each_request_gets_its_file_mounted_with_its_first_device(
    short_tmp: Path,
) -> None:
    settings, claims, claim, files = setup(short_tmp)
    backend = WithMetadata()
    backend.files = files
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""

        gpu = stream(files.read(UID, "gpu") or "")
        assert [o["apiVersion"] for o in gpu] == [
            "metadata.resource.k8s.io/v1beta1",
            "metadata.resource.k8s.io/v1alpha1",
        ]
        assert gpu[0] == {
            "kind": "DeviceMetadata",
            "apiVersion": "metadata.resource.k8s.io/v1beta1",
            "metadata": {"name": "c", "namespace": "default", "uid": UID, "generation": 1},
            "requests": [
                {
                    "name": "gpu",
                    "devices": [
                        {
                            "driver": DRIVER,
                            "pool": "node-a",
                            "name": f"gpu-{i}",
                            "attributes": {"index": {"int": i}, "model": {"string": "A100"}},
                        }
                        for i in (0, 1)
                    ],
                }
            ],
        }
        assert {k: v for k, v in gpu[1].items() if k != "apiVersion"} == {
            k: v for k, v in gpu[0].items() if k != "apiVersion"
        }
        (nic,) = stream(files.read(UID, "nic") or "")[:1]
        (entry,) = nic["requests"][0]["devices"]
        assert entry["networkData"] == {"interfaceName": "net1", "ips": ["10.0.0.7/24"]}

        mounts = mounts_by_device(spec_of(settings))
        assert mounts == {
            f"{UID}-gpu-0": [
                {
                    "hostPath": str(files.path_for(UID, "gpu")),
                    "containerPath": f"{CONTAINER_DIR}/resourceclaims/c/gpu/{DRIVER}-metadata.json",
                    "options": ["ro", "bind"],
                }
            ],
            f"{UID}-gpu-1": [],
            f"{UID}-gpu-2": [
                {
                    "hostPath": str(files.path_for(UID, "nic")),
                    "containerPath": f"{CONTAINER_DIR}/resourceclaims/c/nic/{DRIVER}-metadata.json",
                    "options": ["ro", "bind"],
                }
            ],
        }

        assert (await node.unprepare(claim)).kubelet_error == ""
        assert backend.released_with_files == [False]
        assert files.claim_uids() == []


async def test_a_template_claim_and_a_subrequest_use_upstreams_names(short_tmp: Path) -> None:
    settings, claims, claim, files = setup(short_tmp, devices=[("gpu/large", "gpu-0")])
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "my-gpu"}
    backend = WithMetadata()
    backend.files = files
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        (document, _) = stream(files.read(UID, "gpu") or "")
        assert document["podClaimName"] == "my-gpu"
        assert document["requests"][0]["name"] == "gpu/large"
        (mount,) = mounts_by_device(spec_of(settings))[f"{UID}-gpu-0"]
        assert mount["containerPath"] == (
            f"{CONTAINER_DIR}/resourceclaimtemplates/my-gpu/gpu/{DRIVER}-metadata.json"
        )


async def test_off_by_default_writes_and_mounts_nothing(short_tmp: Path) -> None:
    settings, claims, claim, files = setup(short_tmp, enabled=False)
    assert dralet.DriverSettings(driver_name=DRIVER, node_name="n").device_metadata is False
    backend = WithMetadata()
    backend.files = files
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        assert files.claim_uids() == []
        assert all(m == [] for m in mounts_by_device(spec_of(settings)).values())


async def test_a_lost_file_is_rewritten_from_the_record(short_tmp: Path) -> None:
    settings, claims, claim, files = setup(short_tmp)
    backend = WithMetadata()
    backend.files = files
    async with running_node(settings, backend, claims=claims) as node:
        first = await node.prepare(claim)
        written = files.read(UID, "gpu")
        files.path_for(UID, "gpu").unlink()

        again = await node.prepare(claim)

        assert again.cdi_ids(UID) == first.cdi_ids(UID)
        assert files.read(UID, "gpu") == written


async def test_files_no_record_owns_are_swept_at_start(short_tmp: Path) -> None:
    settings, claims, claim, files = setup(short_tmp)
    backend = WithMetadata()
    backend.files = files
    settings.plugin_dir.mkdir(parents=True)
    files.write("0e0e0e0e-9999-4a2b-8c3d-000000000099", {"gpu": "{}\n"})
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        assert files.claim_uids() == [UID]


async def test_bad_network_data_fails_the_claim_and_leaves_nothing(short_tmp: Path) -> None:
    settings, claims, claim, files = setup(short_tmp, devices=[("nic", "gpu-2")])

    class BadNetwork(WithMetadata):
        def prepare_claim(self, allocation: dralet.ClaimAllocation) -> list[dralet.PreparedDevice]:
            bad = dralet.DeviceMetadata(network=dralet.NetworkData(ips=("10.0.0.7",)))
            return [dralet.PreparedDevice(edits=dralet.ContainerEdits(env=("A=1",)), metadata=bad)]

    backend = BadNetwork()
    backend.files = files
    async with running_node(settings, backend, claims=claims) as node:
        result = await node.prepare(claim)
        error = result.claims[UID].error
        assert "device metadata of gpu-2" in error
        assert "CIDR" in error
        assert files.claim_uids() == []
        assert not cdi_store.SpecStore(settings.cdi_dir, settings.cdi_kind).exists(UID)
        assert backend.released_with_files == [False]


@pytest.mark.parametrize("request_name", ["../x", "Bad_Name"])
async def test_a_request_name_that_is_no_dns_label_is_refused(
    short_tmp: Path, request_name: str
) -> None:
    settings, claims, claim, files = setup(short_tmp, devices=[(request_name, "gpu-0")])
    backend = WithMetadata()
    backend.files = files
    async with running_node(settings, backend, claims=claims) as node:
        result = await node.prepare(claim)
        assert "device metadata: request" in result.claims[UID].error
        assert files.claim_uids() == []
        assert not (settings.plugin_dir / "x").exists()


async def test_the_versions_written_are_a_setting(short_tmp: Path) -> None:
    settings, claims, claim, files = setup(short_tmp)
    settings = dataclasses.replace(settings, device_metadata_versions=("v1", "v1beta1"))
    async with running_node(settings, WithMetadata(), claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        gpu = stream(files.read(UID, "gpu") or "")
        assert [o["apiVersion"] for o in gpu] == [
            "metadata.resource.k8s.io/v1",
            "metadata.resource.k8s.io/v1beta1",
        ]
        assert {k: v for k, v in gpu[0].items() if k != "apiVersion"} == {
            k: v for k, v in gpu[1].items() if k != "apiVersion"
        }


@pytest.mark.parametrize("versions", [(), ("v1", "v1"), ("1.0",), ("v1beta1", "V1")])
def test_metadata_versions_must_be_distinct_api_versions(
    short_tmp: Path, versions: tuple[str, ...]
) -> None:
    with pytest.raises(ValueError, match="device_metadata_versions"):
        node_settings(short_tmp, device_metadata_versions=versions)


async def test_a_prepared_requests_metadata_is_updated_in_place(short_tmp: Path) -> None:
    settings, claims, claim, files = setup(short_tmp)
    ref = dralet.ClaimRef(dralet.ClaimUID(UID), "default", "c")
    backend = WithMetadata()
    backend.files = files
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        before = stream(files.read(UID, "nic") or "")
        late = dralet.DeviceMetadata(
            attributes={"ip": "10.1.2.3"},
            network=dralet.NetworkData(interface_name="eth7", ips=("10.1.2.3/16",)),
        )
        generation = await node.driver.update_request_metadata(ref, "nic", {"gpu-2": late})
        assert generation == 2
        after = stream(files.read(UID, "nic") or "")
        assert [o["apiVersion"] for o in after] == [o["apiVersion"] for o in before]
        assert after[0]["metadata"]["generation"] == 2
        (entry,) = after[0]["requests"][0]["devices"]
        assert entry == {
            "driver": DRIVER,
            "pool": "node-a",
            "name": "gpu-2",
            "attributes": {"ip": {"string": "10.1.2.3"}},
            "networkData": {"interfaceName": "eth7", "ips": ["10.1.2.3/16"]},
        }
        assert stream(files.read(UID, "gpu") or "")[0]["metadata"]["generation"] == 1
        record = node.driver.engine.known_claims()[UID]
        assert record.device_metadata["nic"] == files.read(UID, "nic")
        assert await node.driver.update_request_metadata(ref, "nic", {}) == 3
        with pytest.raises(dralet.PermanentError, match="not in this request"):
            await node.driver.update_request_metadata(ref, "gpu", {"gpu-2": late})
        with pytest.raises(dralet.PermanentError, match="no device metadata for request"):
            await node.driver.update_request_metadata(ref, "other", {})
        assert (await node.unprepare(claim)).kubelet_error == ""
        with pytest.raises(dralet.PermanentError, match="is not prepared"):
            await node.driver.update_request_metadata(ref, "nic", {})


async def test_metadata_updates_need_device_metadata_on(short_tmp: Path) -> None:
    settings, claims, claim, _ = setup(short_tmp, enabled=False)
    ref = dralet.ClaimRef(dralet.ClaimUID(UID), "default", "c")
    async with running_node(settings, WithMetadata(), claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        with pytest.raises(dralet.PermanentError, match="not enabled"):
            await node.driver.update_request_metadata(ref, "gpu", {})


def test_dralet_run_takes_the_versions_and_refuses_bad_ones(short_tmp: Path) -> None:
    from click.testing import CliRunner

    from dralet.cli import run

    defaults = {param.name: param.default for param in run.command.params}
    assert defaults["device_metadata_versions"] == "v1beta1,v1alpha1"
    result = CliRunner().invoke(
        run.command,
        ["--node-name", "n1", "--standalone", "--device-metadata-versions", "v1,v1"],
    )
    assert result.exit_code == 2
    assert "device_metadata_versions ('v1', 'v1')" in result.output


class UpdatesLater(WithMetadata):
    """Keeps the update function the driver hands it, as a network driver would."""

    update: Any = None

    def use_update_request_metadata(self, update: Any) -> None:
        self.update = update


async def test_a_backend_gets_the_update_function_from_the_driver(short_tmp: Path) -> None:
    from dralet.kubelet import KubeletEmulator

    driver_settings, claims, claim, files = setup(short_tmp)
    backend = UpdatesLater()
    backend.files = files
    settings = dralet.Settings(driver_settings, api=dralet.ApiSettings(standalone=True))
    kubelet = KubeletEmulator(driver_settings.registry_dir, kubelet_version="1.38")
    async with dralet.Driver(backend, settings, claims=claims):
        plugin = await kubelet.wait_for_plugin(DRIVER, within=20.0)
        assert (await plugin.prepare([kubelet_claim(claim)])).kubelet_error == ""
        assert backend.update is not None
        ref = dralet.ClaimRef(dralet.ClaimUID(UID), "default", "c")
        late = dralet.DeviceMetadata(attributes={"ip": "10.9.9.9"})
        assert await backend.update(ref, "gpu", {"gpu-0": late}) == 2
        (entry, _) = stream(files.read(UID, "gpu") or "")[0]["requests"][0]["devices"]
        assert entry["attributes"] == {"ip": {"string": "10.9.9.9"}}
        assert (await plugin.unprepare([kubelet_claim(claim)])).kubelet_error == ""
        await kubelet.close()
