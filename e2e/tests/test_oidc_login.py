"""Personal logins (spec.vcluster.oidc) on a REAL vCluster (upstream chart v0.36.1 on the plane's real
node), driven by the operator, with a REAL OIDC issuer: the host API server's own service-account
issuer, which serves OIDC discovery (/.well-known/openid-configuration, /openid/v1/jwks) at
https://10.0.0.1, the `kubernetes` Service pods reach (kubeplane.apiserver.SERVICE_ACCOUNT_ISSUER).
Its ID tokens are TokenRequests for a host ServiceAccount with the tenant's clientID as audience.

That issuer puts `sub` (system:serviceaccount:<namespace>:<name>) in its tokens but no groups claim,
so the token path is tested for an owner of kind User (named as the issuer names the account); the
owners' Group is checked as the binding the operator writes inside the vCluster (oidc:<group>), not
through a token.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
import yaml

from gputenant import naming
from gputenant.kubeconfigs import OIDC_OWNERS_BINDING
from kubeplane import ControlPlane, wait_for
from kubeplane.apiserver import SERVICE_ACCOUNT_ISSUER
from kubeplane.fixtures import REAL_VCLUSTER_CHART

READY_TIMEOUT_SECONDS = 480
"""A real virtual control plane on a 2-core machine shared with other work (test_vcluster_real.py)."""
AUTHENTICATOR_SECONDS = 120
"""The vCluster API server fetches the issuer's discovery document and keys after it starts serving."""
TENANT = "oidc-login"
PEOPLE = "oidc-people"
"""Host namespace of the ServiceAccounts whose tokens stand for people."""
CLIENT_ID = "gputenant-e2e"
OWNER, STRANGER = "alice", "mallory"
OWNER_GROUP = "gpu-leads"
DISCOVERY_BINDING = "oidc-e2e-anonymous-discovery"

pytestmark = [
    pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(), reason=f"{REAL_VCLUSTER_CHART} is missing"),
]


def issuer_name(account: str) -> str:
    """The `sub` the host issuer writes for a ServiceAccount of PEOPLE."""
    return f"system:serviceaccount:{PEOPLE}:{account}"


def id_token(plane: ControlPlane, account: str, audience: str = CLIENT_ID) -> str:
    return plane.kubectl("create", "token", account, "-n", PEOPLE, f"--audience={audience}",
                         "--duration=10m").stdout.strip()


def as_bearer(plane: ControlPlane, kubeconfig: dict, token: str, path: Path) -> list[str]:
    """kubectl against the kubeconfig's server and CA with `token`: for the OIDC kubeconfig, where
    kubelogin would put the ID token it got from the issuer (kubelogin is no registry package here)."""
    config = {**kubeconfig, "users": [{"name": kubeconfig["users"][0]["name"], "user": {"token": token}}]}
    path.write_text(yaml.safe_dump(config))
    return [str(plane.bin_dir / "kubectl"), f"--kubeconfig={path}", "--request-timeout=10s"]


def run(command: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)


def test_an_owner_logs_in_with_the_issuers_token_others_are_refused(vcluster_node, real_operator, real_tenants,
                                                                   tmp_path: Path):
    plane = vcluster_node
    plane.kubectl("create", "clusterrolebinding", DISCOVERY_BINDING,
                  "--clusterrole=system:service-account-issuer-discovery", "--group=system:unauthenticated")
    plane.kubectl("create", "namespace", PEOPLE)
    for account in (OWNER, STRANGER):
        plane.kubectl("create", "serviceaccount", account, "-n", PEOPLE)
    try:
        real_tenants.apply(real_tenants.manifest(
            TENANT, "Trusted", issuer_name(OWNER), gpus=1, preventDeletion=False,
            owners=[{"kind": "User", "name": issuer_name(OWNER)}, {"kind": "Group", "name": OWNER_GROUP}],
            vcluster={"oidc": {"issuerURL": SERVICE_ACCOUNT_ISSUER, "clientID": CLIENT_ID, "signingAlgs": ["ES256"],
                               "caBundle": plane.ca_pem.decode()}}))
        ready = real_tenants.wait_ready(TENANT, timeout=READY_TIMEOUT_SECONDS)
        namespace = f"tenant-{TENANT}"

        # the owner reads the personal-login kubeconfig with its own host identity
        secret = plane.kubectl("get", "secret", naming.kubeconfig_secret_name(TENANT, "oidc"), "-n", namespace,
                               "-o", "jsonpath={.data.config}", kubeconfig_path=plane.user(issuer_name(OWNER)))
        oidc_kubeconfig = yaml.safe_load(base64.b64decode(secret.stdout))
        cluster = oidc_kubeconfig["clusters"][0]["cluster"]
        assert cluster["server"] == ready["status"]["vcluster"]["endpoint"]
        exec_plugin = oidc_kubeconfig["users"][0]["user"]["exec"]
        assert exec_plugin["command"] == "kubectl"
        assert exec_plugin["args"][:4] == ["oidc-login", "get-token", f"--oidc-issuer-url={SERVICE_ACCOUNT_ISSUER}",
                                           f"--oidc-client-id={CLIENT_ID}"]

        owner = as_bearer(plane, oidc_kubeconfig, id_token(plane, OWNER), tmp_path / "owner.kubeconfig")
        try:
            wait_for(lambda: run(owner, "get", "pods", "-A", "-o", "name").returncode == 0,
                     timeout=AUTHENTICATOR_SECONDS, interval=2, what="the owner's ID token accepted in the vCluster")
        except TimeoutError:
            raise AssertionError(f"owner refused: {run(owner, 'get', 'pods', '-A').stderr}\n"
                                 f"operator log:\n{real_operator.log_tail()}") from None
        whoami = run(owner, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
        assert whoami.stdout == f"oidc:{issuer_name(OWNER)}", whoami.stderr

        stranger = as_bearer(plane, oidc_kubeconfig, id_token(plane, STRANGER), tmp_path / "stranger.kubeconfig")
        refused = run(stranger, "get", "pods", "-A")
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
        assert f"oidc:{issuer_name(STRANGER)}" in refused.stderr

        other_audience = as_bearer(plane, oidc_kubeconfig, id_token(plane, OWNER, audience="another-client"),
                                   tmp_path / "audience.kubeconfig")
        unauthorized = run(other_audience, "get", "pods", "-A")
        assert unauthorized.returncode != 0 and "unauthorized" in unauthorized.stderr.lower(), unauthorized.stderr

        # the owners' Group: bound inside the vCluster with the groups prefix (this issuer has no groups claim)
        admin_kubeconfig = yaml.safe_load(base64.b64decode(plane.kubectl(
            "get", "secret", naming.kubeconfig_secret_name(TENANT, "admin"), "-n", namespace, "-o",
            "jsonpath={.data.config}").stdout))
        admin = as_bearer(plane, admin_kubeconfig, admin_kubeconfig["users"][0]["user"]["token"],
                          tmp_path / "admin.kubeconfig")
        binding = yaml.safe_load(run(admin, "get", "clusterrolebinding", OIDC_OWNERS_BINDING, "-o", "yaml").stdout)
        assert binding["roleRef"]["name"] == "cluster-admin"
        assert {(s["kind"], s["name"]) for s in binding["subjects"]} == {
            ("User", f"oidc:{issuer_name(OWNER)}"), ("Group", f"oidc:{OWNER_GROUP}")}
    finally:
        real_tenants.delete(TENANT)
        plane.kubectl("delete", "namespace", PEOPLE, "--wait=false", check=False)
        plane.kubectl("delete", "clusterrolebinding", DISCOVERY_BINDING, check=False)
