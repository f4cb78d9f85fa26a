"""``dralet run --driver hostdev --driver-config FILE`` (entry point ``hostdev``)."""

from __future__ import annotations

import dralet
from dralet.drivers.hostdev.backend import HostDevices
from dralet.drivers.hostdev.config import ConfigError, load_config

__all__ = ["factory"]


def factory(settings: dralet.Settings, config: dralet.DriverConfig) -> HostDevices:
    """``dralet.BackendFactory`` of the hostdev driver: the configuration file is
    required (YAML, see ``dralet.drivers.hostdev.config``); it takes no options."""
    if config.path is None:
        raise dralet.DriverLoadError(
            "hostdev needs its configuration: --driver-config FILE (examples: deploy/hostdev/)"
        )
    if config.options:
        raise dralet.DriverLoadError(
            f"hostdev takes no --driver-option (got {', '.join(sorted(config.options))}); "
            f"set everything in {config.path}"
        )
    try:
        parsed = load_config(config.text, str(config.path))
    except ConfigError as exc:
        raise dralet.DriverLoadError(str(exc)) from None
    return HostDevices(parsed)
