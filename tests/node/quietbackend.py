"""The parts of a test backend that a test about prepare and release does not look at:
nothing in use beyond dralet's own records, every state survives a reboot, no health."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dralet


class QuietBackend:
    def devices_in_use(self) -> dict[str, list[str]]:
        return {}

    def survives_reboot(self, device: dralet.AllocatedDevice, state: Mapping[str, Any]) -> bool:
        return True

    def health(self) -> dict[str, dralet.DeviceHealth]:
        return {}
