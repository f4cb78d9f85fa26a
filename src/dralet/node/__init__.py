"""The framework's engine: what runs inside a driver process on a node.

Top to bottom: ``runner`` (lifecycle, sockets, signals, background tasks), ``service``
(gRPC servicers: registration, DRA v1 and v1beta1, health), ``publisher``
(ResourceSlice reconciler), ``claims`` (the claim engine: the one owner of claim
state, and how it reads ResourceClaims), ``audit`` (the engine's plan, reported),
``backend`` (the protocol a driver implements), ``settings`` (every tunable).
Drivers use it through the ``dralet`` façade.
"""
