"""What the kubelet sends for a claim and what it makes of a plugin's answers."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ClaimResult",
    "DeviceResult",
    "KubeletClaim",
    "KubeletError",
    "PrepareResult",
    "UnprepareResult",
]


class KubeletError(Exception):
    """What the kubelet would report (pod event) when a registration or call fails."""


@dataclass(frozen=True)
class KubeletClaim:
    """A claim as the kubelet names it in a NodePrepareResources or Unprepare call."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class DeviceResult:
    """One prepared device of a claim, as the plugin answered."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class ClaimResult:
    """A claim's prepared devices, or the plugin's per-claim error."""

    devices: tuple[DeviceResult, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class PrepareResult:
    """A NodePrepareResources answer per claim UID and the kubelet's verdict on it."""

    claims: dict[str, ClaimResult]
    kubelet_error: str = ""
    """The kubelet's verdict on the whole call ('' = every claim prepared)."""

    def cdi_ids(self, uid: str) -> list[str]:
        """Every CDI device id prepared for claim ``uid``, in answer order."""
        return [i for d in self.claims[uid].devices for i in d.cdi_device_ids]


@dataclass(frozen=True)
class UnprepareResult:
    """A NodeUnprepareResources answer (error per claim UID) and the kubelet's verdict."""

    claims: dict[str, str]
    kubelet_error: str = ""
