"""``python -m deploy certs``: the mission CA and site certificates, their fields, and a mutual TLS handshake."""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from contracts.mission import load_mission

REPO = Path(__file__).resolve().parents[2]


def mission_file(tmp_path: Path) -> Path:
    p = tmp_path / "m.toml"
    p.write_text('[mission]\nname = "ops-7"\ndata_dir = "var"\n[rcm]\ntls = true\n'
                 '[sites.ground1]\nrcm = "10.1.0.5:7101"\nchat = "ground1.example.net:8101"\n'
                 '[sites.awacs]\nrcm = "127.0.0.1:7102"\nchat = "127.0.0.1:8102"\n')
    return p


def certs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy", "certs", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_ca_and_site_certificates_have_the_agreed_fields(tmp_path: Path) -> None:
    mpath = mission_file(tmp_path)
    r = certs("--mission", str(mpath))
    assert r.returncode == 0, r.stderr
    var = tmp_path / "var"
    ca = load(var / "ca" / "ca.pem")
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "ops-7 mission CA"
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert bc.ca is True and bc.path_length == 0
    assert (var / "ca" / "ca-key.pem").stat().st_mode & 0o777 == 0o600
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey) and ca.public_key().curve.name == "secp256r1"

    for site, want in {"ground1": [x509.DNSName("ground1"), x509.IPAddress(ipaddress.ip_address("10.1.0.5")),
                                   x509.DNSName("ground1.example.net")],
                       "awacs": [x509.DNSName("awacs"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]}.items():
        d = var / site / "tls"
        assert (d / "ca.pem").read_bytes() == (var / "ca" / "ca.pem").read_bytes()
        assert (d / "key.pem").stat().st_mode & 0o777 == 0o600
        cert = load(d / "cert.pem")
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == site
        assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "ops-7"
        assert cert.issuer == ca.subject
        assert list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value) == want
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        life = cert.not_valid_after_utc - cert.not_valid_before_utc
        assert dt.timedelta(days=729) < life < dt.timedelta(days=731)
        assert cert.public_key().curve.name == "secp256r1"      # type: ignore[union-attr]
        cert.verify_directly_issued_by(ca)
        key = load_pem_private_key((d / "key.pem").read_bytes(), None)
        assert key.public_key() == cert.public_key()


def test_existing_ca_is_kept_unless_forced_and_rotate_reuses_it(tmp_path: Path) -> None:
    mpath = mission_file(tmp_path)
    var = tmp_path / "var"
    assert certs("--mission", str(mpath)).returncode == 0
    ca_before = (var / "ca" / "ca.pem").read_bytes()
    site_before = (var / "awacs" / "tls" / "cert.pem").read_bytes()

    r = certs("--mission", str(mpath))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "already exists" in r.stderr and "--force" in r.stderr and "--rotate" in r.stderr
    assert (var / "ca" / "ca.pem").read_bytes() == ca_before

    r = certs("--mission", str(mpath), "--rotate", "--site", "awacs")
    assert r.returncode == 0, r.stderr
    assert (var / "ca" / "ca.pem").read_bytes() == ca_before
    rotated = (var / "awacs" / "tls" / "cert.pem").read_bytes()
    assert rotated != site_before
    load(var / "awacs" / "tls" / "cert.pem").verify_directly_issued_by(load(var / "ca" / "ca.pem"))

    r = certs("--mission", str(mpath), "--force")
    assert r.returncode == 0, r.stderr
    assert (var / "ca" / "ca.pem").read_bytes() != ca_before

    r = certs("--mission", str(mpath), "--force", "--rotate")
    assert r.returncode == 2 and "not allowed with" in r.stderr


def test_rotate_without_a_ca_is_one_clear_line(tmp_path: Path) -> None:
    r = certs("--mission", str(mission_file(tmp_path)), "--rotate")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no mission CA" in r.stderr


def test_two_sites_complete_a_mutual_tls_handshake(tmp_path: Path) -> None:
    """OpenSSL accepts the chain both ways: each side requires and verifies the other's certificate."""
    mpath = mission_file(tmp_path)
    assert certs("--mission", str(mpath)).returncode == 0
    m = load_mission(mpath)

    def ctx(site: str, server: bool) -> ssl.SSLContext:
        d = m.site_dir(site) / "tls"
        c = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH,
                                       cafile=str(d / "ca.pem"))
        c.verify_mode = ssl.CERT_REQUIRED
        c.load_cert_chain(str(d / "cert.pem"), str(d / "key.pem"))
        return c

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: dict[str, object] = {}

    def serve() -> None:
        conn, _ = listener.accept()
        with ctx("awacs", server=True).wrap_socket(conn, server_side=True) as tls:
            seen["client"] = tls.getpeercert()
            tls.sendall(b"ok")

    t = threading.Thread(target=serve)
    t.start()
    try:
        client = ctx("ground1", server=False)       # checks the host name: the site name is a SAN
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                client.wrap_socket(raw, server_hostname="awacs") as tls:
            server_cert = tls.getpeercert()
            assert tls.recv(2) == b"ok"
    finally:
        t.join(10)
        listener.close()
    subject = {k: v for rdn in server_cert["subject"] for k, v in rdn}      # type: ignore[index]
    assert subject["commonName"] == "awacs" and subject["organizationName"] == "ops-7"
    client_subject = {k: v for rdn in seen["client"]["subject"] for k, v in rdn}   # type: ignore[index]
    assert client_subject["commonName"] == "ground1"
    assert os.path.exists(m.data_dir / "ca" / "ca-key.pem")


def test_a_user_certificate_names_the_account_and_says_it_is_a_users(tmp_path: Path) -> None:
    mpath = mission_file(tmp_path)
    assert certs("--mission", str(mpath)).returncode == 0
    out = tmp_path / "alice-certs"
    r = subprocess.run([sys.executable, "-m", "deploy", "user-cert", "--mission", str(mpath), "--out", str(out),
                        "alice"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cert = load(out / "alice.pem")
    subject = {a.oid: a.value for a in cert.subject}
    assert (subject[NameOID.COMMON_NAME], subject[NameOID.ORGANIZATIONAL_UNIT_NAME]) == ("alice", "user")
    ca = load(tmp_path / "var" / "ca" / "ca.pem")
    cert.verify_directly_issued_by(ca)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert (out / "alice-key.pem").stat().st_mode & 0o777 == 0o600
    assert {p.name for p in out.iterdir()} == {"alice.pem", "alice-key.pem", "alice.p12", "truststore.p12"}
    bad = subprocess.run([sys.executable, "-m", "deploy", "user-cert", "--mission", str(mpath), "--out",
                          str(out), "not a name"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "account name" in bad.stderr
