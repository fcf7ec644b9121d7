"""``python -m deploy certs``: a mission CA and one certificate per site, for ``tls = true``.

Layout (what ``rcm.server.tls.tls_paths`` reads)::

    <data_dir>/ca/ca.pem           mission CA certificate
    <data_dir>/ca/ca-key.pem       CA private key (0600; keep it off the sites in production)
    <data_dir>/<site>/tls/ca.pem   the CA certificate again, for the site
    <data_dir>/<site>/tls/cert.pem the site's certificate
    <data_dir>/<site>/tls/key.pem  its private key (0600)

Site certificate: CN = site, O = mission name; SAN DNS:<site> plus every host
of the site's ``rcm`` and ``chat`` addresses (IP SANs for addresses, DNS for
names); EKU serverAuth + clientAuth; valid two years; EC P-256. CA: CN =
"<mission> mission CA", basicConstraints CA:true pathlen 0, ten years.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from contracts.mission import Mission

SITE_VALIDITY = dt.timedelta(days=730)
CA_VALIDITY = dt.timedelta(days=3650)
BACKDATE = dt.timedelta(minutes=5)       # tolerate small clock differences between hosts


class CertError(Exception):
    """Certificates cannot be made as asked (the message says why)."""


@dataclass(frozen=True)
class CertPaths:
    ca_dir: Path
    ca_cert: Path
    ca_key: Path

    @classmethod
    def of(cls, mission: Mission) -> CertPaths:
        d = mission.data_dir / "ca"
        return cls(d, d / "ca.pem", d / "ca-key.pem")


def site_tls_dir(mission: Mission, site: str) -> Path:
    return mission.site_dir(site) / "tls"


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` with ``mode`` from the first byte on (no window where a key is world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    tmp.replace(path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(mission_name: str, now: dt.datetime | None = None) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new mission CA: key and self-signed certificate."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{mission_name} mission CA"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, mission_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def site_sans(mission: Mission, site: str) -> list[x509.GeneralName]:
    """DNS:<site>, then every host of the site's rcm and chat addresses (IP or DNS), without repeats."""
    sc = mission.site(site)
    names: list[x509.GeneralName] = [x509.DNSName(site)]
    for host in (sc.rcm.host, sc.chat.host):
        try:
            gn: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            gn = x509.DNSName(host)
        if gn not in names:
            names.append(gn)
    return names


def make_site_cert(mission: Mission, site: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
                   now: dt.datetime | None = None) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and CA-signed certificate for ``site``."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, site),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, mission.name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + SITE_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_agreement=True, key_cert_sign=False,
                                         crl_sign=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(site_sans(mission, site)), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def load_ca(paths: CertPaths) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    try:
        key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
        cert = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
    except FileNotFoundError as e:
        raise CertError(f"no mission CA at {paths.ca_dir} ({Path(e.filename).name} missing): "
                        "run `python -m deploy certs --mission FILE` first") from None
    except ValueError as e:
        raise CertError(f"cannot read the mission CA in {paths.ca_dir}: {e}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"{paths.ca_key} is not an EC key")
    return key, cert


def create(mission: Mission, sites: list[str] | None = None, *, force: bool = False,
           rotate: bool = False) -> list[Path]:
    """Make the CA (unless ``rotate``) and each site's certificate; the paths written.

    Refuses to replace an existing CA unless ``force``. ``rotate`` keeps the
    existing CA and issues new keys and certificates for the sites.
    """
    paths = CertPaths.of(mission)
    sites = sites or list(mission.sites)
    for s in sites:
        mission.site(s)
    written: list[Path] = []
    if rotate:
        if force:
            raise CertError("--rotate keeps the existing CA; --force replaces it: give one of them")
        ca_key, ca_cert = load_ca(paths)
    else:
        if (paths.ca_key.exists() or paths.ca_cert.exists()) and not force:
            raise CertError(f"a mission CA already exists in {paths.ca_dir}: use --rotate to issue new site "
                            "certificates with it, or --force to replace it (every site then needs new "
                            "certificates)")
        ca_key, ca_cert = make_ca(mission.name)
        _write(paths.ca_key, _key_pem(ca_key), 0o600)
        _write(paths.ca_cert, _cert_pem(ca_cert), 0o644)
        written += [paths.ca_cert, paths.ca_key]
    for s in sites:
        key, cert = make_site_cert(mission, s, ca_key, ca_cert)
        d = site_tls_dir(mission, s)
        _write(d / "key.pem", _key_pem(key), 0o600)
        _write(d / "cert.pem", _cert_pem(cert), 0o644)
        _write(d / "ca.pem", _cert_pem(ca_cert), 0o644)
        written += [d / "ca.pem", d / "cert.pem", d / "key.pem"]
    return written


def describe(path: Path) -> str:
    """One line about a certificate: subject, SANs, expiry."""
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = ", ".join(f"DNS:{n.value}" if isinstance(n, x509.DNSName) else f"IP:{n.value}" for n in san)
    except x509.ExtensionNotFound:
        sans = "-"
    return f"{cert.subject.rfc4514_string()}  SAN {sans}  until {cert.not_valid_after_utc:%Y-%m-%d}"
