"""The driver's durable claim records.

``model`` holds the values (claim records and their two-phase states, each device kept as
the ``allocated`` device the backend is handed); ``database`` keeps
them, one checksummed row per claim in SQLite, committed in groups; ``codec`` turns a
record into its stored JSON and back, and reads the single-file checkpoint of earlier
releases (schema v1 and v2) that ``store`` loads once on upgrade. Used only by the claim
engine in ``dralet.node.claims`` and by ``dralet audit``.
"""

from dralet.checkpoint import allocated, codec, database, model, store

__all__ = ["allocated", "codec", "database", "model", "store"]
