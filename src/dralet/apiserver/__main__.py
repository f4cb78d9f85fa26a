"""``python -m dralet.apiserver``: serve the stand-in until SIGTERM; print its URL."""

from dralet.apiserver.server import main

main()
