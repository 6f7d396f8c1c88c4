"""Field paths as platform engineers read them in kubectl and the CRD's CEL messages.

One format everywhere (conditions, CLI errors, admission messages): ``spec.owners[0].kind``.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError


def field_path(location: Iterable[str | int]) -> str:
    """``("spec", "owners", 0, "kind")`` -> ``spec.owners[0].kind``."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def validation_problems(error: ValidationError, prefix: Iterable[str | int] = ()) -> list[str]:
    """Each problem of a pydantic error as ``<field path>: <message>``; `prefix` locates the
    validated object (``("spec",)`` when only the spec was validated)."""
    head = tuple(prefix)
    return [f"{field_path((*head, *problem['loc']))}: {problem['msg']}" for problem in error.errors()]
