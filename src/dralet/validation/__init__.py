"""Validation of DRA manifests: schemas, the API server's semantic rules, CEL, lint rules.

Used by ``dralet validate``; pure apart from reading the bundled schemas.
"""
