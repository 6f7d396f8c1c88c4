"""The plane's PKI: one CA for serving and client certificates, and service-account signing keys.

Everything is generated with `cryptography` on every start, so no secret is ever committed and a
new test identity costs one signature instead of an apiserver restart. ECDSA P-256 keys because
they are generated in microseconds, where RSA takes tens of milliseconds each.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=7)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def public_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write `<stem>.crt` and `<stem>.key` (mode 0600) and return their paths."""
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)
        return cert_path, key_path


class CertificateAuthority:
    """Signs the serving certificates of every apiserver and the client certificates of users."""

    def __init__(self, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey):
        self._cert = cert
        self._key = key

    @classmethod
    def create(cls, common_name: str = "kubeplane-ca") -> CertificateAuthority:
        key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        """Load the CA of a plane that is already running (to mint users for an attached plane)."""
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path}: not the EC key a kubeplane CA has")
        return cls(cert, key)

    @property
    def pair(self) -> KeyPair:
        return KeyPair(self._cert.public_bytes(serialization.Encoding.PEM), key_pem(self._key))

    def _issue(self, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list | None) -> KeyPair:
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return KeyPair(
            builder.sign(self._key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM),
            key_pem(key),
        )

    def serving_pair(self, common_name: str, dns_names: list[str], ips: list[str]) -> KeyPair:
        sans = [x509.DNSName(n) for n in dns_names] + [
            x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips
        ]
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        return self._issue(subject, ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def client_pair(self, user: str, groups: Iterable[str] = ()) -> KeyPair:
        """A client certificate: Kubernetes reads the user from CN and the groups from O."""
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, user)] + [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups
        ]
        return self._issue(x509.Name(attributes), ExtendedKeyUsageOID.CLIENT_AUTH, None)


def service_account_keys() -> tuple[bytes, bytes]:
    """A (private, public) PEM pair: apiservers sign service-account tokens with the private key
    and verify them with the public one; the controller-manager signs legacy token Secrets."""
    key = _new_key()
    return key_pem(key), public_key_pem(key)
