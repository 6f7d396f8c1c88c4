"""Benchmark tenants: N GpuTenants of mixed trust, made from the reviewed examples in examples/,
and the baseline's inputs (`gputenant render` of the same tenants, split into objects and values)."""

from __future__ import annotations

import copy
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubeplane.fixtures import REAL_VCLUSTER_CHART

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = REPO_ROOT / "examples" / "tenants"
TRUST_ORDER = ("Trusted", "Internal", "Untrusted")


def example_tenants(examples_dir: Path = EXAMPLES_DIR) -> dict[str, dict]:
    """The example GpuTenant of each trust level, by trust."""
    examples = {}
    for path in sorted(examples_dir.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        examples[body["spec"]["trust"]] = body
    missing = set(TRUST_ORDER) - set(examples)
    if missing:
        raise FileNotFoundError(f"{examples_dir} has no example for trust {sorted(missing)}")
    return examples


def tenant_name(prefix: str, index: int) -> str:
    return f"{prefix}{index:04d}"


def generate_tenants(count: int, prefix: str = "bench-", examples_dir: Path = EXAMPLES_DIR) -> list[dict]:
    """`count` tenants cycling Trusted, Internal, Untrusted (a third each), each a copy of that
    trust's example with its own name and owners. preventDeletion is dropped so a benchmark plane
    can be torn down; a serverURL is made unique per tenant."""
    examples = example_tenants(examples_dir)
    tenants = []
    for index in range(count):
        trust = TRUST_ORDER[index % len(TRUST_ORDER)]
        body = copy.deepcopy(examples[trust])
        name = tenant_name(prefix, index)
        body["metadata"] = {"name": name}
        spec = body["spec"]
        spec.pop("preventDeletion", None)
        spec["displayName"] = f"benchmark tenant {index} ({trust})"
        spec["owners"] = [{"kind": "Group", "name": f"{name}-owners"}]
        if spec.get("vcluster", {}).get("serverURL"):
            spec["vcluster"]["serverURL"] = f"https://{name}.gpu.example.com"
        tenants.append(body)
    return tenants


def operator_config(directory: Path, source_root: Path = REPO_ROOT) -> Path:
    """examples/config.yaml pointing at the real vcluster chart in ../shared/third_party (no
    network), as the e2e tests do. Its pods never run in the benchmark: see bench/vcluster_shared.py."""
    config = yaml.safe_load((source_root / "examples" / "config.yaml").read_text())
    chart_version = yaml.safe_load((REAL_VCLUSTER_CHART / "Chart.yaml").read_text())["version"]
    config["vcluster"].update(localPath=str(REAL_VCLUSTER_CHART), version=chart_version)
    path = directory / "operator-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass(frozen=True)
class BaselineInput:
    """What a user's script applies for one tenant: the host objects and the vCluster values."""

    tenant: str
    namespace: str
    release: str
    objects_path: Path
    values_path: Path


def render_baseline_inputs(tenants: list[dict], config_path: Path, directory: Path,
                           render_command: list[str], env: dict[str, str]) -> list[BaselineInput]:
    """Run `render_command` (`gputenant render`) once over all tenants and split its output per tenant into
    ``<tenant>.objects.yaml`` (every host object) and ``<tenant>.values.yaml``.

    Rendering happens before the baseline's clock starts: a user would render once and reuse.
    """
    directory.mkdir(parents=True, exist_ok=True)
    tenants_file = directory / "tenants.yaml"
    tenants_file.write_text(yaml.safe_dump_all(tenants, sort_keys=False))
    output = subprocess.run([*render_command, "-f", str(tenants_file), "--config", str(config_path)],
                            capture_output=True, text=True, env=env)
    if output.returncode:
        raise RuntimeError(f"gputenant render failed ({output.returncode}):\n{output.stderr}")
    objects: dict[str, list[dict]] = {}
    values: dict[str, dict] = {}
    current = None
    for document in yaml.safe_load_all(output.stdout):
        if not document:
            continue
        if document.get("kind") == "Decision":
            current = document["tenant"]
            objects[current] = []
        elif document.get("kind") == "VClusterValues":
            values[current] = document
        else:
            objects[current].append(document)
    inputs = []
    for tenant in tenants:
        name = tenant["metadata"]["name"]
        if name not in values:
            raise RuntimeError(f"gputenant render gave no VClusterValues for {name}: its decision is not possible")
        namespace = next(o["metadata"]["name"] for o in objects[name] if o["kind"] == "Namespace")
        objects_path = directory / f"{name}.objects.yaml"
        objects_path.write_text(yaml.safe_dump_all(objects[name], sort_keys=False))
        values_path = directory / f"{name}.values.yaml"
        values_path.write_text(yaml.safe_dump(values[name]["values"], sort_keys=False))
        inputs.append(BaselineInput(name, namespace, values[name].get("release") or name, objects_path, values_path))
    return inputs
