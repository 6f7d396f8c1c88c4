"""Reading the apiserver's JSON audit log, so tests can count the writes a component makes."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from pathlib import Path

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})

# Metadata for every request, logged once when the response is complete; health probes are left out
# because readiness polling would otherwise dominate the log.
POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
  - level: Metadata
"""


def log_size(path: Path) -> int:
    """The current end of the log: pass it later as `since_offset` to look only at newer events."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def read_events(path: Path, since_offset: int = 0) -> Iterator[dict]:
    """Audit events written at or after byte `since_offset`, oldest first."""
    try:
        with open(path, "rb") as log:
            log.seek(since_offset)
            for line in log:
                if line.endswith(b"\n"):
                    yield json.loads(line)
    except FileNotFoundError:
        return


def matches(event: dict, verbs: Collection[str] | None, user: str | None,
            user_agent: str | None) -> bool:
    """`user` is an exact username; `user_agent` a prefix, because clients append versions."""
    return (
        (verbs is None or event.get("verb") in verbs)
        and (user is None or event.get("user", {}).get("username") == user)
        and (user_agent is None or event.get("userAgent", "").startswith(user_agent))
    )
