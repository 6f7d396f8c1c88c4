"""KAI's vocabulary: derived at the pinned KAI version, in the threat model, and reserved by the guard."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_guard_registry import pod, refused

from gputenant.api.v1alpha1 import Trust
from gputenant.guard import kai_sharing, kai_vocabulary, keys
from gputenant.guard.kai_vocabulary import VOCABULARY, KaiKey

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_was_derived_from_the_kai_version_the_tools_pin():
    go_mod = (ROOT / "tools" / "kai" / "go.mod").read_text()
    [pinned] = re.findall(rf"^\s*{re.escape(kai_vocabulary.KAI_MODULE)} (v\S+)", go_mod, flags=re.MULTILINE)
    assert pinned == kai_vocabulary.KAI_VERSION, (
        f"tools/kai/go.mod pins KAI {pinned}, the vocabulary was derived from {kai_vocabulary.KAI_VERSION}: re-derive "
        "gputenant/guard/kai_vocabulary.py from KAI's source at the new version (label and annotation constants "
        "and their uses), then set KAI_VERSION and paste markdown_table() into docs/threat-model.md")


def test_the_threat_models_table_is_the_vocabulary():
    assert kai_vocabulary.markdown_table() in (ROOT / "docs" / "threat-model.md").read_text(), (
        "docs/threat-model.md's KAI key table differs; paste the output of .venv/bin/python -c "
        "'from gputenant.guard.kai_vocabulary import markdown_table; print(markdown_table())'")


TENANT_KEYS = [k for k in VOCABULARY if k.key not in (keys.QUEUE_LABEL, *keys.FRACTION_ANNOTATIONS)]
"""The queue label (the tenant's own value) and fraction requests (by policy) are the guard's to admit."""
REFUSING_RULE = {kai_sharing.CONFIGMAP_ANNOTATION: "kai-sharing"}
"""Keys a rule of their own refuses (only the prefix the guard's mutation writes is admitted)."""


def _shaped(entry: KaiKey) -> dict:
    key = entry.key + "x" if entry.match == "prefix" else entry.key
    value = entry.values[0] if entry.values else "1"
    return pod(**{f"{entry.kind}s": {key: value}})


@pytest.mark.parametrize("entry", TENANT_KEYS, ids=lambda k: f"{k.kind}:{k.key}")
def test_the_guard_refuses_every_key_of_the_vocabulary_from_a_tenant(entry: KaiKey):
    rule = REFUSING_RULE.get(entry.key, "scheduler-key")
    for trust in Trust:
        assert rule in refused(_shaped(entry), trust), f"{entry.kind} {entry.key} admitted for {trust}"


@pytest.mark.parametrize("entry", TENANT_KEYS, ids=lambda k: f"{k.kind}:{k.key}")
def test_an_update_that_adds_a_key_of_the_vocabulary_is_refused(entry: KaiKey):
    old = pod(labels={keys.QUEUE_LABEL: "team"}, nodeName="gpu-node")
    new = _shaped(entry)
    new["metadata"].setdefault("labels", {})[keys.QUEUE_LABEL] = "team"
    new["spec"]["nodeName"] = "gpu-node"
    rule = REFUSING_RULE.get(entry.key, "scheduler-key")
    assert rule in refused(new, operation="UPDATE", old=old)
    if rule == "scheduler-key":
        assert rule not in refused(new, operation="UPDATE", old=old, by_tenant=False), "KAI writes its keys"


def test_a_common_key_is_reserved_only_by_the_values_kai_reads():
    assert "scheduler-key" not in refused(pod(labels={"app": "trainer"}))
    assert "scheduler-key" in refused(pod(labels={"app": "kai-resource-reservation"}))


def test_the_status_path_protects_every_key_of_the_vocabulary():
    from gputenant.guard.tenant_admission import PROTECTED_POD_KEY_PREFIXES, PROTECTED_POD_KEYS, PROTECTED_POD_LABEL_VALUES
    for entry in VOCABULARY:
        protected = {"prefix": PROTECTED_POD_KEY_PREFIXES, "exact": PROTECTED_POD_KEYS}.get(entry.match)
        if protected is None:
            assert set(entry.values) <= set(PROTECTED_POD_LABEL_VALUES[entry.key])
        else:
            assert entry.key in protected
