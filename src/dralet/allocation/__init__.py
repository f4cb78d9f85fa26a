"""A pure implementation of the scheduler's structured-parameters allocator, with CEL.

Used by ``dralet simulate``, ``dralet validate`` and the tests; does no I/O. Modules,
bottom to top: ``quantity`` and ``semver`` (values of the Kubernetes CEL libraries),
``cel_syntax`` and ``cel`` (the selector environment), ``model`` (slices, classes,
claims, results), ``manifests`` (decoding v1beta1/v1beta2/v1), ``nodes`` (node
selectors), ``pools`` (which slices a node sees), ``allocator`` (the search) and
``simulation`` (claims over nodes, as a dry run of scheduling).
"""
