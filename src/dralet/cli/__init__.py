"""The ``dralet`` command line: run, demo, validate, audit, simulate, conformance.

Each subcommand lives in its own module exposing ``command`` (a click command);
``main`` loads them lazily so ``dralet --help`` stays fast and one command's heavy
imports (CEL, schemas, the Kubernetes client) never slow another.
"""
