"""The only code that talks to the Kubernetes API server.

Dict in, dict out, on the official client's asyncio package (``kubernetes.aio``).
"""
