"""The operator's only door to the Kubernetes API: an async client over aiohttp.

Credentials come from the `kubernetes` package's loaders (a kubeconfig file, a kubeconfig dict
such as a vCluster's ``vc-<release>`` Secret, or the in-cluster service account), so the operator
authenticates exactly like kubectl would, with one difference: certificates and keys written inline
in a kubeconfig (``*-data``) stay in memory. The package's loader writes them to temporary files
that it removes only at a clean exit; under churn and SIGKILL they piled up as private keys of
every virtual cluster's admin (issue 17). Every request is counted (reads and writes by verb), so
tests and benchmarks can check that a resync of unchanged tenants writes nothing.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import ssl
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
import kubernetes
import yaml
from kubernetes.config.kube_config import KubeConfigLoader

from gputenant.kube.credentials import (
    InlineCredentials,
    kubeconfig_paths,
    memory_file,
    no_cluster_message,
    read_kubeconfig_files,
    split_inline_credentials,
    tls_context,
)
from gputenant.kube.errors import ApiError, NoCluster

if TYPE_CHECKING:
    import kopf

USER_AGENT = "gpu-tenant-operator"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CREATED = 201
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)
"""Time out opening a connection and waiting for the server's bytes, never the wait for a free
pooled connection: with hundreds of tenants reconciling, a `total` timeout failed requests the
apiserver had never seen (docs/performance.md, hot spot 3)."""


@dataclass
class RequestCounters:
    """Requests sent, by HTTP method; `writes` is what "no write when nothing changed" checks."""

    by_method: Counter = field(default_factory=Counter)

    @property
    def reads(self) -> int:
        return sum(n for method, n in self.by_method.items() if method not in WRITE_METHODS)

    @property
    def writes(self) -> int:
        return sum(n for method, n in self.by_method.items() if method in WRITE_METHODS)


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: the collection path and whether it is namespaced."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        parts = [prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace)}")
        parts.append(self.plural)
        if name:
            parts.append(quote(name))
        return "/".join(parts)


class KubeClient:
    """Async Kubernetes API client: get/list/apply/apply-status/delete/patch, TokenRequest and Events."""

    def __init__(self, configuration: kubernetes.client.Configuration, field_manager: str,
                 user_agent: str = USER_AGENT, credentials: InlineCredentials | None = None):
        self._configuration = configuration
        self._credentials = credentials or InlineCredentials()
        self.field_manager = field_manager
        self.user_agent = user_agent
        self.counters = RequestCounters()
        self._resources: dict[tuple[str, str], Resource] = {}
        self._discovery_lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None
        self._credential_fd: int | None = None
        """The memfd kopf_connection hands kopf, open as long as this client lives."""

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_kubeconfig(cls, path: str | None, field_manager: str, **kwargs) -> KubeClient:
        """From a kubeconfig file (None: $KUBECONFIG or ~/.kube/config), else in-cluster; NoCluster
        (one line: what was tried, what to do) when none of them gives a cluster."""
        try:
            paths = kubeconfig_paths(path)
            if not paths:
                configuration = kubernetes.client.Configuration()
                kubernetes.config.load_incluster_config(client_configuration=configuration)
                return cls(configuration, field_manager, **kwargs)
            kubeconfig, base_path = read_kubeconfig_files(paths)
            return cls._from_dict(kubeconfig, field_manager, base_path, **kwargs)
        except (kubernetes.config.ConfigException, OSError, yaml.YAMLError) as error:
            raise NoCluster(no_cluster_message(path, error)) from None

    @classmethod
    def from_kubeconfig_dict(cls, kubeconfig: dict, field_manager: str, **kwargs) -> KubeClient:
        """From a kubeconfig held in memory, e.g. the virtual cluster's ``vc-<release>`` Secret."""
        return cls._from_dict(kubeconfig, field_manager, None, **kwargs)

    @classmethod
    def _from_dict(cls, kubeconfig: dict, field_manager: str, base_path: Path | None,
                   **kwargs) -> KubeClient:
        stripped, credentials = split_inline_credentials(kubeconfig)
        configuration = kubernetes.client.Configuration()
        KubeConfigLoader(config_dict=stripped, config_base_path=str(base_path or "")).load_and_set(configuration)
        return cls(configuration, field_manager, credentials=credentials, **kwargs)

    @property
    def server(self) -> str:
        """The API server's URL this client talks to."""
        return str(self._configuration.host)

    def _ssl_context(self) -> ssl.SSLContext | bool:
        return tls_context(self._configuration, self._credentials)

    def kopf_connection(self) -> kopf.ConnectionInfo:
        """The same identity for kopf's own API client (a ``@kopf.on.login`` handler returns it).

        kopf's default login goes through the `kubernetes` package's loader, which copies an inline
        client key into TMPDIR for the life of the process; here the key stays in an in-memory file
        (memfd) this client holds open, which kopf reads by path whenever it logs in again."""
        import kopf

        c = self._configuration
        if c.refresh_api_key_hook is not None:
            c.refresh_api_key_hook(c)
        header = c.get_api_key_with_prefix("authorization") or c.get_api_key_with_prefix("BearerToken")
        scheme, _, token = (header or "").rpartition(" ")
        certificate_path, key_path = c.cert_file, c.key_file
        certificate_data = key_data = None
        if self._credentials.client_certificate and self._credentials.client_key:
            if hasattr(os, "memfd_create"):
                if self._credential_fd is None:
                    self._credential_fd = memory_file(
                        self._credentials.client_certificate + b"\n" + self._credentials.client_key)
                certificate_path = key_path = f"/proc/self/fd/{self._credential_fd}"
            else:
                certificate_data, key_data = self._credentials.client_certificate, self._credentials.client_key
        return kopf.ConnectionInfo(
            server=c.host, ca_path=c.ssl_ca_cert, ca_data=self._credentials.ca, insecure=not c.verify_ssl,
            scheme=scheme or None, token=token or None,
            certificate_path=certificate_path, private_key_path=key_path,
            certificate_data=certificate_data, private_key_data=key_data)

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl_context(), limit=32)
            self._session = aiohttp.ClientSession(
                base_url=self._configuration.host.rstrip("/") + "/", connector=connector,
                timeout=REQUEST_TIMEOUT)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._credential_fd is not None:
            os.close(self._credential_fd)
            self._credential_fd = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_) -> None:
        await self.close()

    # -- transport ------------------------------------------------------------------------------

    def _headers(self, content_type: str | None, accept: str = "application/json") -> dict[str, str]:
        c = self._configuration
        if c.refresh_api_key_hook is not None:
            c.refresh_api_key_hook(c)
        headers = {"Accept": accept, "User-Agent": self.user_agent}
        token = c.get_api_key_with_prefix("authorization") or c.get_api_key_with_prefix("BearerToken")
        if token:
            headers["Authorization"] = token
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(self, method: str, path: str, *, params: dict | None = None,
                      body: Any = None, content_type: str | None = None, accept: str = "application/json") -> Any:
        """Send one request; the decoded JSON answer, or ApiError (status 0: no answer)."""
        return (await self._exchange(method, path, params=params, body=body, content_type=content_type,
                                     accept=accept))[1]

    async def stream_lines(self, path: str, params: dict, accept: str, read_seconds: float) -> AsyncIterator[bytes]:
        """A GET whose answer is read line by line as it arrives (a watch), for as long as the server
        sends; ApiError when it refuses, or sends nothing for `read_seconds`."""
        session = await self._get_session()
        self.counters.by_method["WATCH"] += 1
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=read_seconds)
        try:
            async with session.get(path.lstrip("/"), params=params, timeout=timeout,
                                   headers=self._headers(None, accept)) as response:
                if response.status >= 400:
                    raise _error(response.status, await response.text(), "WATCH", path)
                async for line in response.content:
                    yield line
        except aiohttp.ClientError as error:
            raise ApiError(0, "ConnectionFailed", str(error), "WATCH", path) from error
        except TimeoutError as error:
            raise ApiError(0, "Timeout", "the stream went silent", "WATCH", path) from error

    async def _exchange(self, method: str, path: str, *, params: dict | None = None,
                        body: Any = None, content_type: str | None = None,
                        accept: str = "application/json") -> tuple[int, Any]:
        """`request`, with the HTTP status of the answer."""
        session = await self._get_session()
        self.counters.by_method[method] += 1
        data = None if body is None else json.dumps(body)
        if data is not None and content_type is None:
            content_type = "application/json"
        try:
            async with session.request(method, path.lstrip("/"), params=params, data=data,
                                       headers=self._headers(content_type, accept)) as response:
                text = await response.text()
                if response.status >= 400:
                    raise _error(response.status, text, method, path)
                return response.status, (json.loads(text) if text else None)
        except aiohttp.ClientError as error:
            raise ApiError(0, "ConnectionFailed", str(error), method, path) from error
        except TimeoutError as error:
            raise ApiError(0, "Timeout", "no answer in time", method, path) from error

    # -- discovery ------------------------------------------------------------------------------

    async def resource(self, api_version: str, kind: str) -> Resource:
        """The Resource of a kind, from API discovery (once per group version)."""
        key = (api_version, kind)
        if key not in self._resources:
            async with self._discovery_lock:
                if key not in self._resources:
                    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
                    listing = await self.request("GET", prefix)
                    for item in listing.get("resources", []):
                        if "/" not in item["name"]:
                            self._resources[(api_version, item["kind"])] = Resource(
                                api_version, item["kind"], item["name"], item["namespaced"])
        try:
            return self._resources[key]
        except KeyError:
            raise ApiError(404, "NotFound", f"the API server serves no kind {kind} in {api_version}; "
                           "is its CRD installed?") from None

    # -- objects --------------------------------------------------------------------------------

    async def get(self, api_version: str, kind: str, name: str,
                  namespace: str | None = None) -> dict | None:
        """The object, or None if it does not exist."""
        resource = await self.resource(api_version, kind)
        try:
            return await self.request("GET", resource.path(namespace, name))
        except ApiError as error:
            if error.not_found:
                return None
            raise

    async def list(self, api_version: str, kind: str, *, namespace: str | None = None,
                   label_selector: str | None = None) -> list[dict]:
        """All objects of a kind (in one namespace or all), optionally filtered by labels."""
        resource = await self.resource(api_version, kind)
        params = {"labelSelector": label_selector} if label_selector else None
        answer = await self.request("GET", resource.path(namespace), params=params)
        items = answer.get("items", [])
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    async def apply(self, obj: dict) -> dict:
        """Server-side apply under our one field manager, taking over conflicting fields."""
        return (await self.apply_reporting_creation(obj))[0]

    async def apply_reporting_creation(self, obj: dict) -> tuple[dict, bool]:
        """`apply`, and whether this very write created the object (the API server answers 201)."""
        resource = await self.resource(obj["apiVersion"], obj["kind"])
        metadata = obj["metadata"]
        status, applied = await self._exchange(
            "PATCH", resource.path(metadata.get("namespace"), metadata["name"]),
            params={"fieldManager": self.field_manager, "force": "true"}, body=obj,
            content_type="application/apply-patch+yaml")
        return applied, status == CREATED

    async def patch(self, api_version: str, kind: str, name: str, patch: dict,
                    namespace: str | None = None, subresource: str = "") -> dict:
        """A JSON merge patch (None values delete keys)."""
        resource = await self.resource(api_version, kind)
        path = resource.path(namespace, name) + (f"/{subresource}" if subresource else "")
        return await self.request("PATCH", path, body=patch,
                                  content_type="application/merge-patch+json")

    async def replace_managed_fields(self, api_version: str, kind: str, body: dict,
                                     entries: builtins.list[dict]) -> dict:
        """Set the object's `managedFields` to `entries`, only if it is still at the body's
        resourceVersion (else ApiError): who owns which field, never the fields themselves."""
        metadata = body["metadata"]
        resource = await self.resource(api_version, kind)
        return await self.request("PATCH", resource.path(metadata.get("namespace"), metadata["name"]), body=[
            {"op": "test", "path": "/metadata/resourceVersion", "value": metadata["resourceVersion"]},
            {"op": "replace", "path": "/metadata/managedFields", "value": entries}],
            content_type="application/json-patch+json")

    async def apply_status(self, api_version: str, kind: str, name: str, status: dict, writer: str,
                           namespace: str | None = None) -> dict:
        """Server-side apply of `status` through the status subresource under the writer's own field
        manager (``<field manager>-<writer>``): the writer owns exactly the fields it sends, a field
        it stops sending is removed, and another writer's fields (conditions of other types in a
        list-map) are left alone, so concurrent writers lose nothing without reading first."""
        resource = await self.resource(api_version, kind)
        metadata: dict[str, str] = {"name": name} | ({"namespace": namespace} if namespace else {})
        return await self.request(
            "PATCH", resource.path(namespace, name) + "/status",
            params={"fieldManager": f"{self.field_manager}-{writer}", "force": "true"},
            body={"apiVersion": api_version, "kind": kind, "metadata": metadata, "status": status},
            content_type="application/apply-patch+yaml")

    async def delete(self, api_version: str, kind: str, name: str,
                     namespace: str | None = None) -> bool:
        """Delete with background propagation; False if it was already gone."""
        resource = await self.resource(api_version, kind)
        try:
            await self.request("DELETE", resource.path(namespace, name),
                               body={"propagationPolicy": "Background"})
            return True
        except ApiError as error:
            if error.not_found:
                return False
            raise

    async def create(self, obj: dict) -> dict:
        resource = await self.resource(obj["apiVersion"], obj["kind"])
        return await self.request("POST", resource.path(obj["metadata"].get("namespace")), body=obj)

    async def request_token(self, namespace: str, service_account: str,
                            expiration_seconds: int) -> dict:
        """A TokenRequest for a ServiceAccount; the answer's status holds token and expiry."""
        return await self.request(
            "POST", f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts/{quote(service_account)}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": expiration_seconds}})

    async def post_event(self, involved: dict, event_type: str, reason: str, message: str,
                         timestamp: str) -> None:
        """A core/v1 Event about `involved` (in `default` for cluster-scoped objects, as kubectl
        describe looks there for them)."""
        metadata = involved["metadata"]
        namespace = metadata.get("namespace") or "default"
        await self.create({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": namespace},
            "involvedObject": {"apiVersion": involved["apiVersion"], "kind": involved["kind"],
                               "name": metadata["name"], "uid": metadata.get("uid"),
                               "namespace": metadata.get("namespace")},
            "type": event_type, "reason": reason, "message": message[:1024],
            "firstTimestamp": timestamp, "lastTimestamp": timestamp, "count": 1,
            "source": {"component": self.user_agent},
            "reportingComponent": self.user_agent, "reportingInstance": self.user_agent,
        })


def _error(status: int, text: str, method: str, path: str) -> ApiError:
    try:
        body = json.loads(text)
        return ApiError(status, body.get("reason", ""), body.get("message", text), method, path)
    except (ValueError, AttributeError):
        return ApiError(status, "", text[:500], method, path)
