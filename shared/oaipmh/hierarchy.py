"""The set hierarchy of OAI-PMH 2.0 §2.6: a setSpec is a path of levels joined by ``:``, and the
set ``A:B`` lies below ``A``. A record of ``A:B`` is a record of ``A`` too (§2.7.2)."""

from __future__ import annotations

from collections.abc import Iterable


def ancestors(spec: str) -> list[str]:
    """The setSpecs above ``spec``, the top one first: ``a:b:c`` gives ``a``, ``a:b``."""
    levels = spec.split(":")
    return [":".join(levels[:depth]) for depth in range(1, len(levels))]


def with_ancestors(specs: Iterable[str]) -> set[str]:
    """``specs`` and every set above one of them: the sets of a repository whose stored sets
    are ``specs`` (§2.6: an interior node of the hierarchy is a set of its own)."""
    every = set(specs)
    every.update(above for spec in list(every) for above in ancestors(spec))
    return every


def minimal(specs: Iterable[str]) -> tuple[str, ...]:
    """``specs`` in order, less those implied by another one below them (§2.6: "the list of
    setSpec elements should include only the minimum number of setSpec elements required to
    specify the set membership"): ``a`` and ``a:b`` give ``a:b``."""
    given = set(specs)
    implied = {above for spec in given for above in ancestors(spec)}
    return tuple(sorted(given - implied))


def in_tree(specs: Iterable[str], top: str) -> bool:
    """Whether one of ``specs`` is ``top`` or lies below it."""
    below = top + ":"
    return any(spec == top or spec.startswith(below) for spec in specs)
