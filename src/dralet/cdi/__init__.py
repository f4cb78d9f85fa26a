"""CDI (Container Device Interface): spec model, name rules, per-claim spec files.

Owns everything dralet writes for container runtimes: the spec values and their JSON
form (``spec``), the qualified-name rules of the CDI spec (``names``), and the transient
per-claim spec files in the CDI directory (``store``). Used by ``dralet.node`` and the
CLI tools; imports only ``dralet.fsutil`` and ``dralet.errors``.
"""

from dralet.cdi import names, spec, store

__all__ = ["names", "spec", "store"]
