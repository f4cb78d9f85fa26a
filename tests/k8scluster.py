"""A real Kubernetes control plane on loopback for the tests: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler of one of the releases k8s/releases lists, built by
``make k8s`` (scripts/k8s-build), with that release's DRA feature gates and API versions.

Everything lives in one temporary folder: certificates made at start (a CA, the serving
certificate, client certificates per component, the service-account signing key),
kubeconfigs, etcd's data and each component's log. Ports are picked at run time.
``stop()`` terminates every process it started and removes the folder.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "scripts" / "k8s-build"
RELEASES_FILE = ROOT / "k8s" / "releases"
RELEASES_ENV = "DRALET_K8S_RELEASES"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

# Every DRA feature gate each release has, on, by minor version. GA gates locked to true are
# left out (setting them is an error once they are removed, and they cannot be off).
# GenericWorkload is the prerequisite of DRAWorkloadResourceClaims.
DRA_FEATURE_GATES: dict[str, tuple[str, ...]] = {
    # Names and stages from k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go.
    "1.37": (
        "DRAConsumableCapacity",  # beta, on by default
        "DRADerivedAttributes",  # alpha 1.37
        "DRADeviceBindingConditions",  # beta
        "DRADeviceCompatibilityGroups",  # alpha 1.37
        "DRADeviceTaintRules",  # GA 1.37, not locked
        "DRADeviceTaints",  # GA 1.37, not locked
        "DRAFractionalCapacityRange",  # beta 1.37
        "DRAListTypeAttributes",  # alpha 1.36
        "DRANodeAllocatableResources",  # alpha 1.36
        "DRAOptionalNodeOperations",  # alpha 1.37
        "DRAPartitionableDevices",  # beta
        "DRAPartitionableDevicesType",  # alpha 1.37
        "DRAResourceClaimGranularStatusAuthorization",  # beta
        "DRAResourcePoolStatus",  # alpha 1.36
        "DRASchedulerFilterTimeout",  # beta
        "DRAWorkloadResourceClaims",  # beta 1.37, off by default
        "GenericWorkload",
        "ResourceHealthStatus",  # beta
        "ResourceHealthStatusMessage",  # beta
    ),
    # k8s.io/kubernetes v1.38.0-beta.0 pkg/features/kube_features.go: DynamicResourceAllocation
    # is gone; DRADeviceBindingConditions, DRADeviceTaintRules, DRADeviceTaints and
    # DRAPartitionableDevices are GA and locked on (left out); the rest as in 1.37.
    "1.38": (
        "DRAConsumableCapacity",  # GA 1.38, not locked
        "DRADerivedAttributes",  # alpha 1.37
        "DRADeviceCompatibilityGroups",  # alpha 1.37
        "DRAFractionalCapacityRange",  # GA 1.38, not locked
        "DRAListTypeAttributes",  # alpha 1.36
        "DRANodeAllocatableResources",  # alpha 1.36
        "DRAOptionalNodeOperations",  # alpha 1.37
        "DRAPartitionableDevicesType",  # alpha 1.37
        "DRAResourceClaimGranularStatusAuthorization",  # beta
        "DRAResourcePoolStatus",  # alpha 1.36
        "DRASchedulerFilterTimeout",  # beta
        "DRAWorkloadResourceClaims",  # beta 1.37, off by default
        "GenericWorkload",  # beta 1.37, off by default
        "ResourceHealthStatus",  # beta
        "ResourceHealthStatusMessage",  # beta
    ),
}
# The DRA gates each release has GA and locked on (same sources): left out above, and on.
LOCKED_DRA_FEATURE_GATES: dict[str, tuple[str, ...]] = {
    "1.37": (
        "DRAAdminAccess",
        "DRAExtendedResource",
        "DRAPrioritizedList",
        "DRAResourceClaimDeviceStatus",
        "DynamicResourceAllocation",
    ),
    "1.38": (
        "DRAAdminAccess",
        "DRADeviceBindingConditions",
        "DRADeviceTaintRules",
        "DRADeviceTaints",
        "DRAExtendedResource",
        "DRAPartitionableDevices",
        "DRAPrioritizedList",
        "DRAResourceClaimDeviceStatus",
    ),
}
# The DRA gates a release no longer has (same sources): naming one is an error.
REMOVED_DRA_FEATURE_GATES: dict[str, tuple[str, ...]] = {
    "1.37": (),
    "1.38": ("DynamicResourceAllocation",),
}
# resource.k8s.io v1 is on by default; the older versions each release still serves are not.
RUNTIME_CONFIG: dict[str, tuple[str, ...]] = {
    # k8s.io/kubernetes v1.37.2 pkg/controlplane/instance.go, the off-by-default lists.
    "1.37": (
        "resource.k8s.io/v1beta1=true",
        "resource.k8s.io/v1beta2=true",
        "resource.k8s.io/v1alpha3=true",
        # GenericWorkload's PodGroup: the scheduler and controller-manager wait for its informer.
        "scheduling.k8s.io/v1beta1=true",
        "scheduling.k8s.io/v1alpha3=true",
    ),
    # v1beta1 is still in k8s.io/kubernetes v1.38.0-beta.0 pkg/controlplane/instance.go's
    # off-by-default list, but its kinds say removed in 1.38 (k8s.io/api v0.38.0-beta.0
    # resource/v1beta1/zz_generated.prerelease-lifecycle.go), and a server of that minor
    # serves none of them whatever the flag (k8s.io/apiserver v0.38.0-beta.0
    # pkg/server/deleted_kinds.go): not named.
    "1.38": (
        "resource.k8s.io/v1beta2=true",
        "resource.k8s.io/v1alpha3=true",
        "scheduling.k8s.io/v1beta1=true",
        "scheduling.k8s.io/v1alpha3=true",
    ),
}


@dataclass(frozen=True)
class Release:
    """A Kubernetes release k8s/releases lists (``version`` as it spells it)."""

    version: str

    @property
    def minor(self) -> str:
        """``1.38`` for ``v1.38.0-beta.0``."""
        return ".".join(self.version.removeprefix("v").split(".")[:2])

    @property
    def id(self) -> str:
        """What a test id says for it: ``k8s-1.38``."""
        return f"k8s-{self.minor}"

    @property
    def feature_gates(self) -> tuple[str, ...]:
        return _by_minor(DRA_FEATURE_GATES, self, "feature gates")

    @property
    def locked_feature_gates(self) -> tuple[str, ...]:
        return _by_minor(LOCKED_DRA_FEATURE_GATES, self, "locked feature gates")

    @property
    def removed_feature_gates(self) -> tuple[str, ...]:
        return _by_minor(REMOVED_DRA_FEATURE_GATES, self, "removed feature gates")

    @property
    def runtime_config(self) -> tuple[str, ...]:
        return _by_minor(RUNTIME_CONFIG, self, "runtime config")

    def __str__(self) -> str:
        return self.version


def _by_minor(table: dict[str, tuple[str, ...]], release: Release, what: str) -> tuple[str, ...]:
    try:
        return table[release.minor]
    except KeyError:
        raise LookupError(f"tests/k8scluster.py has no {what} for Kubernetes {release}") from None


def listed_releases() -> tuple[Release, ...]:
    """Every release k8s/releases lists, oldest first (what ``make k8s`` builds)."""
    lines = (line.strip() for line in RELEASES_FILE.read_text().splitlines())
    return tuple(Release(line) for line in lines if line and not line.startswith("#"))


def find_release(wanted: str) -> Release:
    """The release of k8s/releases that ``wanted`` names: ``v1.38.0-beta.0``, or its minor
    version ``1.38`` (``v1.38``)."""
    want = wanted.strip().removeprefix("v")
    listed = listed_releases()
    for release in listed:
        version = release.version.removeprefix("v")
        if version == want or version.startswith(f"{want}."):
            return release
    names = ", ".join(str(r) for r in listed)
    raise LookupError(f"{wanted!r} is none of k8s/releases ({names})")


def releases() -> tuple[Release, ...]:
    """The releases the ``k8s`` tests run on: all of k8s/releases, or those that
    ``DRALET_K8S_RELEASES`` names (comma-separated, as find_release takes them)."""
    chosen = os.environ.get(RELEASES_ENV, "").strip()
    if not chosen:
        return listed_releases()
    picked: list[Release] = []
    for wanted in chosen.split(","):
        try:
            release = find_release(wanted)
        except LookupError as error:
            raise LookupError(f"{RELEASES_ENV}: {error}") from None
        if release not in picked:
            picked.append(release)
    return tuple(picked)


def default_release() -> Release:
    """The release every ``k8s`` test runs on (those marked every_k8s_release run on all):
    the first that ``releases()`` gives."""
    return releases()[0]


def _print(*args: str) -> Path:
    out = subprocess.run(
        [str(BUILD_SCRIPT), *args], check=True, capture_output=True, text=True
    ).stdout
    return Path(out.strip())


def binary_dir(release: Release | None = None) -> Path:
    """The cache folder ``make k8s`` builds a release into (default: default_release())."""
    return _print("--print", str(release or default_release()))


def containerd_dir() -> Path:
    """The cache folder of containerd, its runc shim and ctr (one for every release)."""
    return _print("--print-containerd")


# Every request of a ServiceAccount in the driver's namespace is logged, so tests can
# compare what the driver did with what deploy/'s RBAC grants.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": ["system:serviceaccounts:dralet"]},
        {"level": "None"},
    ],
}
START_TIMEOUT = 120.0
STOP_TIMEOUT = 15.0


class ClusterUnavailable(Exception):
    """The binaries are missing (no Go toolchain, or ``make k8s`` not run)."""


def missing_binaries(release: Release | None = None) -> str:
    """Why the cluster of a release cannot start here ('' when it can)."""
    release = release or default_release()
    folder = binary_dir(release)
    missing = [b for b in BINARIES if not (folder / b).is_file()]
    if not missing:
        return ""
    go = "" if shutil.which("go") else "; Go is not installed"
    names = ", ".join(missing)
    return f"Kubernetes {release} not built ({names} missing in {folder}: run make k8s){go}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


@dataclass
class _Authority:
    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls) -> _Authority:
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dralet-test-ca")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    def issue(
        self, common_name: str, *, groups: Sequence[str] = (), server: bool = False
    ) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) for a client (or, with ``server``, loopback)."""
        key = _key()
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.ExtendedKeyUsage(
                    [
                        x509.ExtendedKeyUsageOID.SERVER_AUTH
                        if server
                        else x509.ExtendedKeyUsageOID.CLIENT_AUTH
                    ]
                ),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.DNSName("kubernetes.default.svc"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                    ]
                ),
                critical=False,
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


