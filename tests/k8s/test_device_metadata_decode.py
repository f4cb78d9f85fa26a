"""The device metadata files dralet writes, read by upstream's own reader: the
``devicemetadata`` package of k8s.io/dynamic-resource-allocation v0.37.2 with its
declarative validation (``devicemetadata-decode``, built by ``make k8s``). Each file must
decode as v1beta1 and validate; its second object alone must decode as v1alpha1, as a
reader built against 1.36 takes it; and what the reader decodes must be what was written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.testing import MemoryClaims, allocated_claim, node_settings, running_node
from tests.k8scluster import Release, binary_dir
from tests.node.test_device_metadata import DRIVER, UID, WithMetadata, stream

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release]

CASES = {
    "plain": ([("gpu", "gpu-0"), ("gpu", "gpu-1"), ("nic", "gpu-2")], {}),
    "template-subrequest": (
        [("gpu/large", "gpu-0")],
        {"resource.kubernetes.io/pod-claim-name": "my-gpu"},
    ),
}


def decoder(release: Release) -> Path:
    """Upstream's reader at ``release`` (k8s.io/dynamic-resource-allocation of that release)."""
    path = binary_dir(release) / "devicemetadata-decode"
    if not path.is_file():
        reason = f"{path} is missing: run make k8s"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


def decode(tool: Path, path: Path) -> dict[str, Any]:
    done = subprocess.run([str(tool), str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("case", list(CASES))
async def test_upstreams_reader_decodes_and_validates_every_file(
    short_tmp: Path, case: str, k8s_release: Release
) -> None:
    tool = decoder(k8s_release)
    devices, annotations = CASES[case]
    settings = dataclasses.replace(
        node_settings(short_tmp / "node", driver_name=DRIVER), device_metadata=True
    )
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c", uid=UID, driver=DRIVER, devices=devices))
    claim["metadata"]["annotations"] = annotations
    files = MetadataFiles(settings.plugin_dir)
    backend = WithMetadata()
    backend.files = files
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        requests = sorted({request.partition("/")[0] for request, _ in devices})
        for request in requests:
            path = files.path_for(UID, request)
            written = stream(path.read_text())

            newest = decode(tool, path)
            assert newest["decoded"] == "metadata.resource.k8s.io/v1beta1"
            assert newest["invalid"] == ""
            assert newest["object"] == written[0]

            alone = short_tmp / f"{request}-v1alpha1.json"
            alone.write_text(json.dumps(written[1]))
            older = decode(tool, alone)
            assert older["decoded"] == "metadata.resource.k8s.io/v1alpha1"
            assert older["invalid"] == ""
