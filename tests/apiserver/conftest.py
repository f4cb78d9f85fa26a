"""The shared API stand-in fixtures (tests/kubefixtures.py)."""

from tests.kubefixtures import KUBERNETES_VERSIONS, apiserver, client, metrics

__all__ = ["KUBERNETES_VERSIONS", "apiserver", "client", "metrics"]
