"""dralet's own test harness: the kill -9 crash campaign (``crash``) and the podman runner
that resolves CDI specs with a real container runtime (``podman``). Not shipped.
"""
