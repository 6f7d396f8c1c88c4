"""Personal logins (spec.vcluster.oidc) on REAL vClusters (upstream chart v0.36.1 on the plane's real
node), driven by the operator, with a REAL OIDC issuer: the host API server's own service-account
issuer, which serves OIDC discovery (/.well-known/openid-configuration, /openid/v1/jwks) at
https://10.0.0.1, the `kubernetes` Service pods reach (kubeplane.apiserver.SERVICE_ACCOUNT_ISSUER).
Its ID tokens are TokenRequests for a host ServiceAccount with the tenant's clientID as audience.

That issuer puts `sub` (system:serviceaccount:<namespace>:<name>) in its tokens but no `groups`
claim. Its `aud` claim is a list the requester chooses, though, so these tenants name `aud` as
their groupsClaim: a token requested for the audiences [clientID, gpu-leads] is a token of a
member of group gpu-leads, signed by the real issuer and checked by the real vCluster API server.
(Only a test may choose aud as groups: anyone who can request such a token picks its groups.)
A second tenant trusts the same issuer with other owners: the same tokens are refused there.
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
"""A real virtual control plane on a 2-core machine shared with other work (test_vcluster_real_operator.py)."""
AUTHENTICATOR_SECONDS = 120
"""The vCluster API server fetches the issuer's discovery document and keys after it starts serving."""
TENANT, OTHER_TENANT = "oidc-login", "oidc-other"
PEOPLE = "oidc-people"
"""Host namespace of the ServiceAccounts whose tokens stand for people."""
CLIENT_ID = "gputenant-e2e"
OWNER, MEMBER, STRANGER = "alice", "bob", "mallory"
OWNER_GROUP, OTHER_GROUP = "gpu-leads", "vision-leads"
GROUPS_CLAIM = "aud"
DISCOVERY_BINDING = "oidc-e2e-anonymous-discovery"

pytestmark = [
    pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(), reason=f"{REAL_VCLUSTER_CHART} is missing"),
]


def issuer_name(account: str) -> str:
    """The `sub` the host issuer writes for a ServiceAccount of PEOPLE."""
    return f"system:serviceaccount:{PEOPLE}:{account}"


def id_token(plane: ControlPlane, account: str, *audiences: str) -> str:
    """The issuer's token for `account`, for the audiences (the groups, with GROUPS_CLAIM) given."""
    return plane.kubectl("create", "token", account, "-n", PEOPLE, "--duration=10m",
                         *(f"--audience={audience}" for audience in audiences or (CLIENT_ID,))).stdout.strip()


def oidc_spec(plane: ControlPlane) -> dict:
    return {"oidc": {"issuerURL": SERVICE_ACCOUNT_ISSUER, "clientID": CLIENT_ID, "groupsClaim": GROUPS_CLAIM,
                     "signingAlgs": ["ES256"], "caBundle": plane.ca_pem.decode()}}


def as_bearer(plane: ControlPlane, kubeconfig: dict, token: str, path: Path) -> list[str]:
    """kubectl against the kubeconfig's server and CA with `token`: for the OIDC kubeconfig, where
    kubelogin would put the ID token it got from the issuer (kubelogin is no registry package here)."""
    config = {**kubeconfig, "users": [{"name": kubeconfig["users"][0]["name"], "user": {"token": token}}]}
    path.write_text(yaml.safe_dump(config))
    return [str(plane.bin_dir / "kubectl"), f"--kubeconfig={path}", "--request-timeout=10s"]


def run(command: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)


