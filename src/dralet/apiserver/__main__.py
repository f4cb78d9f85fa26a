"""``python -m dralet.apiserver``: serve the stand-in until SIGTERM, creating the objects of
the YAML files given first; print its URL (and write a kubeconfig with ``--kubeconfig``).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml

from dralet.apiserver.errors import JSONObject
from dralet.apiserver.http import ApiServer
from dralet.apiserver.settings import ApiServerSettings


def _iter_objects(paths: Sequence[str]) -> Iterator[JSONObject]:
    for path in paths:
        for doc in yaml.safe_load_all(Path(path).read_text()):
            if isinstance(doc, dict):
                yield doc


async def _serve_forever(args: argparse.Namespace) -> None:
    server = ApiServer(kubernetes_version=args.kubernetes_version, port=args.port)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        for obj in _iter_objects(args.objects):
            server.create(obj)
        if args.kubeconfig:
            server.write_kubeconfig(args.kubeconfig)
        print(server.url, flush=True)
        await stop.wait()
    finally:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m dralet.apiserver``: serve until SIGTERM; print the URL."""
    parser = argparse.ArgumentParser(description="dralet's Kubernetes API stand-in")
    parser.add_argument("--kubernetes-version", default=ApiServerSettings.kubernetes_version)
    parser.add_argument("--port", type=int, default=ApiServerSettings.port)
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    parser.add_argument("objects", nargs="*", help="YAML files of objects to create first")
    asyncio.run(_serve_forever(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
