"""Device metadata (KEP-5304): per prepared claim, one file per request that tells the
workload which devices it got, mounted read-only into the containers that get the
request's devices, through the claim's own CDI spec.

Upstream facts, k8s.io/dynamic-resource-allocation v0.37.2:

- ``api/metadata/types.go``, ``helpers.go``: in the container the file is
  ``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/
  <driver>-metadata.json``, or ``.../resourceclaimtemplates/<pod claim name>/...`` for a
  claim generated from a template (the claim's ``resource.kubernetes.io/pod-claim-name``
  annotation, k8s.io/api resource/v1 ``PodResourceClaimAnnotation``).
- ``api/metadata/v1beta1/types.go`` (v1alpha1 has the same fields): kind
  ``DeviceMetadata`` of ``metadata.resource.k8s.io``; ``metadata`` (name, namespace, uid,
  generation), ``podClaimName``, ``requests[{name, devices[{driver, pool, name,
  attributes, networkData}]}]``.
- ``kubeletplugin/metadata.go``: the file is a JSON stream holding the same object once
  per version, newest first, and readers take the first version they know; generation
  starts at 1; a subrequest's result is named ``<request>/<subrequest>`` in the object
  while the file sits under the base request; the bind mount is read-only and goes with
  the first device of each request.

The host side is dralet's own: ``<plugin dir>/dra-device-metadata/<claim UID>/<request>/
metadata.json``, keyed by UID (upstream keys by namespace and name) so that a claim
recreated under the same name never meets its predecessor's files.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dralet import errors, failpoints, fsutil, kubenames
from dralet.cdi.spec import Mount
from dralet.checkpoint.model import DeviceRecord
from dralet.node.backend import ClaimRef, DeviceMetadata, PreparedDevice
from dralet.node.claims.devicestatus import DeviceStatusError, network_data_json
from dralet.node.devices import attributes_to_json

__all__ = [
    "CONTAINER_DIR",
    "VERSIONS",
    "MetadataFiles",
    "MetadataUpdateError",
    "documents",
    "mounts",
    "updated",
]

GROUP = "metadata.resource.k8s.io"
VERSIONS = ("v1beta1", "v1alpha1")
"""The default of ``DriverSettings.device_metadata_versions``, written in this order:
v1beta1 for 1.37 readers, then v1alpha1 (same fields) for readers built against 1.36,
which know only that one. v1beta1 is still the newest in
k8s.io/dynamic-resource-allocation@v0.38.0-beta.0 (kubeletplugin/draplugin.go
``EnableDeviceMetadata`` accepts v1beta1 and v1alpha1)."""
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
HOST_SUBDIR = "dra-device-metadata"
FILE_NAME = "metadata.json"
MAX_FILE_BYTES = 1 << 20
"""A metadata file larger than this is not read back (they hold a few KiB)."""
FAILPOINT_WRITE = "metadata.write"
FAILPOINT_REMOVE = "metadata.remove"
failpoints.declare(
    *(
        f"{FAILPOINT_WRITE}.{step}"
        for step in ("before-fsync", "after-fsync", "after-rename", "after-dir-fsync")
    ),
    f"{FAILPOINT_REMOVE}.before",
    f"{FAILPOINT_REMOVE}.after",
)


def _pod_claim_name(claim: Mapping[str, Any] | None) -> str:
    annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
    name = annotations.get(POD_CLAIM_NAME_ANNOTATION)
    return name if isinstance(name, str) else ""


def _container_path(driver: str, ref: ClaimRef, pod_claim_name: str, request: str) -> str:
    if pod_claim_name:
        where = f"resourceclaimtemplates/{pod_claim_name}"
    else:
        where = f"resourceclaims/{ref.name}"
    return f"{CONTAINER_DIR}/{where}/{request}/{driver}-metadata.json"


def _check_segment(ref: ClaimRef, what: str, value: str, *, subdomain: bool = False) -> None:
    """A path segment the API server guarantees to be a DNS label (a claim name: a DNS
    subdomain); anything else is refused before it can reach a path."""
    check = kubenames.dns_subdomain_problem if subdomain else kubenames.dns_label_problem
    problem = check(value)
    if problem is not None:
        raise errors.ClaimError(ref.uid, f"device metadata: {what} {value!r}: {problem}")


def _requests(devices: Sequence[DeviceRecord]) -> dict[str, dict[str, list[int]]]:
    """Request -> the result's request name (``gpu/large`` for a subrequest) -> indexes of
    its devices, in device order. Records hold the base request names (the kubelet's);
    the chosen subrequest is the allocated device's."""
    out: dict[str, dict[str, list[int]]] = {}
    for index, device in enumerate(devices):
        subrequest = device.allocated.subrequest
        for request in device.request_names:
            named = f"{request}/{subrequest}" if subrequest else request
            out.setdefault(request, {}).setdefault(named, []).append(index)
    return out


def _device_entry(
    driver: str, device: DeviceRecord, result: PreparedDevice, ref: ClaimRef
) -> dict[str, Any]:
    entry: dict[str, Any] = {"driver": driver, "pool": device.pool, "name": device.device}
    metadata = result.metadata
    network = metadata.network if metadata is not None else None
    if network is None and result.status is not None:
        network = result.status.network
    if metadata is not None and metadata.attributes:
        entry["attributes"] = attributes_to_json(metadata.attributes)
    try:
        network_json = network_data_json(network)
    except DeviceStatusError as error:
        raise errors.ClaimError(ref.uid, f"device metadata of {device.device}: {error}") from None
    if network_json:
        entry["networkData"] = network_json
    return entry


class MetadataUpdateError(errors.PermanentError):
    """A metadata update that cannot apply: the claim, request or device is not prepared."""


def _stream(body: Mapping[str, Any], versions: Sequence[str]) -> str:
    """The same object once per version, newest first, as one JSON stream."""
    stream = [
        json.dumps({"kind": "DeviceMetadata", "apiVersion": f"{GROUP}/{version}", **body}, indent=2)
        for version in versions
    ]
    return "\n".join(stream) + "\n"


def documents(
    driver: str,
    ref: ClaimRef,
    devices: Sequence[DeviceRecord],
    results: Sequence[PreparedDevice],
    claim: Mapping[str, Any] | None,
    *,
    versions: Sequence[str] = VERSIONS,
) -> dict[str, str]:
    """Base request -> the content of its metadata file (``results`` line up with
    ``devices``), holding the object once per version of ``versions``. Raises
    ``ClaimError`` for a name that cannot be a path segment."""
    pod_claim_name = _pod_claim_name(claim)
    if pod_claim_name:
        _check_segment(ref, "pod claim name", pod_claim_name)
    _check_segment(ref, "claim name", ref.name, subdomain=True)
    out: dict[str, str] = {}
    for base, requests in _requests(devices).items():
        _check_segment(ref, "request", base)
        body: dict[str, Any] = {
            "metadata": {
                "name": ref.name,
                "namespace": ref.namespace,
                "uid": ref.uid,
                "generation": 1,
            },
        }
        if pod_claim_name:
            body["podClaimName"] = pod_claim_name
        # Named as the result names it (``gpu/large``): one entry, as a request's results
        # all come from the one subrequest the scheduler chose.
        body["requests"] = [
            {
                "name": request,
                "devices": [_device_entry(driver, devices[i], results[i], ref) for i in indexes],
            }
            for request, indexes in requests.items()
        ]
        out[base] = _stream(body, versions)
    return out


def updated(
    text: str,
    *,
    devices: Mapping[str, DeviceMetadata],
    versions: Sequence[str] = VERSIONS,
) -> tuple[str, int]:
    """A request's metadata file ``text`` with the entries of ``devices`` (device name ->
    what its entry now says) replaced and the generation bumped: the new content and
    generation (the Go helper's ``UpdateRequestMetadata``,
    k8s.io/dynamic-resource-allocation@v0.38.0-beta.0 kubeletplugin/metadata.go, which
    reads the first object of the stream and writes generation + 1)."""
    try:
        first, _ = json.JSONDecoder().raw_decode(text)
        body = {k: v for k, v in first.items() if k not in ("kind", "apiVersion")}
        generation = int(body["metadata"]["generation"]) + 1
        entries = [entry for request in body["requests"] for entry in request["devices"]]
    except (ValueError, KeyError, TypeError) as error:
        raise MetadataUpdateError(f"the metadata file cannot be read back: {error}") from None
    known = {str(entry.get("name")) for entry in entries}
    unknown = sorted(set(devices) - known)
    if unknown:
        raise MetadataUpdateError(f"devices {unknown} are not in this request ({sorted(known)})")
    for entry in entries:
        metadata = devices.get(str(entry.get("name")))
        if metadata is None:
            continue
        entry.pop("attributes", None)
        entry.pop("networkData", None)
        if metadata.attributes:
            entry["attributes"] = attributes_to_json(metadata.attributes)
        try:
            network_json = network_data_json(metadata.network)
        except DeviceStatusError as error:
            raise MetadataUpdateError(f"device {entry.get('name')}: {error}") from None
        if network_json:
            entry["networkData"] = network_json
    body["metadata"]["generation"] = generation
    return _stream(body, versions), generation


def mounts(
    driver: str,
    ref: ClaimRef,
    devices: Sequence[DeviceRecord],
    requests: Sequence[str],
    files: MetadataFiles,
    claim: Mapping[str, Any] | None,
) -> dict[int, list[Mount]]:
    """Device index -> the read-only bind mounts of the metadata files of ``requests``
    (base request names) it carries: each goes with the first device of its request."""
    pod_claim_name = _pod_claim_name(claim)
    first = {
        base: min(i for indexes in by_name.values() for i in indexes)
        for base, by_name in _requests(devices).items()
    }
    out: dict[int, list[Mount]] = {}
    for base in requests:
        out.setdefault(first[base], []).append(
            Mount(
                host_path=str(files.path_for(ref.uid, base)),
                container_path=_container_path(driver, ref, pod_claim_name, base),
                options=("ro", "bind"),
            )
        )
    return out


class MetadataFiles:
    """The metadata files of every claim, under the driver's plugin directory."""

    def __init__(self, plugin_dir: Path) -> None:
        self.root = plugin_dir / HOST_SUBDIR

    def _claim_dir(self, claim_uid: str) -> Path:
        return self.root / claim_uid.replace("/", "_")

    def path_for(self, claim_uid: str, request: str) -> Path:
        return self._claim_dir(claim_uid) / request / FILE_NAME

    def write(self, claim_uid: str, files: Mapping[str, str]) -> None:
        """Write a claim's files atomically and durably (each: temp file, fsync, rename;
        then every directory made or changed on the way is fsynced)."""
        claim_dir = self._claim_dir(claim_uid)
        for directory in (self.root, claim_dir):
            self._ensure_dir(directory)
        for request, text in files.items():
            path = self.path_for(claim_uid, request)
            self._ensure_dir(path.parent)
            # 0644 like the spec files: the runtime that bind-mounts it may not be root.
            fsutil.atomic_write(path, text.encode(), mode=0o644, failpoint=FAILPOINT_WRITE)
        if files:
            fsutil.fsync_dir(claim_dir)
            fsutil.fsync_dir(self.root)

    @staticmethod
    def _ensure_dir(directory: Path) -> None:
        try:
            os.mkdir(directory, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(directory).st_mode):
                raise fsutil.UnsafeFileError(directory, "is not a directory") from None

    def present(self, claim_uid: str, requests: Sequence[str]) -> bool:
        """Whether every one of the claim's files is there, a regular file."""
        for request in requests:
            try:
                if not stat.S_ISREG(os.lstat(self.path_for(claim_uid, request)).st_mode):
                    return False
            except FileNotFoundError:
                return False
        return True

    def has_any(self, claim_uid: str) -> bool:
        return os.path.lexists(self._claim_dir(claim_uid))

    def remove(self, claim_uid: str) -> bool:
        """Remove a claim's files for good; True if there were any. Symlinks inside are
        removed as links, never followed."""
        directory = self._claim_dir(claim_uid)
        if not os.path.lexists(directory):
            return False
        failpoints.hit(f"{FAILPOINT_REMOVE}.before")
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            os.unlink(directory)
        else:
            shutil.rmtree(directory)
        fsutil.fsync_dir(self.root)
        failpoints.hit(f"{FAILPOINT_REMOVE}.after")
        return True

    def claim_uids(self) -> list[str]:
        """The claims that have files (or leftovers) here, sorted."""
        try:
            return sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []

    def read(self, claim_uid: str, request: str) -> str | None:
        raw = fsutil.read_file(self.path_for(claim_uid, request), max_size=MAX_FILE_BYTES)
        return None if raw is None else raw.decode()
