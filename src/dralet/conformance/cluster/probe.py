"""What a probe container saw, read back from its termination message: pure.

The expectation is never the driver's: a claim's device edits are whatever the probe
of a pod with the claim sees that the probe of the same pod without it does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from dralet.conformance.cluster.objects import DEV_MARKER, ENV_MARKER

__all__ = ["ProbeView", "device_edits", "parse"]

PER_POD_ENV = ("HOSTNAME",)
"""Variables the runtime sets differently in every pod, claim or not."""


@dataclass(frozen=True)
class ProbeView:
    dev: frozenset[str]
    env: frozenset[str]
    """``NAME=value`` lines."""


def parse(message: str) -> ProbeView:
    dev: set[str] = set()
    env: set[str] = set()
    section: set[str] | None = None
    for line in message.splitlines():
        if line == DEV_MARKER:
            section = dev
        elif line == ENV_MARKER:
            section = env
        elif section is not None and line:
            section.add(line)
    return ProbeView(frozenset(dev), frozenset(env))


def device_edits(view: ProbeView, baseline: ProbeView) -> frozenset[str]:
    """What ``view`` has beyond ``baseline``: ``/dev/NAME`` and ``env NAME=value`` items."""
    env = {line for line in view.env - baseline.env if line.partition("=")[0] not in PER_POD_ENV}
    return frozenset({f"/dev/{d}" for d in view.dev - baseline.dev} | {f"env {e}" for e in env})
