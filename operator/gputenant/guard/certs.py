"""Serving certificates of the admission webhook: a private CA and a short-lived leaf, both
generated with ``cryptography`` and renewed before they expire.

The apiserver trusts the CA bundle in the webhook configurations. A renewed leaf is signed by the
same CA, so nothing else changes; a renewed CA is added to the bundle next to the old one, so
the apiserver accepts both while the server switches over.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = timedelta(days=365)
LEAF_LIFETIME = timedelta(days=30)
RENEW_WHEN_LEFT = 1 / 3
"""Renew a certificate once less than this fraction of its lifetime is left."""


@dataclass(frozen=True)
class CertificatePaths:
    ca_bundle: Path
    """PEM of the CA (and, while a CA rotation overlaps, its predecessor): the configurations' caBundle."""
    cert: Path
    key: Path

    @classmethod
    def in_directory(cls, directory: Path) -> CertificatePaths:
        return cls(directory / "ca-bundle.crt", directory / "tls.crt", directory / "tls.key")


def _ca_files(directory: Path) -> tuple[Path, Path]:
    return directory / "ca.crt", directory / "ca.key"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write through a temporary file and rename, so a reader never sees half a PEM."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_bytes(data)
    if private:
        os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def _needs_renewal(cert: x509.Certificate, now: datetime) -> bool:
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.not_valid_after_utc - now < lifetime * RENEW_WHEN_LEFT


def _sans(hostnames: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for hostname in hostnames:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(hostname)))
        except ValueError:
            names.append(x509.DNSName(hostname))
    return names


def _new_ca(now: datetime, lifetime: timedelta) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    # A unique name per CA: a leaf's issuer must tell a renewed CA from its predecessor.
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gputenant-guard-ca-{os.urandom(6).hex()}")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + lifetime)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _new_leaf(ca: x509.Certificate, ca_key, hostnames: list[str], now: datetime,
              lifetime: timedelta) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(min(now + lifetime, ca.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName(_sans(hostnames)), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def _leaf_sans(cert: x509.Certificate) -> set[str]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n.value) for n in names}


def ensure_certificates(directory: Path, hostnames: list[str], *, now: datetime | None = None,
                        ca_lifetime: timedelta = CA_LIFETIME, leaf_lifetime: timedelta = LEAF_LIFETIME) -> bool:
    """Create or renew the CA and serving certificate in ``directory``; True if anything changed.

    Renews the leaf when a third of its lifetime is left, its hostnames changed or its CA changed;
    renews the CA on the same schedule and keeps the old CA in the bundle until it expires.
    """
    if not hostnames:
        raise ValueError("webhook hostnames are empty: pass the host (or Service DNS names) the apiserver dials")
    now = now or datetime.now(UTC)
    directory.mkdir(parents=True, exist_ok=True)
    paths = CertificatePaths.in_directory(directory)
    ca_cert_path, ca_key_path = _ca_files(directory)
    changed = False

    ca = ca_key = None
    if ca_cert_path.exists() and ca_key_path.exists():
        ca = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    if ca is None or _needs_renewal(ca, now):
        previous = [c for c in _bundle(paths.ca_bundle) if c.not_valid_after_utc > now]
        ca, ca_key = _new_ca(now, ca_lifetime)
        _write(ca_key_path, _key_pem(ca_key), private=True)
        _write(ca_cert_path, ca.public_bytes(serialization.Encoding.PEM))
        bundle = [ca] + previous
        _write(paths.ca_bundle, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in bundle))
        changed = True

    leaf = x509.load_pem_x509_certificate(paths.cert.read_bytes()) if paths.cert.exists() and paths.key.exists() else None
    if (changed or leaf is None or not _issued_by(leaf, ca) or _needs_renewal(leaf, now)
            or _leaf_sans(leaf) != {str(n.value) for n in _sans(hostnames)}):
        leaf, key = _new_leaf(ca, ca_key, hostnames, now, leaf_lifetime)
        _write(paths.key, _key_pem(key), private=True)
        _write(paths.cert, leaf.public_bytes(serialization.Encoding.PEM))
        changed = True
    return changed


def _issued_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _bundle(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes()) if path.exists() else []


def expires_at(path: Path) -> datetime:
    return x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc
