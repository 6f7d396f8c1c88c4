"""The cluster commands of the CLI against the real API server: `gputenant kubeconfig` prints the
Secret to whoever may read it and names the fix for whoever may not (a 403 and a 404 in one line
each); a cluster that refuses a command is named with the kubeconfig used. The cases without any
cluster are unit tests (operator/tests/test_cli.py)."""

from __future__ import annotations

import base64

import kubernetes
import pytest

from gputenant import naming
from gputenant.cli import main
from gputenant.config.models import OperatorConfig

pytestmark = pytest.mark.plane
TENANT = "cli-reader"
ISSUED = "apiVersion: v1\nkind: Config\nclusters: []\n"


@pytest.fixture(scope="module")
def issued_view_kubeconfig(plane) -> str:
    """The view kubeconfig Secret the operator would issue (written here as the admin)."""
    namespace = naming.host_namespace(TENANT, OperatorConfig())
    plane.create_namespace(namespace)
    with plane.api_client() as client:
        kubernetes.client.CoreV1Api(client).create_namespaced_secret(namespace, {
            "metadata": {"name": naming.kubeconfig_secret_name(TENANT, "view")},
            "data": {"config": base64.b64encode(ISSUED.encode()).decode()}})
    return namespace


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_reader_of_the_secret_gets_the_kubeconfig(plane, issued_view_kubeconfig, capsys):
    assert run_cli(capsys, "kubeconfig", TENANT, "--kubeconfig", str(plane.kubeconfig_path)) == (0, ISSUED, "")


def test_a_role_not_issued_names_the_secret_and_what_to_check(plane, issued_view_kubeconfig, capsys):
    code, out, err = run_cli(capsys, "kubeconfig", TENANT, "--role", "admin", "--kubeconfig", str(plane.kubeconfig_path))
    assert (code, out) == (1, "")
    assert err == (f"gputenant kubeconfig: no Secret {issued_view_kubeconfig}/{TENANT}-kubeconfig-admin: is tenant "
                   f"{TENANT} Ready and is 'admin' in spec.kubeconfig.roles? (kubectl get gputenant {TENANT})\n")


def test_someone_who_is_no_owner_is_told_who_may_read_it(plane, issued_view_kubeconfig, capsys):
    code, out, err = run_cli(capsys, "kubeconfig", TENANT, "--kubeconfig", str(plane.user("cli-stranger")))
    assert (code, out) == (1, "")
    assert err == (f"gputenant kubeconfig: you may not read Secret {issued_view_kubeconfig}/{TENANT}-kubeconfig-view: "
                   f"only owners of tenant {TENANT} (spec.owners) can read its kubeconfigs\n")


def test_a_refused_cluster_command_is_one_line_naming_the_cluster_and_kubeconfig(plane, capsys):
    stranger = plane.user("cli-stranger")
    code, out, err = run_cli(capsys, "pools", "--kubeconfig", str(stranger))
    assert (code, out) == (1, "")
    assert err.startswith(f"gputenant pools: the cluster at {plane.api_url} (--kubeconfig {stranger}) answered 403 "
                          "Forbidden: "), err
    assert err.count("\n") == 1 and "cli-stranger" in err
