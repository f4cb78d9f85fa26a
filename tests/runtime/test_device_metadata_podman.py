"""Device metadata through a real CDI consumer: podman, given the CDI ids a prepare
returned for a request's devices, bind-mounts the request's metadata file read-only at
upstream's path; once the claim is unprepared the ids no longer resolve."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest
from tests.harness import podman
from tests.node.test_device_metadata import DRIVER, UID, WithMetadata

from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.testing import MemoryClaims, allocated_claim, node_settings, running_node

pytestmark = pytest.mark.runtime

IN_CONTAINER = (
    f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c/gpu/{DRIVER}-metadata.json"
)


async def test_the_container_reads_its_requests_metadata_file(
    short_tmp: Path, podman_settings: podman.PodmanSettings
) -> None:
    settings = dataclasses.replace(
        node_settings(short_tmp / "node", driver_name=DRIVER), device_metadata=True
    )
    claims = MemoryClaims()
    claim = claims.add(
        allocated_claim("c", uid=UID, driver=DRIVER, devices=[("gpu", "gpu-0"), ("gpu", "gpu-1")])
    )
    backend = WithMetadata()
    backend.files = MetadataFiles(settings.plugin_dir)
    async with running_node(settings, backend, claims=claims) as node:
        prepared = await node.prepare(claim)
        assert prepared.kubelet_error == ""
        ids = prepared.cdi_ids(UID)

        run = await asyncio.to_thread(
            podman.run_container,
            settings.cdi_dir,
            ids,
            command=["sh", "-c", f"cat {IN_CONTAINER} && ! touch {IN_CONTAINER} 2>/dev/null"],
            settings=podman_settings,
        )

        assert run.ok, run.stderr
        first = json.JSONDecoder().raw_decode(run.stdout)[0]
        assert first["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
        assert [d["name"] for d in first["requests"][0]["devices"]] == ["gpu-0", "gpu-1"]
        mount = next(m for m in run.mounts if m.target == IN_CONTAINER)
        assert "ro" in mount.options

        assert (await node.unprepare(claim)).kubelet_error == ""
        gone = await asyncio.to_thread(
            podman.run_container, settings.cdi_dir, ids, settings=podman_settings
        )
        assert gone.unresolvable
