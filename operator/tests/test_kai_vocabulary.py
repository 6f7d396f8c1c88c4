"""KAI's vocabulary: derived at the pinned KAI version, in the threat model, and reserved by the guard."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_guard_registry import pod, refused

from gputenant.api.v1alpha1 import Trust
from gputenant.guard import kai_key_uses, kai_sharing, kai_vocabulary, keys
from gputenant.guard.kai_vocabulary import VOCABULARY, KaiKey
from kubeplane.vcluster_chart import writable

ROOT = Path(__file__).resolve().parents[2]
SCANNER = ROOT / "tools" / "kai" / "key_uses.py"


def scanner():
    spec = importlib.util.spec_from_file_location("kai_key_uses_scanner", SCANNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kai_source() -> Path:
    """The pinned KAI module's source in the Go module cache (`make tools` downloads it)."""
    try:
        return scanner().module_source(kai_vocabulary.KAI_VERSION)
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.fail(f"KAI {kai_vocabulary.KAI_VERSION}'s source is not in the Go module cache and `go mod download` "
                    f"failed ({error}): run `make tools`, which downloads it")


def test_the_generated_key_uses_are_what_the_pinned_kai_source_gives(kai_source):
    current = scanner().rendered(kai_vocabulary.KAI_VERSION, scanner().scan(kai_source))
    assert current == Path(kai_key_uses.__file__).read_text(), (
        "operator/gputenant/guard/kai_key_uses.py differs from KAI's source: run `make generate`, then make "
        "kai_vocabulary account for what changed (this module's other tests say what)")


def test_the_vocabulary_accounts_for_every_key_kai_uses():
    assert kai_vocabulary.unaccounted() == []


def test_a_key_kai_starts_using_is_found_and_refused_until_accounted_for(kai_source, tmp_path):
    """An altered copy of KAI's source: a changed constant, a new label read, a new configurable key,
    a prefix read of a key the vocabulary reserves only exactly, and two keys of a one-line map
    literal. The scan finds each and the vocabulary names each as unaccounted."""
    copy = tmp_path / "kai"
    shutil.copytree(kai_source / "pkg", copy / "pkg")
    writable(copy)
    constants = copy / "pkg" / "common" / "constants" / "constants.go"
    constants.write_text(constants.read_text().replace('SubGroupLabelKey         = "kai.scheduler/subgroup-name"',
                                                       'SubGroupLabelKey         = "subgroup.kai.io/name"'))
    (copy / "pkg" / "common" / "constants" / "new_reader.go").write_text(
        'package constants\n\nconst TeamLabel = "kai.io/team"\n\n'
        'func team(pod podLike) string { return pod.Labels[TeamLabel] + pod.Annotations[pod.priorityKey] }\n\n'
        'func projects(pod podLike) (n int) {\n'
        '\tfor key := range pod.Labels {\n\t\tif strings.HasPrefix(key, "project") {\n\t\t\tn++\n\t\t}\n\t}\n'
        '\treturn n\n}\n\n'
        'var written = Pod{Labels: map[string]string{"kai.io/first": "1", "kai.io/second": f(1, 2)}}\n')
    uses = tuple(scanner().scan(copy))
    assert ("label", "subgroup.kai.io/name", True) in {use[:3] for use in uses}
    problems = "\n".join(kai_vocabulary.unaccounted(uses))
    assert "label key 'subgroup.kai.io/name' used at pkg/" in problems
    assert "label key 'kai.io/team' used at pkg/common/constants/new_reader.go:5" in problems
    assert "`pod.priorityKey` at pkg/common/constants/new_reader.go:5" in problems
    assert "label every key starting with 'project' used at pkg/common/constants/new_reader.go:9" in problems, (
        "a prefix KAI reads is covered only by a prefix entry, not by the exact `project` entry")
    assert "'kai.io/first' used at pkg/common/constants/new_reader.go:16" in problems
    assert "'kai.io/second' used at pkg/common/constants/new_reader.go:16" in problems
    assert "'kai.scheduler/subgroup-name' is used nowhere" in problems


def test_the_table_was_derived_from_the_kai_version_the_tools_pin():
    go_mod = (ROOT / "tools" / "kai" / "go.mod").read_text()
    [pinned] = re.findall(rf"^\s*{re.escape(kai_vocabulary.KAI_MODULE)} (v\S+)", go_mod, flags=re.MULTILINE)
    assert pinned == kai_vocabulary.KAI_VERSION, (
        f"tools/kai/go.mod pins KAI {pinned}, the key uses were generated from {kai_vocabulary.KAI_VERSION}: run "
        "`make generate`, make kai_vocabulary account for what changed, and `make generate` again for the docs")


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
