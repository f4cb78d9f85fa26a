"""Whether a node matches a core/v1 NodeSelector (terms ORed, requirements ANDed).

Owns the operators of node affinity — In, NotIn, Exists, DoesNotExist, Gt, Lt on
labels, and ``metadata.name`` In/NotIn in ``matchFields`` — for ResourceSlice
``spec.nodeSelector`` and allocation results.
"""

from __future__ import annotations

from collections.abc import Mapping

from dralet.allocation import model

__all__ = ["NODE_NAME_FIELD", "node_selector_matches"]

NODE_NAME_FIELD = "metadata.name"


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _requirement_holds(
    requirement: model.NodeSelectorRequirement, fields: Mapping[str, str]
) -> bool:
    present = requirement.key in fields
    value = fields.get(requirement.key, "")
    operator = requirement.operator
    if operator == "In":
        return present and value in requirement.values
    if operator == "NotIn":
        return not present or value not in requirement.values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(requirement.values) == 1:
        mine, theirs = _integer(value), _integer(requirement.values[0])
        if mine is None or theirs is None:
            return False
        return mine > theirs if operator == "Gt" else mine < theirs
    return False


def _term_matches(term: model.NodeSelectorTerm, node: model.Node) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    node_fields = {NODE_NAME_FIELD: node.name}
    return all(_requirement_holds(r, node.labels) for r in term.match_expressions) and all(
        r.key == NODE_NAME_FIELD
        and r.operator in ("In", "NotIn")
        and _requirement_holds(r, node_fields)
        for r in term.match_fields
    )


def node_selector_matches(selector: model.NodeSelector, node: model.Node) -> bool:
    """True when at least one term of ``selector`` selects ``node``."""
    return any(_term_matches(term, node) for term in selector.terms)
