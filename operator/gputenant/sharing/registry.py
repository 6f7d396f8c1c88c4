"""The one table of sharing mechanisms, weakest isolation first (`api.trust.BY_STRENGTH`). Adding a
mechanism is its module and its row here (docs/architecture.md, "How to add a mechanism");
`operator/tests/test_sharing_registry.py` fails when a registered one lacks a part."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gputenant.api.trust import SharingMode
from gputenant.config.pools import Pool
from gputenant.sharing.base import Mechanism
from gputenant.sharing.exclusive import Exclusive
from gputenant.sharing.hami import Hami
from gputenant.sharing.mig import Mig
from gputenant.sharing.time_slicing import TimeSlicing

MECHANISMS: dict[SharingMode, Mechanism] = {m.mode: m for m in (TimeSlicing(), Hami(), Mig(), Exclusive())}


def mechanism(mode: SharingMode) -> Mechanism:
    """The mechanism of `mode` (never Auto, which the policy resolves first)."""
    return MECHANISMS[mode]


def of_pool(pool: Pool) -> Mechanism:
    """The mechanism a pool's nodes are set up for."""
    return next(m for m in MECHANISMS.values() if m.pool_mode is pool.mode)


@contextmanager
def registered(replacement: Mechanism) -> Iterator[None]:
    """`replacement` stands for its mode while the block runs: how a test shows that a mechanism's
    module is all the policy, the guard and the attestation read."""
    before = MECHANISMS[replacement.mode]
    MECHANISMS[replacement.mode] = replacement
    try:
        yield
    finally:
        MECHANISMS[replacement.mode] = before
