"""Copies of decoded API objects that share their repeated strings.

A decoded JSON body holds every key as a string object of its own: five hundred tenants' bodies
kept in an index hold five hundred ``"metadata"``, ``"lastTransitionTime"`` and ``"status"`` keys
each (at 500 tenants, decoded strings were the largest line of the operator's heap,
docs/performance.md). `interned_copy` is a deep copy whose keys are interned, so each distinct key is
held once. Values are left alone: most are unique (uids, timestamps, resourceVersions), and an
interned string costs a slot in the interpreter's table, which never shrinks.
"""

from __future__ import annotations

import sys
from typing import Any


def interned_copy(value: Any) -> Any:
    """A deep copy of a decoded JSON value (dicts, lists, scalars) with its keys interned."""
    if isinstance(value, dict):
        return {sys.intern(key): interned_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [interned_copy(item) for item in value]
    return value
