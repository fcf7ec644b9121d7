"""``python -m deploy user-cert``: a user's client certificate (TAK clients), signed by the mission CA.

Theory of operation
-------------------
With ``tls = true`` a site's TAK port requires a client certificate signed by
the mission CA (the one ``python -m deploy certs`` made) and logs its CN in
as the account. Site certificates are signed by the same CA, so a user's
certificate says it is one: OU = ``user`` (chat_server/tak/server.py refuses any other,
and any CN that names a site). This module makes one with the mission CA (certs.py):
CN = the account, O = the mission, OU = ``user``, EKU clientAuth, EC P-256,
valid ``--days`` (365). It writes ``<user>.pem`` and ``<user>-key.pem``
(0600), ``<user>.p12`` (PKCS#12 with the CA, for ATAK/WinTAK/iTAK, protected
by ``--p12-password``, default ``atakatak`` as TAK tools use) and
``truststore.p12`` (the mission CA alone, same password: the clients'
"CA certificate").
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from chat_server.protocol import USER_NAME
from chat_server.tak.server import USER_OU
from contracts.mission import Mission

from .certs import BACKDATE, CertError, CertPaths, _write, load_ca

DEFAULT_P12_PASSWORD = "atakatak"


def make_user_cert(mission: Mission, user: str, days: int = 365,
                   now: dt.datetime | None = None) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate,
                                                            x509.Certificate]:
    """A new key and a certificate for ``user`` signed by the mission CA; and the CA's certificate."""
    if not USER_NAME.match(user):
        raise CertError(f"{user!r} is not an account name")
    ca_key, ca_cert = load_ca(CertPaths.of(mission))
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, mission.name),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, USER_OU)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert, ca_cert


def write_user_cert(mission: Mission, user: str, out: Path, password: str = DEFAULT_P12_PASSWORD,
                    days: int = 365) -> list[Path]:
    """Write the user's PEM certificate and key, its PKCS#12 and the CA truststore under ``out``."""
    key, cert, ca = make_user_cert(mission, user, days)
    enc = serialization.BestAvailableEncryption(password.encode())
    files = [(out / f"{user}.pem", cert.public_bytes(serialization.Encoding.PEM), 0o644),
             (out / f"{user}-key.pem", key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()), 0o600),
             (out / f"{user}.p12", pkcs12.serialize_key_and_certificates(user.encode(), key, cert, [ca], enc), 0o600),
             (out / "truststore.p12", pkcs12.serialize_key_and_certificates(b"ca", None, None, [ca], enc), 0o644)]
    for path, data, mode in files:
        _write(path, data, mode)
    return [p for p, _, _ in files]
