"""How the API stand-in behaves."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ApiServerSettings"]


@dataclass(frozen=True)
class ApiServerSettings:
    """How the stand-in behaves."""

    kubernetes_version: str = "1.34"
    """Kubernetes minor version to play ("1.32" … "1.38"): served versions and schemas."""
    host: str = "127.0.0.1"
    """Address to listen on; only loopback is sensible."""
    port: int = 0
    """TCP port; 0 picks a free one."""
    validate: bool = True
    """Check every written object against the strict schema of its version."""
    watch_timeout_default: float = 1800.0
    """Seconds a watch without ``timeoutSeconds`` stays open."""
    shutdown_timeout: float = 2.0
    """Seconds ``stop()`` waits for open requests to finish."""
