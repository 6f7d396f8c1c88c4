"""Trust as one profile (api/trust.py): one row per level that every layer reads."""

from __future__ import annotations

import re
from pathlib import Path

from gputenant.api.trust import BY_STRENGTH, PROFILES, Trust, allowed_modes, profile, weakens_isolation
from gputenant.guard.registry import STRICT
from gputenant.render.podsecurity import pod_security_level

PACKAGE = Path(__file__).resolve().parents[1] / "gputenant"
POD_SECURITY_ORDER = ("privileged", "baseline", "restricted")


def test_every_trust_level_has_one_row():
    assert set(PROFILES) == set(Trust)
    assert all(row.trust is trust for trust, row in PROFILES.items())
    assert sorted(row.rank for row in PROFILES.values()) == list(range(len(Trust)))


def test_the_less_trusted_the_stricter_in_every_column():
    rows = sorted(PROFILES.values(), key=lambda row: row.rank)
    for weaker, stronger in zip(rows, rows[1:], strict=False):
        assert BY_STRENGTH.index(weaker.weakest_allowed) <= BY_STRENGTH.index(stronger.weakest_allowed)
        assert POD_SECURITY_ORDER.index(weaker.pod_security) <= POD_SECURITY_ORDER.index(stronger.pod_security)
        assert weaker.strict_guard <= stronger.strict_guard
        assert weaker.internet_egress >= stronger.internet_egress
        assert weakens_isolation(stronger.trust, weaker.trust)
        assert not weakens_isolation(weaker.trust, stronger.trust)


def test_untrusted_is_the_strictest_row():
    untrusted = profile(Trust.UNTRUSTED)
    assert untrusted.rank == max(row.rank for row in PROFILES.values())
    assert untrusted.pod_security == "restricted" and untrusted.strict_guard and not untrusted.internet_egress
    assert allowed_modes(Trust.UNTRUSTED) == BY_STRENGTH[BY_STRENGTH.index(untrusted.weakest_allowed):]


def test_the_layers_read_the_profile():
    assert STRICT == {trust for trust in Trust if profile(trust).strict_guard}
    assert all(pod_security_level(trust) == profile(trust).pod_security for trust in Trust)


def test_no_module_outside_the_profile_names_a_trust_level():
    """A `Trust.INTERNAL` elsewhere is a trust fact outside its one table."""
    named = re.compile(r"\bTrust\.(TRUSTED|INTERNAL|UNTRUSTED)\b")
    found = [f"{path.relative_to(PACKAGE)}:{number}" for path in sorted(PACKAGE.rglob("*.py"))
             if path != PACKAGE / "api" / "trust.py"
             for number, line in enumerate(path.read_text().splitlines(), 1) if named.search(line)]
    assert not found, found
