"""KubeClient keeps a kubeconfig's inline certificates and key in memory (issue 17): a real TLS
server on loopback that requires a client certificate sees the one from the kubeconfig, while
the process's temporary folder stays empty."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gputenant.kube import client as kube_client
from gputenant.kube.client import KubeClient
from gputenant.kube.credentials import split_inline_credentials


def _certificate(common_name: str, key, issuer_name: str, issuer_key, ca: bool) -> bytes:
    now = datetime.now(UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - timedelta(minutes=1)).not_valid_after(now + timedelta(hours=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@pytest.fixture
def pki(tmp_path):
    """A CA, a server certificate for localhost and a system:masters-style client certificate."""
    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _certificate("test-ca", ca_key, "test-ca", ca_key, ca=True)
    (tmp_path / "server.pem").write_bytes(_certificate("localhost", server_key, "test-ca", ca_key, ca=False)
                                          + _key_pem(server_key))
    return {"ca": ca, "server": tmp_path / "server.pem",
            "client_cert": _certificate("vcluster-admin", client_key, "test-ca", ca_key, ca=False),
            "client_key": _key_pem(client_key)}


def _b64(data: bytes) -> str:
    return base64.standard_b64encode(data).decode()


def _kubeconfig(server: str, pki: dict) -> dict:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "vc",
        "clusters": [{"name": "vc", "cluster": {"server": server, "certificate-authority-data": _b64(pki["ca"])}}],
        "users": [{"name": "admin", "user": {"client-certificate-data": _b64(pki["client_cert"]),
                                             "client-key-data": _b64(pki["client_key"])}}],
        "contexts": [{"name": "vc", "context": {"cluster": "vc", "user": "admin"}}],
    }


async def _serve_peer_name(pki: dict):
    """An HTTPS server that requires a client certificate signed by the CA and answers with its
    common name."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=pki["ca"].decode())
    context.load_cert_chain(pki["server"])
    context.verify_mode = ssl.CERT_REQUIRED

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        subject = dict(part[0] for part in writer.get_extra_info("peercert")["subject"])
        body = json.dumps({"commonName": subject["commonName"]}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    return server, server.sockets[0].getsockname()[1]


@pytest.fixture
def private_tmpdir(tmp_path, monkeypatch):
    """The process's TMPDIR, empty, for the test to inspect."""
    folder = tmp_path / "operator-tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return folder


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


@pytest.mark.parametrize("memfd", [True, False], ids=["memfd", "unlinked-private-file"])
def test_inline_client_certificate_authenticates_without_a_file_left(pki, private_tmpdir, monkeypatch, memfd):
    if not memfd:
        monkeypatch.delattr(os, "memfd_create", raising=False)
    elif not hasattr(os, "memfd_create"):
        pytest.skip("memfd_create is Linux-only")

    async def scenario() -> dict:
        server, port = await _serve_peer_name(pki)
        async with server:
            kubeconfig = _kubeconfig(f"https://localhost:{port}", pki)
            async with KubeClient.from_kubeconfig_dict(kubeconfig, "test") as client:
                return await client.request("GET", "/api")

    assert asyncio.run(scenario()) == {"commonName": "vcluster-admin"}
    assert _files_under(private_tmpdir) == []


def test_from_kubeconfig_file_keeps_inline_keys_in_memory(pki, private_tmpdir, tmp_path):
    """The operator's own kubeconfig (--kubeconfig) takes the same path as a vCluster's."""
    async def scenario() -> dict:
        server, port = await _serve_peer_name(pki)
        async with server:
            path = tmp_path / "kubeconfig"
            path.write_text(yaml.safe_dump(_kubeconfig(f"https://localhost:{port}", pki)))
            async with KubeClient.from_kubeconfig(str(path), "test") as client:
                return await client.request("GET", "/api")

    assert asyncio.run(scenario()) == {"commonName": "vcluster-admin"}
    assert _files_under(private_tmpdir) == []


def test_split_leaves_the_caller_kubeconfig_untouched_and_the_rest_for_the_loader(pki):
    kubeconfig = _kubeconfig("https://vc.example:443", pki)
    stripped, credentials = split_inline_credentials(kubeconfig)
    assert credentials.ca == pki["ca"] and credentials.client_key == pki["client_key"]
    assert "client-key-data" in kubeconfig["users"][0]["user"]
    assert stripped["users"][0]["user"] == {}
    assert stripped["clusters"][0]["cluster"] == {"server": "https://vc.example:443"}


def test_kubeconfig_files_merge_like_kubectl_with_relative_paths_resolved(tmp_path):
    first, second = tmp_path / "a" / "config", tmp_path / "b" / "config"
    first.parent.mkdir()
    second.parent.mkdir()
    first.write_text(yaml.safe_dump({"current-context": "one", "clusters": [
        {"name": "one", "cluster": {"server": "https://one", "certificate-authority": "ca.crt"}}]}))
    second.write_text(yaml.safe_dump({"current-context": "two", "clusters": [
        {"name": "one", "cluster": {"server": "https://shadowed"}},
        {"name": "two", "cluster": {"server": "https://two"}}]}))
    merged, base = kube_client.read_kubeconfig_files([first, second])
    assert merged["current-context"] == "one" and base == first.parent
    assert merged["clusters"] == [
        {"name": "one", "cluster": {"server": "https://one", "certificate-authority": str(first.parent / "ca.crt")}},
        {"name": "two", "cluster": {"server": "https://two"}}]


def test_kopf_logs_in_with_the_same_identity_and_no_file(pki, private_tmpdir, tmp_path):
    """kopf's default login copies an inline key into TMPDIR for the process's life; the login
    KubeClient.kopf_connection gives it reads the key from memory, as often as kopf logs in."""
    async def scenario() -> list[dict]:
        server, port = await _serve_peer_name(pki)
        answers = []
        async with server:
            path = tmp_path / "kubeconfig"
            path.write_text(yaml.safe_dump(_kubeconfig(f"https://localhost:{port}", pki)))
            client = KubeClient.from_kubeconfig(str(path), "test")
            for _ in range(2):
                connection = client.kopf_connection()
                reader, writer = await asyncio.open_connection("localhost", port, ssl=connection.as_ssl_context())
                writer.write(b"GET /api HTTP/1.1\r\nHost: localhost\r\n\r\n")
                answers.append(json.loads((await reader.read()).split(b"\r\n\r\n", 1)[1]))
                writer.close()
            await client.close()
        return answers

    assert asyncio.run(scenario()) == [{"commonName": "vcluster-admin"}] * 2
    assert _files_under(private_tmpdir) == []


def test_kopf_connection_carries_a_bearer_token():
    kubeconfig = {"current-context": "c", "clusters": [{"name": "c", "cluster": {"server": "https://h:6443"}}],
                  "users": [{"name": "u", "user": {"token": "abc.def"}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    connection = KubeClient.from_kubeconfig_dict(kubeconfig, "test").kopf_connection()
    assert (connection.server, connection.scheme, connection.token) == ("https://h:6443", "Bearer", "abc.def")
    assert connection.certificate_path is None and connection.private_key_data is None
