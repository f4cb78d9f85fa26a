"""The driver's checkpoint: one versioned, checksummed, crash-safe state file.

``model`` holds the values (claim records and their two-phase states), ``codec`` turns
them into the stored envelope and back (checksum over the exact stored bytes, migration
from the previous schema), ``store`` reads and writes the file with the atomic recipe
of ``dralet.fsutil`` and sets aside a corrupt file for forensics. Used only by the
claim engine in ``dralet.node.claims`` and by ``dralet audit``.
"""

from dralet.checkpoint import codec, model, store

__all__ = ["codec", "model", "store"]
