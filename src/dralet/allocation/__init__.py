"""A pure implementation of the scheduler's structured-parameters allocator, with CEL.

Used by ``dralet simulate``, ``dralet validate`` and the tests; does no I/O.
"""
