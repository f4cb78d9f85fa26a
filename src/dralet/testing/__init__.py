"""The test kit for a driver author's own tests.

``StrictBackend`` (``dralet.testing.strict``) is a fake backend that fails a test when
``release`` does not get back what ``prepare`` returned, alone or around the author's
backend.
"""

from dralet.testing.strict import StrictBackend

__all__ = ["StrictBackend"]