@dataclass
class Cluster:
    """A running control plane; ``start()`` it, ``stop()`` it (or use ``with``)."""

    release: Release = field(default_factory=default_release)
    binaries: Path | None = None
    """Where the release's binaries are (default: where ``make k8s`` builds them)."""
    feature_gates: Sequence[str] | None = None
    """Which feature gates to turn on (default: the release's DRA gates)."""
    components: Sequence[str] = BINARIES
    """Which of the four to run (in order; etcd and kube-apiserver always)."""
    workdir: Path = field(init=False)
    url: str = field(init=False, default="")
    admin_kubeconfig: Path = field(init=False)
    processes: dict[str, subprocess.Popen[bytes]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.binaries is None:
            self.binaries = binary_dir(self.release)
        if self.feature_gates is None:
            self.feature_gates = self.release.feature_gates

    @property
    def folder(self) -> Path:
        assert self.binaries is not None
        return self.binaries

    @property
    def gates(self) -> Sequence[str]:
        assert self.feature_gates is not None
        return self.feature_gates

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- files ---------------------------------------------------------------------

    def _write(self, name: str, data: bytes, mode: int = 0o600) -> Path:
        path = self.workdir / name
        path.write_bytes(data)
        path.chmod(mode)
        return path

    def _client(self, ca: _Authority, name: str, user: str, groups: Sequence[str] = ()) -> Path:
        cert, key = ca.issue(user, groups=groups)
        return self.write_kubeconfig(
            f"{name}.kubeconfig", user=name, client_cert=cert, client_key=key
        )

    def write_kubeconfig(
        self,
        filename: str,
        *,
        user: str,
        client_cert: bytes | None = None,
        client_key: bytes | None = None,
        token: str | None = None,
        namespace: str = "default",
    ) -> Path:
        """A kubeconfig in the cluster's folder for one user (a client cert or a token)."""
        credentials: dict[str, str] = {}
        if client_cert is not None and client_key is not None:
            credentials["client-certificate"] = str(self._write(f"{user}.crt", client_cert))
            credentials["client-key"] = str(self._write(f"{user}.key", client_key))
        if token is not None:
            credentials["token"] = token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "dralet-test",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority": str(self.workdir / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [
                {
                    "name": user,
                    "context": {"cluster": "dralet-test", "user": user, "namespace": namespace},
                }
            ],
            "current-context": user,
        }
        return self._write(filename, yaml.safe_dump(config).encode())

    # -- processes -----------------------------------------------------------------

    def _spawn(self, name: str, args: Sequence[str]) -> None:
        if name not in self.components:
            return
        log = (self.workdir / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [str(self.folder / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,
        )
        log.close()

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {process.returncode}:\n{self.log_tail(name)}"
                )

    def _wait_healthy(self, path: str, context: ssl.SSLContext) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(self.url + path, context=context, timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise RuntimeError(f"kube-apiserver not healthy within {START_TIMEOUT}s: {last}")

    def start(self) -> None:
        missing = [b for b in BINARIES if not (self.folder / b).is_file()]
        if missing:
            raise ClusterUnavailable(missing_binaries(self.release))
        self.workdir = Path(tempfile.mkdtemp(prefix="dralet-k8s-"))
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        ca = _Authority.create()
        self._write("ca.crt", ca.cert.public_bytes(serialization.Encoding.PEM), 0o644)
        serving_cert, serving_key = ca.issue("kube-apiserver", server=True)
        self._write("apiserver.crt", serving_cert)
        self._write("apiserver.key", serving_key)
        sa_key = _key()
        self._write("sa.key", _pem_key(sa_key))
        self._write(
            "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )

        self._write("audit-policy.yaml", yaml.safe_dump(AUDIT_POLICY).encode())
        etcd_port, etcd_peer, port = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{port}"
        self._spawn(
            "etcd",
            [
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-url=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-url=http://127.0.0.1:{etcd_peer}",
            ],
        )
        gates = ",".join(f"{gate}=true" for gate in self.gates)
        w = self.workdir
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # The reconciler refuses a loopback address for the kubernetes Service.
                "--endpoint-reconciler-type=none",
                f"--secure-port={port}",
                f"--cert-dir={w / 'certs'}",
                f"--tls-cert-file={w / 'apiserver.crt'}",
                f"--tls-private-key-file={w / 'apiserver.key'}",
                f"--client-ca-file={w / 'ca.crt'}",
                f"--service-account-issuer={self.url}",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                "--authorization-mode=Node,RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                f"--runtime-config={','.join(self.release.runtime_config)}",
                f"--feature-gates={gates}",
                "--profiling=false",
                # `kubectl logs` reaches a test node's kubelet at its address: its
                # Hostname address (the node name) resolves nowhere.
                "--kubelet-preferred-address-types=InternalIP",
                f"--audit-policy-file={w / 'audit-policy.yaml'}",
                f"--audit-log-path={w / 'audit.log'}",
                "--v=1",
            ],
        )
        context = ssl.create_default_context(cafile=str(w / "ca.crt"))
        admin_cert, admin_key = ca.issue("dralet-admin", groups=["system:masters"])
        context.load_cert_chain(
            self._write("admin-client.crt", admin_cert), self._write("admin-client.key", admin_key)
        )
        self._wait_healthy("/readyz", context)
        self.admin_kubeconfig = self.write_kubeconfig(
            "admin.kubeconfig", user="admin", client_cert=admin_cert, client_key=admin_key
        )
        kcm = self._client(ca, "kube-controller-manager", "system:kube-controller-manager")
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kcm}",
                f"--authentication-kubeconfig={kcm}",
                f"--authorization-kubeconfig={kcm}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={w / 'sa.key'}",
                f"--root-ca-file={w / 'ca.crt'}",
                f"--feature-gates={gates}",
                "--v=1",
            ],
        )
        scheduler = self._client(ca, "kube-scheduler", "system:kube-scheduler")
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={scheduler}",
                f"--authentication-kubeconfig={scheduler}",
                f"--authorization-kubeconfig={scheduler}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
                f"--feature-gates={gates}",
                "--v=1",
            ],
        )
        self._check_alive()

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log so far (requests of ServiceAccounts in the ``dralet`` namespace)."""
        path = self.workdir / "audit.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        """Terminate every component, last started first (kube-apiserver hangs in its
        shutdown when etcd is gone first), and remove the folder."""
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()
        if getattr(self, "workdir", None) is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class ClusterPool:
    """One control plane per release, started the first time a test asks for it and kept
    until ``stop()``; a release whose start failed fails again at once."""

    clusters: dict[Release, Cluster] = field(default_factory=dict)
    failures: dict[Release, Exception] = field(default_factory=dict)

    def get(self, release: Release) -> Cluster:
        if release in self.failures:
            raise self.failures[release]
        if release not in self.clusters:
            cluster = Cluster(release=release)
            try:
                cluster.start()
            except Exception as exc:
                self.failures[release] = exc
                raise
            self.clusters[release] = cluster
        return self.clusters[release]

    def stop(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()
        self.clusters.clear()
