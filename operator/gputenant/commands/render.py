"""`gputenant render -f tenant.yaml [-f DIR] [-f -] [--config config.yaml]`: what the operator
would create, offline. `-f` takes files, directories (their .yaml, .yml and .json files) and `-`
(standard input), repeated or several at once (`-f examples/tenants/*.yaml`), as kubectl does.

Output is multi-document YAML, per tenant in the file: first a ``kind: Decision`` document (the
policy's choice and why), then every host object in apply order, then a ``kind: VClusterValues``
document holding the chart reference and the ``values`` the operator installs it with (absent when
the decision is not possible). Bad input exits with code 2 and names the field; a tenant whose
decision is not possible exits 3 after printing everything (``EXIT_NOT_SATISFIABLE``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputenant.commands import EXIT_BAD_INPUT, CommandError, decided_exit_code

HELP = "print the decision, host objects and vCluster values for GpuTenant files (no cluster needed)"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"


def add_filename_argument(parser: argparse.ArgumentParser) -> None:
    """`-f`, as render and explain take it: files, directories and `-`, repeated or several at once."""
    parser.add_argument("-f", "--filename", required=True, action="extend", nargs="+", metavar="FILE|DIR|-",
                        help="YAML file(s) with one or more GpuTenant documents, a directory of them (.yaml, .yml, "
                        ".json; not recursive) or - for standard input; repeat -f or give several")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_filename_argument(parser)
    parser.add_argument("--config", help="operator configuration YAML (default: built-in defaults, no GPU pools)")


class InputError(CommandError):
    """Input the renderer refuses; the message names the file and field."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_BAD_INPUT)


def manifest_files(sources: Sequence[str]) -> list[str]:
    """The files `-f` names: each file as given, a directory's manifests by name, `-` as is."""
    files: list[str] = []
    for source in sources:
        path = Path(source)
        if source != STDIN and path.is_dir():
            found = sorted(str(f) for f in path.iterdir() if f.is_file() and f.suffix in MANIFEST_SUFFIXES)
            if not found:
                raise InputError(f"{source}: no {', '.join(MANIFEST_SUFFIXES)} file in the directory")
            files += found
        else:
            files.append(source)
    return files


def read_documents(source: str) -> list[Any]:
    """The non-empty YAML documents of a file or of standard input (`-`)."""
    import yaml

    name = "standard input" if source == STDIN else source
    try:
        text = sys.stdin.read() if source == STDIN else Path(source).read_text()
        documents = [doc for doc in yaml.safe_load_all(text) if doc]
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"{name}: {error}") from None
    if not documents:
        raise InputError(f"{name}: no GpuTenant document in it")
    return documents


@dataclass(frozen=True)
class RenderedInput:
    tenant: Any
    decision: Any
    rendered: Any


def _validation_message(source: str, error) -> str:
    from gputenant.api.fieldpath import validation_problems

    return "\n".join(f"{source}: {problem}" for problem in validation_problems(error))


def load_config(config_file: str | None):
    """The operator configuration in `config_file` (None: the built-in defaults), validated;
    InputError naming the file and field otherwise. Every command reads its --config here."""
    import pydantic
    import yaml

    from gputenant.config.models import OperatorConfig

    try:
        return OperatorConfig.load(config_file) if config_file else OperatorConfig()
    except pydantic.ValidationError as error:
        raise InputError(_validation_message(config_file or "built-in configuration", error)) from None
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"{config_file}: {' '.join(str(error).split())}") from None


def load_and_render(sources: Sequence[str], config_file: str | None) -> tuple[list[RenderedInput], Any]:
    """Validate the config and every GpuTenant in the files, directories or `-` of `sources`,
    decide and render each; returns the results and the OperatorConfig. Raises InputError naming
    the file and field."""
    import pydantic

    from gputenant.api.hub import ConversionError, GpuTenant
    from gputenant.policy.choose import decide
    from gputenant.render import RenderError, render_tenant

    config = load_config(config_file)
    results = []
    for source in manifest_files(sources):
        name = "standard input" if source == STDIN else source
        for document in read_documents(source):
            if not isinstance(document, dict) or document.get("kind") != "GpuTenant":
                kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
                raise InputError(f"{name}: kind: expected GpuTenant, got {kind!r}")
            try:
                tenant = GpuTenant.from_body(document)
            except pydantic.ValidationError as error:
                raise InputError(_validation_message(name, error)) from None
            except ConversionError as error:
                raise InputError(f"{name}: {error}") from None
            decision = decide(tenant.name, tenant.spec, config)
            try:
                rendered = render_tenant(tenant, decision, config)
            except RenderError as error:
                raise InputError(f"{name}: {tenant.name}: {error}") from None
            results.append(RenderedInput(tenant, decision, rendered))
    return results, config


def decision_document(tenant, decision) -> dict:
    """The decision as a YAML document (camelCase, like the API)."""
    document: dict[str, Any] = {
        "kind": "Decision",
        "tenant": tenant.name,
        "trust": decision.trust.value,
        "possible": decision.possible,
        "reason": decision.reason,
        "message": decision.message,
        "mode": decision.mode.value if decision.mode else None,
        "pool": decision.pool.name if decision.pool else None,
        "quota": dict(decision.quota),
    }
    if decision.queue:
        queue = decision.queue
        document["queue"] = {"name": queue.name, "parent": queue.parent, "quota": queue.quota,
                             "limit": queue.limit, "overQuotaWeight": queue.over_quota_weight,
                             "priority": queue.priority}
    if decision.pod_rules:
        rules = decision.pod_rules
        document["podRules"] = {
            "gpuResources": list(rules.gpu_resources), "maxPerPod": dict(rules.max_per_pod),
            "maxPerContainer": dict(rules.max_per_container),
            "allowFractionAnnotations": rules.allow_fraction_annotations,
            "forbidIsolationOverrides": rules.forbid_isolation_overrides,
        }
        # HAMi mode (KAI fractions): the one share a `gpu-fraction` is a multiple of, and the largest per pod.
        for key, value in (("fractionShare", rules.fraction_share), ("maxFraction", rules.max_fraction)):
            if value is not None:
                document["podRules"][key] = float(value)
    if decision.warnings:
        document["warnings"] = list(decision.warnings)
    return document


def values_document(tenant, rendered, config) -> dict:
    from gputenant import naming

    chart = config.vcluster
    version = tenant.spec.vcluster.chart_version or chart.version
    reference = {"path": chart.local_path} if chart.local_path else {
        "repository": chart.repository, "name": chart.name, "version": version}
    return {
        "kind": "VClusterValues",
        "release": naming.release_name(tenant.name),
        "namespace": naming.host_namespace(tenant.name, config),
        "chart": reference,
        "values": rendered.vcluster_values,
    }


def render_stream(results: list[RenderedInput], config) -> str:
    import yaml

    documents = []
    for result in results:
        documents.append(decision_document(result.tenant, result.decision))
        documents += result.rendered.objects
        if result.rendered.vcluster_values is not None:
            documents.append(values_document(result.tenant, result.rendered, config))
    return yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)


def run(args: argparse.Namespace) -> int:
    results, config = load_and_render(args.filename, args.config)
    sys.stdout.write(render_stream(results, config))
    return decided_exit_code(results)
