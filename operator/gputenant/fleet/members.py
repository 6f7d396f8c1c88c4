"""The hub's reads of its members, through the credentials Argo CD holds for each (its cluster
Secrets): per member and round, one GET of the capacity report and one LIST of its GpuTenants, each
bounded by `fleet.memberTimeoutSeconds`. A client per member is kept while its Secret does not
change. What a round could not read is said (`MemberView.problem`), never guessed."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from dataclasses import dataclass, field

from gputenant.api import conditions as reasons
from gputenant.api.group import GROUP, PREFERRED_VERSION
from gputenant.config.models import OperatorConfig
from gputenant.fleet.placement import Member
from gputenant.fleet.report import MemberReport, ReportUnreadable, parse_report
from gputenant.kube import ApiError, KubeClient

log = logging.getLogger(__name__)

ARGOCD_CLUSTER_TYPE_LABEL = "argocd.argoproj.io/secret-type"
TENANTS_API_VERSION = f"{GROUP}/{PREFERRED_VERSION}"


class UnsupportedCredentials(ValueError):
    """An Argo CD cluster Secret whose credentials the hub cannot use."""


def _text(secret: dict, key: str) -> str:
    value = (secret.get("data") or {}).get(key)
    return base64.b64decode(value).decode() if value else ""


def member_kubeconfig(secret: dict) -> tuple[str, dict]:
    """(cluster name, kubeconfig) from an Argo CD cluster Secret (keys name, server, config:
    bearerToken and/or tlsClientConfig). Exec and cloud providers' auth are not supported."""
    name, server = _text(secret, "name"), _text(secret, "server")
    if not name or not server:
        raise UnsupportedCredentials("the cluster Secret has no name or no server")
    try:
        config = json.loads(_text(secret, "config") or "{}")
    except ValueError as error:
        raise UnsupportedCredentials(f"its config is not JSON: {error}") from None
    if not isinstance(config, dict) or not isinstance(config.get("tlsClientConfig") or {}, dict):
        raise UnsupportedCredentials("its config is not a JSON object with an object tlsClientConfig")
    for unsupported in ("execProviderConfig", "awsAuthConfig"):
        if config.get(unsupported):
            raise UnsupportedCredentials(f"{unsupported} credentials are not supported by the hub; use bearerToken or "
                                         "tlsClientConfig.certData/keyData")
    tls = config.get("tlsClientConfig") or {}
    cluster: dict = {"server": server}
    if tls.get("caData"):
        cluster["certificate-authority-data"] = tls["caData"]
    if tls.get("insecure"):
        cluster["insecure-skip-tls-verify"] = True
    if tls.get("serverName"):
        cluster["tls-server-name"] = tls["serverName"]
    user: dict = {}
    if config.get("bearerToken"):
        user["token"] = config["bearerToken"]
    if tls.get("certData") and tls.get("keyData"):
        user["client-certificate-data"], user["client-key-data"] = tls["certData"], tls["keyData"]
    if not user:
        raise UnsupportedCredentials("its config has neither bearerToken nor tlsClientConfig.certData/keyData")
    return name, {"apiVersion": "v1", "kind": "Config", "current-context": name,
                  "clusters": [{"name": name, "cluster": cluster}], "users": [{"name": name, "user": user}],
                  "contexts": [{"name": name, "context": {"cluster": name, "user": name}}]}


@dataclass
class MemberView:
    """One member as the hub last read it."""

    member: Member
    tenants: dict[str, dict] | None = None
    """Its GpuTenants by name; None when they could not be read this round."""


