"""Copies of decoded API objects that share their repeated strings.

A decoded JSON body holds every key as a string object of its own: five hundred tenants' bodies
kept in an index hold five hundred ``"metadata"``, ``"lastTransitionTime"`` and ``"status"`` keys
each, and as many ``"True"`` and ``"Ready"`` values (at 500 tenants, decoded strings were the
largest line of the operator's heap, docs/performance.md). `interned_copy` is a deep copy whose
keys and short strings are interned, so each distinct one is held once.
"""

from __future__ import annotations

import sys
from typing import Any

SHORT = 64
"""Strings up to this length are interned: keys, names, reasons, timestamps; longer ones (messages,
certificates) are rarely repeated."""


def interned_copy(value: Any) -> Any:
    """A deep copy of a decoded JSON value (dicts, lists, scalars) with its keys and short strings
    interned."""
    if isinstance(value, dict):
        return {sys.intern(key): interned_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [interned_copy(item) for item in value]
    if isinstance(value, str) and len(value) <= SHORT:
        return sys.intern(value)
    return value
