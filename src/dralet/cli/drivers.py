"""Drivers built for dralet's own checks (entry point ``example-strict``).

``example-strict`` is the example driver behind ``dralet.testing.strict.StrictBackend``,
which records every broken backend promise in ``<state-dir>/strict`` (the crash suite's
check). It lives here, at the top layer, because it joins the example driver and the
test kit.
"""

from __future__ import annotations

import dralet
from dralet.drivers.example.factory import simulated_gpus
from dralet.testing.strict import StrictBackend

__all__ = ["example_strict"]


def example_strict(settings: dralet.Settings, config: dralet.DriverConfig) -> StrictBackend:
    """``dralet.BackendFactory`` of ``example-strict``."""
    gpus = simulated_gpus(settings, config)
    return StrictBackend(state_dir=settings.state_dir / "strict", inner=gpus)
