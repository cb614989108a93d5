"""Certificates for a local control plane and the admission webhook, made with `cryptography`.

One CA signs: the apiserver's serving certificate (IP SAN 127.0.0.1, DNS localhost and the
in-cluster names), client certificates (the admin with O=system:masters, or any user/groups so
tests can act as a ServiceAccount under its real RBAC), and webhook serving certificates. The
service-account token signing key pair is separate. ECDSA P-256 keeps generation instant.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass(frozen=True)
class CertPair:
    """PEM certificate and key."""

    cert: bytes
    key: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.write_bytes(self.cert)
        key_path.write_bytes(self.key)
        key_path.chmod(0o600)


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, cn: str = "gpugov-dev-ca") -> None:
        self._key = _key()
        now = dt.datetime.now(dt.UTC)
        self._cert = (
            x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(self._key, hashes.SHA256()))

    @property
    def pair(self) -> CertPair:
        return CertPair(self._cert.public_bytes(serialization.Encoding.PEM), _pem_key(self._key))

    def _issue(self, subject: x509.Name, usage: ExtendedKeyUsageOID,
               dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> CertPair:
        key = _key()
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self._cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if dns or ips:
            sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i))
                                                    for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return CertPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))

    def serving(self, cn: str, dns: tuple[str, ...] = ("localhost",),
                ips: tuple[str, ...] = ("127.0.0.1",)) -> CertPair:
        """A server certificate valid for the given names (IP SAN 127.0.0.1 by default)."""
        return self._issue(_name(cn), ExtendedKeyUsageOID.SERVER_AUTH, dns, ips)

    def client(self, user: str, groups: tuple[str, ...] = ()) -> CertPair:
        """A client certificate: the apiserver maps CN to the user name and O to groups."""
        return self._issue(_name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)


def service_account_keys() -> CertPair:
    """RSA key pair that signs ServiceAccount tokens (`cert` holds the public key PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    return CertPair(pub, _pem_key(key))


def service_account_user(namespace: str, name: str) -> tuple[str, tuple[str, ...]]:
    """User name and groups the apiserver gives a ServiceAccount, for an equivalent cert."""
    return (f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
             "system:authenticated"))
