"""The example driver's factory: ``dralet run --driver example`` (entry point ``example``).

Configuration, from the ``--driver-config`` file (YAML) or ``--driver-option``
(``--gpus`` and ``--prepare-delay`` of ``dralet run`` are shorthands for the options)::

    gpus: 4                      # --driver-option gpus=4
    prepareDelay: {gpu-0: 30}    # --driver-option prepare-delay=gpu-0=30,gpu-1=2
    partitions: 2                # --driver-option partitions=2: each GPU also as 2 halves
    shared: 1                    # --driver-option shared=1: the last GPU shared by capacity

An option wins over the same key in the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dralet
from dralet.drivers.example.gpus import SimulatedGPUs

__all__ = ["factory", "simulated_gpus"]

_KEYS = {
    "gpus": "gpus",
    "prepare-delay": "prepareDelay",
    "partitions": "partitions",
    "shared": "shared",
}
"""Option name → key in the config file."""


def _count(value: Any, what: str = "gpus") -> int:
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = -1
    if count < 0 or isinstance(value, bool):
        raise ValueError(f"{what}: expected a whole number >= 0, got {value!r}")
    return count


def _delays(value: Any) -> dict[str, float]:
    if isinstance(value, str):
        pairs = [item.partition("=")[::2] for item in value.split(",") if item]
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        raise TypeError(f"prepareDelay: expected DEVICE: SECONDS pairs, got {value!r}")
    delays: dict[str, float] = {}
    for device, seconds in pairs:
        try:
            delays[str(device)] = float(seconds)
        except (TypeError, ValueError):
            raise ValueError(
                f"prepare-delay: expected DEVICE=SECONDS, got {device}={seconds}"
            ) from None
    return delays


def simulated_gpus(settings: dralet.Settings, config: dralet.DriverConfig) -> SimulatedGPUs:
    """The example's simulated GPUs as ``config`` asks, state in ``settings.state_dir``."""
    values = config.settings(_KEYS)
    kwargs: dict[str, Any] = {}
    if "gpus" in values:
        kwargs["count"] = _count(values["gpus"])
    if "prepareDelay" in values:
        kwargs["prepare_delay"] = _delays(values["prepareDelay"])
    for key in ("partitions", "shared"):
        if key in values:
            kwargs[key] = _count(values[key], key)
    return SimulatedGPUs(
        state_dir=settings.state_dir, node_name=settings.driver.node_name, **kwargs
    )


def factory(settings: dralet.Settings, config: dralet.DriverConfig) -> dralet.ClaimBackend:
    """``dralet.BackendFactory`` of the example driver."""
    return simulated_gpus(settings, config)
