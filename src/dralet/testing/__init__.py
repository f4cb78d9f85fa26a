"""Public test kit for driver authors and dralet's own suites.

Plays the other side of every boundary a driver has: the kubelet (``kubelet``: the
registration and DRA gRPC protocol over unix sockets), the API server (``apiserver``:
an in-process stand-in with Kubernetes semantics), a container runtime (``podman``),
and the driver process itself (``process``: start, SIGKILL, restart). ``strict`` is a
fake backend that fails a test when ``release`` does not get back what ``prepare``
returned.
"""