@dataclass
class MemberReader:
    """Reads every member once per round, concurrently, and keeps a client per member."""

    hub: KubeClient
    config: OperatorConfig
    _clients: dict[str, tuple[str, str, KubeClient]] = field(default_factory=dict)
    """Per cluster Secret name: (its resourceVersion, the cluster's name, the client built from it)."""
    _closing: set[asyncio.Task] = field(default_factory=set)

    async def cluster_secrets(self) -> list[dict]:
        fleet = self.config.fleet
        return await self.hub.list("v1", "Secret", namespace=fleet.argocd_namespace,
                                   label_selector=f"{ARGOCD_CLUSTER_TYPE_LABEL}=cluster,{fleet.member_label}=true")

    async def read(self) -> list[MemberView]:
        secrets = await self.cluster_secrets()
        views = await asyncio.gather(*(self._read_one(secret) for secret in secrets))
        await self._drop_clients_of({secret["metadata"]["name"] for secret in secrets})
        return sorted(views, key=lambda view: view.member.name)

    async def _read_one(self, secret: dict) -> MemberView:
        """One member as read now. Whatever goes wrong with it (its Secret, its answers) is that
        member's problem, never the round's: one bad member must not stop the fleet's placement."""
        labels = secret["metadata"].get("labels") or {}
        cordoned = labels.get(self.config.fleet.cordon_label) == "true"
        try:
            name = _text(secret, "name") or secret["metadata"]["name"]
        except ValueError:
            name = secret["metadata"]["name"]
        try:
            return await self._read_member(secret, labels, cordoned)
        except UnsupportedCredentials as error:
            problem = f"cluster Secret {secret['metadata']['name']}: {error}"
        except Exception as error:  # noqa: BLE001 - a member's malformed answer or Secret is its own problem
            log.warning("fleet: member %s could not be read", name, exc_info=True)
            problem = f"reading it failed: {error!r}"
        return MemberView(Member(name, labels, cordoned, problem=problem))

    async def _read_member(self, secret: dict, labels: dict[str, str], cordoned: bool) -> MemberView:
        name, client = self._client(secret)
        timeout = self.config.fleet.member_timeout_seconds
        report: MemberReport | None = None
        problem, problem_reason = None, reasons.MEMBER_UNREACHABLE
        tenants: dict[str, dict] | None = None
        try:
            async with asyncio.timeout(timeout):
                data = await client.get("v1", "ConfigMap", self.config.fleet.report_config_map,
                                        self.config.operator_namespace)
                try:
                    report = parse_report((data or {}).get("data"))
                except ReportUnreadable as error:
                    problem, problem_reason = (f"its capacity report, ConfigMap {self.config.operator_namespace}/"
                                               f"{self.config.fleet.report_config_map}, is unreadable: {error}",
                                               reasons.REPORT_UNREADABLE)
                items = await client.list(TENANTS_API_VERSION, "GpuTenant")
                tenants = {item["metadata"]["name"]: item for item in items}
        except TimeoutError:
            problem, problem_reason, report = f"no answer from {client.server} within {timeout:g}s", reasons.MEMBER_UNREACHABLE, None
        except ApiError as error:
            problem, problem_reason, report = f"reading it failed: {error}", reasons.MEMBER_UNREACHABLE, None
        except OSError as error:
            problem, problem_reason, report = f"{client.server} is unreachable: {error}", reasons.MEMBER_UNREACHABLE, None
        member = Member(name, labels, cordoned, report, problem, problem_reason,
                        tenant_names=frozenset(tenants or ()))
        return MemberView(member, tenants)

    def _client(self, secret: dict) -> tuple[str, KubeClient]:
        key, version = secret["metadata"]["name"], secret["metadata"].get("resourceVersion", "")
        name, kubeconfig = member_kubeconfig(secret)
        kept = self._clients.get(key)
        if kept is None or kept[0] != version:
            if kept is not None:
                self._closing.add(asyncio.get_running_loop().create_task(kept[2].close()))
            self._clients[key] = (version, name, KubeClient.from_kubeconfig_dict(kubeconfig, self.hub.field_manager))
        return name, self._clients[key][2]

    def client_of(self, cluster: str) -> KubeClient | None:
        """The client of member `cluster`, as last built (None: not a member this round)."""
        return next((client for _, name, client in self._clients.values() if name == cluster), None)

    async def _drop_clients_of(self, current: set[str]) -> None:
        for key in set(self._clients) - current:
            await self._clients.pop(key)[2].close()
        await asyncio.gather(*self._closing)
        self._closing.clear()

    async def close(self) -> None:
        await self._drop_clients_of(set())
