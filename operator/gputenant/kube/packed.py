"""Decoded API objects kept as their compact JSON, decoded again where they are read.

The operator's indexes keep every tenant and every pod of the host namespaces for as long as they
exist, and kopf's diff base keeps each tenant's last handled essence. Decoded, an object is mostly
the interpreter's overhead: a dict per mapping and a string object per key and per value. A
GpuTenant with a full status is about 9 KiB decoded and 3 KiB as compact JSON, and at 2,000 tenants
the difference is most of what the operator held above its idle size (docs/performance.md). A read
decodes a fresh copy (tens of microseconds for a tenant), which its reader may change freely.
"""

from __future__ import annotations

import json
from typing import Any


def pack(value: Any) -> bytes:
    """`value` (dicts, lists, scalars, as decoded from the API) as compact UTF-8 JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def unpack(data: bytes) -> Any:
    """A fresh decoded copy of what `pack` kept."""
    return json.loads(data)
