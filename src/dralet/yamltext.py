"""Reading manifest YAML fast, with the values kubectl and PyYAML give it.

PyYAML's C loader spends nearly all its time in its Python constructor (0.55 s for a
1.7 MB manifest); ``yaml-rs`` (a compiled YAML 1.2 reader) takes a fifth of that. The
two read some plain scalars differently: YAML 1.1, which kubectl and PyYAML follow,
reads ``yes``/``no``/``on``/``off`` as booleans, ``0777`` as octal, ``1:30`` as base 60
and ``1e3`` as a string. A text holding any such token (or a tag, a merge key, a complex
key, or a top-level sequence, where the compiled reader's answer is ambiguous or
different) is read by PyYAML, so both paths give the same documents.
"""

from __future__ import annotations

import functools
import re
from typing import Any

__all__ = ["YAML_11_ONLY", "fast_documents", "load_all"]

_SCALAR_START = r"(?<![^\s,\[{])(?=[-+.0-9yYnNoO=<])"
"""Where a plain scalar may start that could be one of the tokens below; the lookahead
lets the scan skip every other character quickly."""
YAML_11_ONLY = re.compile(
    _SCALAR_START + r"(?:y|Y|n|N|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF"
    r"|[-+]?0[0-9_]+(?:\.[0-9_]*)?|[-+]?[0-9][0-9]*_[0-9_]*|[-+]?[0-9]+(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"
    r"|0o[0-7]+|[-+]?\.[0-9]+|[-+]?[0-9.][0-9_.]*[eE][-+]?[0-9]+|=|<<)[ \t]*(?:[,\]}#:]|$)",
    re.MULTILINE,
)
"""Plain scalars that YAML 1.1 and 1.2 readers read differently."""

_TAG = re.compile(r"(?:^[ \t]*|:[ \t]+|-[ \t]+|[\[{,][ \t]*)!", re.MULTILINE)
_COMPLEX_KEY = re.compile(r"^[ \t]*\?(?:\s|$)", re.MULTILINE)
_DOCUMENT_START = re.compile(r"^---(?=[ \t\r\n]|$)[ \t]*", re.MULTILINE)
_BLANK_OR_COMMENT_LINES = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\r?\n)*[ \t]*")
_SEPARATOR = re.compile(r"^(?:---|\.\.\.)(?:\s|$)", re.MULTILINE)


def _unsure(text: str) -> bool:
    """Tags, complex keys and top-level sequences, which are left to PyYAML (the cheap
    ``in`` tests skip the scans for texts without the characters they need)."""
    return bool(
        ("!" in text and _TAG.search(text))
        or ("?" in text and _COMPLEX_KEY.search(text))
        or _top_level_sequence(text)
    )


def _top_level_sequence(text: str) -> bool:
    """Whether a document's first content is a sequence (or a directive)."""
    starts = [0, *(m.end() for m in _DOCUMENT_START.finditer(text))]
    for start in starts:
        at = _BLANK_OR_COMMENT_LINES.match(text, start)
        position = at.end() if at else start
        first = text[position : position + 2]
        if first[:1] in ("[", "%") or first in ("-", "- ", "-\t", "-\n", "-\r"):
            return True
    return False


@functools.cache
def _compiled() -> Any:
    try:
        import yaml_rs
    except ImportError:  # pragma: no cover - a dependency; PyYAML alone still works
        return None
    return yaml_rs


def fast_documents(text: str) -> list[Any] | None:
    """The documents of ``text`` from the compiled reader, or None where only PyYAML may
    answer (1.1-only tokens, ambiguity, or anything the compiled reader refuses,
    duplicate keys included)."""
    reader = _compiled()
    if reader is None or YAML_11_ONLY.search(text) or _unsure(text):
        return None
    try:
        result = reader.loads(text)
    except Exception:  # noqa: BLE001 - any refusal means "ask PyYAML"
        return None
    if result is None:
        return None
    if isinstance(result, list):
        # No document is a top-level sequence (see _unsure), so a list is the documents.
        return result if _SEPARATOR.search(text) else None
    return [result]


def load_all(text: str) -> list[Any]:
    """Every document of ``text``, as PyYAML's safe loader reads them; raises
    ``yaml.YAMLError`` for text that is not YAML."""
    fast = fast_documents(text)
    if fast is not None:
        return fast
    import yaml

    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return list(yaml.load_all(text, Loader=loader))
