"""A real Kubernetes control plane on loopback for the tests: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, built by ``make k8s`` (scripts/k8s-build).

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
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

# Every DRA feature gate Kubernetes 1.37 has, on. Names and stages from
# k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go; GA gates locked to true are
# left out (setting them is an error once they are removed, and they cannot be off).
# GenericWorkload is the prerequisite of DRAWorkloadResourceClaims.
DRA_FEATURE_GATES = (
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
)
# resource.k8s.io v1 is on by default; the older versions 1.37 still serves are not
# (k8s.io/kubernetes v1.37.2 pkg/controlplane/instance.go, the off-by-default lists).
RUNTIME_CONFIG = (
    "resource.k8s.io/v1beta1=true",
    "resource.k8s.io/v1beta2=true",
    "resource.k8s.io/v1alpha3=true",
    # GenericWorkload's PodGroup: the scheduler and controller-manager wait for its informer.
    "scheduling.k8s.io/v1beta1=true",
    "scheduling.k8s.io/v1alpha3=true",
)
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


def binary_dir() -> Path:
    """The cache folder ``make k8s`` builds into, for the release k8s/go.mod pins."""
    out = subprocess.run(
        [str(BUILD_SCRIPT), "--print"], check=True, capture_output=True, text=True
    ).stdout
    return Path(out.strip())


def missing_binaries() -> str:
    """Why the cluster cannot start here ('' when it can)."""
    folder = binary_dir()
    missing = [b for b in BINARIES if not (folder / b).is_file()]
    if not missing:
        return ""
    go = "" if shutil.which("go") else "; Go is not installed"
    names = ", ".join(missing)
    return f"Kubernetes binaries not built ({names} missing in {folder}: run make k8s){go}"


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

    binaries: Path = field(default_factory=binary_dir)
    feature_gates: Sequence[str] = DRA_FEATURE_GATES
    components: Sequence[str] = BINARIES
    """Which of the four to run (in order; etcd and kube-apiserver always)."""
    workdir: Path = field(init=False)
    url: str = field(init=False, default="")
    admin_kubeconfig: Path = field(init=False)
    processes: dict[str, subprocess.Popen[bytes]] = field(init=False, default_factory=dict)

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
            [str(self.binaries / name), *args],
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
        missing = [b for b in BINARIES if not (self.binaries / b).is_file()]
        if missing:
            raise ClusterUnavailable(missing_binaries())
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
        gates = ",".join(f"{gate}=true" for gate in self.feature_gates)
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
                f"--runtime-config={','.join(RUNTIME_CONFIG)}",
                f"--feature-gates={gates}",
                "--profiling=false",
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
