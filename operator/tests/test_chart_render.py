"""The Helm chart, rendered by the pinned helm binary: lint, template, the values schema, the CRD's
single source, the Deployment's hardening, and the config the operator will load (its least-privilege
RBAC: test_chart_rbac.py). (The API server's verdict on the same objects is in
e2e/tests/test_chart_install.py.)"""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from gputenant.config.models import OperatorConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "gpu-tenant-operator"
CRD_SOURCE = REPO_ROOT / "crds" / "tenant.yaml"
EXAMPLE_CONFIG = REPO_ROOT / "examples" / "config.yaml"
RELEASE, NAMESPACE = "gto", "gpu-tenant-operator"
FULLNAME = "gto-gpu-tenant-operator"


def _helm_binary() -> Path:
    from kubeplane.tools import tools_bin_dir

    helm = tools_bin_dir() / "helm"
    if not helm.is_file():
        pytest.skip(f"no pinned helm at {helm}; run `make tools`")
    return helm


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    if not CRD_SOURCE.is_file():
        pytest.fail(f"{CRD_SOURCE} is missing; the chart's CRD comes from it (`gputenant crd > crds/tenant.yaml`)")
    result = subprocess.run([str(_helm_binary()), *args], capture_output=True, text=True)
    if check and result.returncode:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def example_values(tmp_path: Path) -> Path:
    """The repository's example operator config as the chart's `config` value."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    for set_by_chart in ("operatorNamespace", "operatorServiceAccount", "tenantNamespaceClusterRole"):
        config.pop(set_by_chart, None)
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def render(*args: str, chart: Path | str = CHART) -> list[dict]:
    out = helm("template", RELEASE, str(chart), "--namespace", NAMESPACE, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(objects: list[dict], kind: str, name: str) -> dict:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: found {len(matches)} in {[(o['kind'], o['metadata']['name']) for o in objects]}"
    return matches[0]


def rules_of(objects: list[dict], kind: str, name: str) -> list[dict]:
    return find(objects, kind, name)["rules"]


def test_lint_passes_with_defaults_and_the_example_config(tmp_path):
    helm("lint", str(CHART))
    helm("lint", str(CHART), "--values", str(example_values(tmp_path)))


def test_install_guide_values_example_passes_the_schema_and_the_operator(tmp_path):
    text = (REPO_ROOT / "docs" / "install.md").read_text()
    start = text.index("```yaml\nimage:") + len("```yaml\n")
    values = tmp_path / "my-values.yaml"
    values.write_text(text[start:text.index("```", start)])
    helm("lint", str(CHART), "--values", str(values))
    configmap = find(render("--values", str(values)), "ConfigMap", f"{FULLNAME}-config")
    assert OperatorConfig.model_validate(yaml.safe_load(configmap["data"]["config.yaml"])).pools


def test_deployment_runs_gputenant_run_once_hardened_with_a_probe_on_its_liveness_endpoint():
    deployment = find(render(), "Deployment", FULLNAME)
    spec = deployment["spec"]
    # Leader election makes a surge safe: the new pod stands by until the old one lets go.
    assert spec["replicas"] == 2 and spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}, "a replacing rollout drains the guard"
    command = container["command"]
    assert command[:4] == ["gputenant", "run", "--config", "/etc/gputenant/config.yaml"]
    assert command[command.index("--leader-elect-lease") + 1] == FULLNAME
    liveness_url = command[command.index("--liveness") + 1]
    probe = container["livenessProbe"]["httpGet"]
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == probe["port"])
    assert liveness_url == f"http://0.0.0.0:{port}{probe['path']}"
    config_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/gputenant/config.yaml")
    config_volume = next(v for v in pod["volumes"] if v["name"] == config_mount["name"])
    assert config_volume["configMap"]["name"] == f"{FULLNAME}-config" and config_mount["subPath"] == "config.yaml"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    assert pod["serviceAccountName"] == FULLNAME


def test_two_replicas_by_default_share_a_chart_generated_guard_certificate_and_a_disruption_budget():
    objects = render()
    deployment = find(objects, "Deployment", FULLNAME)
    assert deployment["spec"]["replicas"] == 2
    secret = find(objects, "Secret", f"{FULLNAME}-guard-tls")
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    pod = deployment["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    assert command[command.index("--webhook-ca") + 1] == "/etc/gputenant/webhook-tls/ca.crt"
    assert "--webhook-cert-dir" not in command
    assert next(v for v in pod["volumes"] if v["name"] == "webhook-tls")["secret"]["secretName"] == secret["metadata"]["name"]
    assert pod["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": "webhook"}
    budget = find(objects, "PodDisruptionBudget", FULLNAME)
    assert budget["spec"]["minAvailable"] == 1
    single = render("--set", "replicas=1")
    assert not [o for o in single if o["kind"] in ("PodDisruptionBudget", "Secret")]


def test_the_command_line_is_accepted_by_gputenant_run():
    """Every flag the Deployment passes exists in `gputenant run` (argparse exits 2 otherwise)."""
    from gputenant.cli import build_parser

    container = find(render("--set", "logs.verbose=true"), "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["command"][1:])
    assert args.config == "/etc/gputenant/config.yaml" and args.json_logs and args.verbose


def test_webhook_service_certificates_and_rbac_follow_the_guard_design():
    """The guard writes https://<--webhook-host>:<--webhook-port>/... into its configurations, so
    the host must be the chart's Service and the Service port the container port."""
    objects = render("--set", "webhook.enabled=true", "--set", "webhook.certificateSecret=guard-tls")
    container = find(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    flag = lambda name: command[command.index(name) + 1]
    service = find(objects, "Service", f"{FULLNAME}-guard")
    assert flag("--webhook-host") == f"{FULLNAME}-guard.{NAMESPACE}.svc"
    port, conversion_port = service["spec"]["ports"]
    assert str(port["port"]) == flag("--webhook-port") == str(
        next(p["containerPort"] for p in container["ports"] if p["name"] == port["targetPort"]))
    assert str(conversion_port["port"]) == flag("--webhook-conversion-port") == str(
        next(p["containerPort"] for p in container["ports"] if p["name"] == conversion_port["targetPort"]))
    crd = find(objects, "CustomResourceDefinition", "gputenants.gputenant.io")
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"] == {
        "namespace": NAMESPACE, "name": f"{FULLNAME}-guard", "port": conversion_port["port"], "path": "/convert"}
    assert flag("--webhook-listen") == "0.0.0.0"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "webhook-tls")
    assert flag("--webhook-cert") == f"{mount['mountPath']}/tls.crt"
    rules = rules_of(objects, "ClusterRole", FULLNAME)
    assert {"apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
            "verbs": ["get", "patch"], "resourceNames": ["gputenant-guard"]} in rules
    assert {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
            "resourceNames": ["gputenants.gputenant.io"], "verbs": ["patch"]} in rules
    generated = render("--set", "webhook.enabled=true", "--set", "replicas=1")
    command = find(generated, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--webhook-cert-dir") + 1].startswith("/tmp/")
    guard_service = ("Service", f"{FULLNAME}-guard")
    assert guard_service in [(o["kind"], o["metadata"]["name"]) for o in render()], "the guard is on by default"
    disabled = render("--set", "webhook.enabled=false")
    assert guard_service not in [(o["kind"], o["metadata"]["name"]) for o in disabled]
    assert not [r for r in rules_of(disabled, "ClusterRole", FULLNAME) if "admissionregistration.k8s.io" in r["apiGroups"]]


def test_gputenant_run_accepts_the_webhook_flags():
    """The Deployment's command parses, and gives a guard server on the Service's name and port
    with generated certificates, or with the mounted Secret's."""
    from gputenant.cli import build_parser
    from gputenant.guard.server import server_from_args

    def guard_server(*values: str):
        container = find(render("--set", "webhook.enabled=true", "--set", "replicas=1", *values), "Deployment",
                         FULLNAME)["spec"]["template"]["spec"]["containers"][0]
        args = build_parser().parse_args(container["command"][1:])
        assert args.command == "run" and args.webhook_host == f"{FULLNAME}-guard.{NAMESPACE}.svc"
        return server_from_args(args, client=None, config=OperatorConfig())

    generated = guard_server()
    assert (generated.generated, generated.port, generated.listen) == (True, 9443, "0.0.0.0")
    assert generated.hostnames == [f"{FULLNAME}-guard.{NAMESPACE}.svc"]
    assert str(generated.cert_dir).startswith("/tmp/")
    provided = guard_server("--set", "webhook.certificateSecret=guard-tls")
    assert provided.generated is False
    assert [p.name for p in (provided.cert_file, provided.key_file, provided.ca_file)] == ["tls.crt", "tls.key", "ca.crt"]
    assert generated.client_ca_file is None, "the chart cannot know the API server's client CA"


def test_by_default_the_guard_answers_only_the_api_servers_front_proxy_certificate():
    objects = render()
    command = find(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--webhook-client-ca-from-cluster" in command and "--webhook-client-ca" not in command
    binding = find(objects, "RoleBinding", f"{FULLNAME}-guard-client-ca")
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    from gputenant.cli import build_parser
    assert build_parser().parse_args(command[1:]).webhook_client_ca_from_cluster


def test_without_a_client_ca_the_chart_says_so_only_when_asked():
    objects = render("--set", "webhook.clientCA=None")
    command = find(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert not [flag for flag in command if flag.startswith("--webhook-client-ca")]
    assert not [o for o in objects if o["metadata"]["name"] == f"{FULLNAME}-guard-client-ca"]


@pytest.mark.parametrize(("values", "message"), [
    (["--set", "webhook.clientCAConfigMap=ca"], "set webhook.clientCA to ConfigMap"),
    (["--set", "webhook.clientCA=ConfigMap"], "set webhook.clientCAConfigMap"),
])
def test_a_client_ca_configmap_and_its_source_go_together(values, message):
    refused = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *values, check=False)
    assert refused.returncode != 0 and message in refused.stderr


def test_given_the_api_servers_client_ca_the_guard_answers_only_its_certificates():
    objects = render("--set", "webhook.clientCA=ConfigMap", "--set", "webhook.clientCAConfigMap=apiserver-webhook-client-ca")
    pod = find(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "webhook-client-ca")
    assert command[command.index("--webhook-client-ca") + 1] == f"{mount['mountPath']}/ca.crt"
    assert next(v for v in pod["volumes"] if v["name"] == "webhook-client-ca")["configMap"] == {
        "name": "apiserver-webhook-client-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}


def test_configmap_holds_a_config_the_operator_loads(tmp_path):
    objects = render("--values", str(example_values(tmp_path)))
    document = yaml.safe_load(find(objects, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    config = OperatorConfig.model_validate(document)
    example = OperatorConfig.load(EXAMPLE_CONFIG)
    assert config.pools == example.pools and config.trust_modes == example.trust_modes
    assert config.operator_namespace == NAMESPACE
    assert config.operator_service_account == FULLNAME
    assert config.tenant_namespace_cluster_role == f"{FULLNAME}-tenant-namespace"


def test_changing_the_config_rolls_the_operator_pod():
    def checksum(*args):
        deployment = find(render(*args), "Deployment", FULLNAME)
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert checksum() != checksum("--set", "config.namespacePrefix=team-")


@pytest.mark.parametrize("args, message", [
    (["--set", "webhook.port=80"], "at '/webhook/port': minimum: got 80, want 1,024"),
    (["--set", "replicas=0"], "at '/replicas': minimum: got 0, want 1"),
    (["--set", "config.trustModes.Trusted=Sometimes"], "at '/config/trustModes/Trusted': value must be one of"),
    (["--set", "config.operatorNamespace=elsewhere"], "additional properties 'operatorNamespace' not allowed"),
    (["--set", "config.pools[0].name=a100"], "at '/config/pools/0': missing properties 'mode', 'gpuModel', 'gpuMemoryMiB'"),
    (["--set", "image.pullPolicy=Sometimes"], "at '/image/pullPolicy'"),
    (["--set", "logs.json=yes"], "at '/logs/json': got string, want boolean"),
    (["--set", "serviceMonitor.enabled=true"], "additional properties 'serviceMonitor' not allowed"),
    (["--set", "argocd.namespaces={Argo_CD}"], "at '/argocd/namespaces/0'"),
])
def test_values_schema_rejects_bad_values_naming_the_field(args, message):
    for command in (["template", RELEASE, str(CHART)], ["lint", str(CHART)]):
        result = helm(*command, *args, check=False)
        assert result.returncode != 0, f"helm {command[0]} accepted {args}"
        assert message in result.stdout + result.stderr, result.stdout + result.stderr


def test_values_schema_is_generated_from_the_current_models():
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate_schema", CHART / "generate_schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (CHART / "values.schema.json").read_text() == module.render(), (
        "charts/gpu-tenant-operator/values.schema.json is stale; run "
        ".venv/bin/python charts/gpu-tenant-operator/generate_schema.py")


def test_crd_has_one_source_and_the_packaged_chart_carries_it(tmp_path):
    """files/tenant-crd.yaml is a symlink to crds/tenant.yaml; `helm package` resolves it, and the
    CRD rendered from the package is crds/tenant.yaml plus the chart's labels and annotations."""
    link = CHART / "files" / "tenant-crd.yaml"
    assert link.is_symlink() and link.resolve() == CRD_SOURCE.resolve()
    helm("package", str(CHART), "--destination", str(tmp_path))
    [package] = tmp_path.glob("gpu-tenant-operator-*.tgz")
    with tarfile.open(package) as archive:
        names = archive.getnames()
        packaged = archive.extractfile("gpu-tenant-operator/files/tenant-crd.yaml").read()
    assert packaged == CRD_SOURCE.read_bytes()
    assert not any(name.endswith("generate_schema.py") for name in names)
    source = yaml.safe_load(CRD_SOURCE.read_text())
    rendered = find(render(chart=package), "CustomResourceDefinition", source["metadata"]["name"])
    service = rendered["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert service == {"namespace": NAMESPACE, "name": f"{FULLNAME}-guard", "port": 9444, "path": "/convert"}
    source["spec"]["conversion"]["webhook"]["clientConfig"]["service"] = service
    assert rendered["spec"] == source["spec"]
    assert rendered["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not any(o["kind"] == "CustomResourceDefinition" for o in render("--set", "crd.install=false"))


def test_metrics_port_service_and_flag_agree_and_the_flag_parses():
    """The Service targets the container's metrics port, and `gputenant run` serves that port on all
    addresses of the pod; the ServiceMonitor selects the metrics Service, not the guard's."""
    from gputenant.cli import build_parser
    from gputenant.config.settings import parse_metrics_address

    objects = render("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=kps")
    container = find(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["command"][1:])
    container_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
    assert parse_metrics_address(args.metrics_address) == ("0.0.0.0", container_port)
    service = find(objects, "Service", f"{FULLNAME}-metrics")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": container_port, "targetPort": "metrics"}]
    monitor = find(objects, "ServiceMonitor", FULLNAME)
    assert monitor["metadata"]["labels"]["release"] == "kps"
    selected = [o["metadata"]["name"] for o in objects if o["kind"] == "Service" and
                monitor["spec"]["selector"]["matchLabels"].items() <= o["metadata"]["labels"].items()]
    assert selected == [f"{FULLNAME}-metrics"]
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_metrics_defaults_serve_without_service_monitor_or_dashboard_and_turn_off_whole():
    kinds = [(o["kind"], o["metadata"]["name"]) for o in render()]
    assert ("Service", f"{FULLNAME}-metrics") in kinds
    assert not [k for k in kinds if k[0] == "ServiceMonitor" or k[1].endswith("-dashboard")]
    off = render("--set", "metrics.enabled=false", "--set", "metrics.serviceMonitor.enabled=true",
                 "--set", "metrics.dashboard.enabled=true")
    assert not [o for o in off if o["metadata"]["name"].endswith(("-metrics", "-dashboard")) or o["kind"] == "ServiceMonitor"]
    container = find(off, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-address" not in container["command"]
    assert "metrics" not in [p["name"] for p in container["ports"]]


def test_prometheus_rule_ships_the_unit_tested_alerts_only_when_asked():
    """The PrometheusRule's groups are files/alerts.yaml exactly (what promtool tests in
    test_alert_rules.py); off by default and with metrics off, as it needs the Prometheus Operator."""
    assert not [o for o in render() if o["kind"] == "PrometheusRule"]
    assert not [o for o in render("--set", "metrics.enabled=false", "--set", "metrics.prometheusRule.enabled=true")
                if o["kind"] == "PrometheusRule"]
    rule = find(render("--set", "metrics.prometheusRule.enabled=true",
                       "--set", "metrics.prometheusRule.labels.release=kps"), "PrometheusRule", FULLNAME)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())


def test_dashboard_configmap_carries_the_chart_dashboard_for_grafanas_sidecar():
    objects = render("--set", "metrics.dashboard.enabled=true")
    configmap = find(objects, "ConfigMap", f"{FULLNAME}-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "gputenant.json").read_text())
    assert json.loads(configmap["data"]["gputenant.json"]) == shipped


def test_usage_needs_a_prometheus_url_and_passes_it_with_the_window_to_gputenant_run():
    from gputenant.cli import build_parser

    def run_args(*values: str):
        container = find(render(*values), "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
        return build_parser().parse_args(container["command"][1:])

    assert run_args().prometheus_url is None
    args = run_args("--set", "usage.prometheusUrl=http://prometheus.monitoring:9090", "--set", "usage.window=30m")
    assert (args.prometheus_url, args.usage_window) == ("http://prometheus.monitoring:9090", "30m")
    assert "at '/usage/window': '1d'" in helm("template", RELEASE, str(CHART), "--set", "usage.window=1d", check=False).stderr


def test_attestation_is_off_by_default_and_when_on_names_its_image_and_holds_pods_in_its_namespace_only():
    assert not [o for o in render() if o["metadata"]["name"].endswith("-attestation")]
    objects = render("--set", "attestation.enabled=true", "--set", "attestation.image=registry.example/canary:1",
                     "--set", "attestation.queue=platform-canaries")
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUTENANT_ATTESTATION_IMAGE"] == "registry.example/canary:1"
    assert env["GPUTENANT_ATTESTATION_QUEUE"] == "platform-canaries"
    [role] = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-attestation")]
    assert role["metadata"]["namespace"] == env["GPUTENANT_ATTESTATION_NAMESPACE"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "delete"]}]
    refused = helm("template", "t", str(CHART), "--set", "attestation.enabled=true", check=False)
    assert refused.returncode != 0 and "attestation.image is required" in refused.stderr


def test_the_image_is_named_by_digest_when_one_is_set_and_by_tag_otherwise():
    digest = "sha256:" + "0f" * 32
    name = f"{RELEASE}-gpu-tenant-operator"
    by_tag = find(render(), "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["image"]
    by_digest = find(render("--set", f"image.digest={digest}"), "Deployment", name)
    assert by_tag == "gpu-tenant-operator:0.3.0"
    assert by_digest["spec"]["template"]["spec"]["containers"][0]["image"] == f"gpu-tenant-operator@{digest}"
    refused = helm("template", RELEASE, str(CHART), "--set", "image.digest=latest", check=False)
    assert refused.returncode and "digest" in refused.stderr


def test_the_crd_files_conversion_service_is_the_documented_installs():
    """crds/tenant.yaml names the guard's Service of `helm install gpu-tenant-operator --namespace
    gpu-tenant-operator` (docs/install.md), so the file applied on its own points where that install serves."""
    source = yaml.safe_load(CRD_SOURCE.read_text())
    out = helm("template", "gpu-tenant-operator", str(CHART), "--namespace", "gpu-tenant-operator").stdout
    rendered = find([doc for doc in yaml.safe_load_all(out) if doc], "CustomResourceDefinition", source["metadata"]["name"])
    assert rendered["spec"]["conversion"] == source["spec"]["conversion"]


def test_without_the_guard_the_crd_serves_only_the_stored_version():
    crd = find(render("--set", "webhook.enabled=false"), "CustomResourceDefinition", "gputenants.gputenant.io")
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    assert [(v["name"], v["served"], v["storage"]) for v in crd["spec"]["versions"]] == [
        ("v1alpha1", False, False), ("v1beta1", True, True)]


def test_one_port_for_admission_and_conversion_is_refused():
    result = helm("template", RELEASE, str(CHART), "--set", "webhook.conversionPort=9443", check=False)
    assert result.returncode != 0 and "webhook.conversionPort equals webhook.port" in result.stderr