def test_owners_by_name_and_by_group_log_in_with_the_issuers_tokens_others_are_refused(
        vcluster_node, real_operator, real_tenants, tmp_path: Path):
    plane = vcluster_node
    plane.kubectl("create", "clusterrolebinding", DISCOVERY_BINDING,
                  "--clusterrole=system:service-account-issuer-discovery", "--group=system:unauthenticated")
    plane.kubectl("create", "namespace", PEOPLE)
    for account in (OWNER, MEMBER, STRANGER):
        plane.kubectl("create", "serviceaccount", account, "-n", PEOPLE)
    try:
        real_tenants.apply(
            real_tenants.manifest(TENANT, "Trusted", issuer_name(OWNER), gpus=1, preventDeletion=False,
                                  owners=[{"kind": "User", "name": issuer_name(OWNER)},
                                          {"kind": "Group", "name": OWNER_GROUP}], vcluster=oidc_spec(plane)),
            real_tenants.manifest(OTHER_TENANT, "Trusted", "vision-lead", gpus=1, preventDeletion=False,
                                  owners=[{"kind": "Group", "name": OTHER_GROUP}], vcluster=oidc_spec(plane)))
        ready = real_tenants.wait_ready(TENANT, timeout=READY_TIMEOUT_SECONDS)
        other_ready = real_tenants.wait_ready(OTHER_TENANT, timeout=READY_TIMEOUT_SECONDS)
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
        other_kubeconfig = yaml.safe_load(base64.b64decode(plane.kubectl(
            "get", "secret", naming.kubeconfig_secret_name(OTHER_TENANT, "oidc"), "-n", f"tenant-{OTHER_TENANT}",
            "-o", "jsonpath={.data.config}").stdout))
        assert other_kubeconfig["clusters"][0]["cluster"]["server"] == other_ready["status"]["vcluster"]["endpoint"]

        def login(kubeconfig: dict, account: str, *audiences: str) -> list[str]:
            path = tmp_path / f"{kubeconfig['clusters'][0]['name']}-{account}-{len(audiences)}.kubeconfig"
            return as_bearer(plane, kubeconfig, id_token(plane, account, *audiences), path)

        owner = login(oidc_kubeconfig, OWNER)
        for who, command in (("the owner", owner), ("the other tenant's issuer", login(other_kubeconfig, STRANGER))):
            try:
                wait_for(lambda command=command: run(command, "auth", "whoami").returncode == 0,
                         timeout=AUTHENTICATOR_SECONDS, interval=2, what=f"{who}'s ID tokens accepted")
            except TimeoutError:
                raise AssertionError(f"{who}: {run(command, 'auth', 'whoami').stderr}\n"
                                     f"operator log:\n{real_operator.log_tail()}") from None

        # an owner by name, and a member of the owners' group by its token's groups claim
        listed = run(owner, "get", "pods", "-A", "-o", "name")
        assert listed.returncode == 0, listed.stderr
        whoami = run(owner, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
        assert whoami.stdout == f"oidc:{issuer_name(OWNER)}", whoami.stderr
        member = login(oidc_kubeconfig, MEMBER, CLIENT_ID, OWNER_GROUP)
        listed = run(member, "get", "pods", "-A", "-o", "name")
        assert listed.returncode == 0, listed.stderr
        groups = run(member, "auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}")
        assert f"oidc:{OWNER_GROUP}" in groups.stdout, groups

        # the same person without the group, a stranger, a token for another client: refused
        for refused_by, command in (("no group", login(oidc_kubeconfig, MEMBER)),
                                    ("stranger", login(oidc_kubeconfig, STRANGER, CLIENT_ID, "team-of-mallory"))):
            refused = run(command, "get", "pods", "-A")
            assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), (refused_by, refused.stderr)
        assert f"oidc:{issuer_name(STRANGER)}" in refused.stderr
        unauthorized = run(login(oidc_kubeconfig, OWNER, "another-client"), "get", "pods", "-A")
        assert unauthorized.returncode != 0 and "unauthorized" in unauthorized.stderr.lower(), unauthorized.stderr

        # the other tenant trusts the same issuer: this tenant's owner and group member are strangers there
        for refused_by, command in (("owner", login(other_kubeconfig, OWNER)),
                                    ("group member", login(other_kubeconfig, MEMBER, CLIENT_ID, OWNER_GROUP))):
            refused = run(command, "get", "pods", "-A")
            assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), (refused_by, refused.stderr)
        other_member = run(login(other_kubeconfig, MEMBER, CLIENT_ID, OTHER_GROUP), "get", "pods", "-A", "-o", "name")
        assert other_member.returncode == 0, other_member.stderr

        # the owners' binding inside the vCluster, read with the admin kubeconfig
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
        real_tenants.delete(TENANT, OTHER_TENANT)
        plane.kubectl("delete", "namespace", PEOPLE, "--wait=false", check=False)
        plane.kubectl("delete", "clusterrolebinding", DISCOVERY_BINDING, check=False)
