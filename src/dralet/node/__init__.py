"""The framework's engine: what runs inside a driver process on a node.

Top to bottom: ``runner`` (lifecycle, sockets, signals, background tasks), ``service``
(gRPC servicers: registration, DRA v1 and v1beta1, health), ``publisher``
(ResourceSlice reconciler), ``ledger`` (the one owner of claim state), ``backend``
(the protocol a driver implements), ``claims`` (how the ledger reads ResourceClaims),
``settings`` (every tunable). Drivers use it through the ``dralet`` façade.
"""
