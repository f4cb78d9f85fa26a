"""The allocated device: one allocation result of a claim as the backend is handed it.

Defined beneath the claim records so that a record keeps the very value the backend
was given (``dralet.checkpoint.model.DeviceRecord``); drivers see these types through
``dralet`` (and ``dralet.node.backend``, which re-exports them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["AllocatedDevice", "ConfigSource", "DeviceConfig"]

ConfigSource = Literal["class", "claim"]


@dataclass(frozen=True)
class DeviceConfig:
    """One opaque configuration for this driver from a claim's allocation.

    ``source`` is ``"class"`` (from the DeviceClass) or ``"claim"`` (from the claim's
    own ``spec.devices.config``); ``requests`` names the requests it applies to (empty:
    all of them); ``parameters`` is the opaque ``parameters`` object as written.
    """

    source: ConfigSource
    requests: tuple[str, ...]
    parameters: Mapping[str, Any]

    def applies_to(self, request: str) -> bool:
        """Whether this config applies to ``request`` (``req`` or a subrequest ``req/sub``)."""
        if not self.requests:
            return True
        return request in self.requests or request.split("/", 1)[0] in self.requests


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of a claim that this driver must prepare.

    ``request`` is the claim's request (the kubelet matches containers on it);
    ``configs`` are the configs that apply to this device's request, in precedence order
    (class before claim; later wins). ``consumed_capacity`` (1.34+ consumable capacity)
    and ``tolerations`` (1.33+ device taints) are copied from the allocation result;
    ``extra`` keeps any other field of the result as the API sent it, so a backend can
    read fields newer than this release of dralet.
    """

    request: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str = ""
    configs: tuple[DeviceConfig, ...] = ()
    subrequest: str = ""
    """The subrequest of a ``firstAvailable`` request the scheduler chose (``large`` of
    the result's ``gpu/large``; ``request`` is then ``gpu``); empty for a plain request."""
    consumed_capacity: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> tuple[Mapping[str, Any], ...]:
        """The ``parameters`` of ``configs``, in precedence order."""
        return tuple(c.parameters for c in self.configs)
