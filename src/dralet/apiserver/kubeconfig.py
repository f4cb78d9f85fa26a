"""A kubeconfig pointing at a stand-in, for kubectl and driver processes."""

from __future__ import annotations

from pathlib import Path

import yaml

__all__ = ["write_kubeconfig"]


def write_kubeconfig(path: str | Path, *, url: str, namespace: str = "default") -> Path:
    """Write a kubeconfig whose current context points at ``url`` without credentials."""
    target = Path(path)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dralet-standin", "cluster": {"server": url}}],
        "users": [{"name": "dralet-standin", "user": {"token": "dralet-standin"}}],
        "contexts": [
            {
                "name": "dralet-standin",
                "context": {
                    "cluster": "dralet-standin",
                    "user": "dralet-standin",
                    "namespace": namespace,
                },
            }
        ],
        "current-context": "dralet-standin",
    }
    target.write_text(yaml.safe_dump(config))
    return target
