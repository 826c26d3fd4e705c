"""The per-user CA that lets the proxy speak TLS for credentialed hosts, and the leaf certificates it signs.

Made on first use under $XDG_STATE_HOME/lis-tui/ca (key 0600, directory 0700). Only sandboxes
trust it (a bundle mounted into each one); the host's trust store is never touched, and the key
never enters a sandbox.
"""
from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
import socket
import ssl
import tempfile
import threading
import time
from pathlib import Path

from .policy import NetworkError

CA_DAYS = 3650
LEAF_DAYS = 30
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                  "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem")


def _crypto():
    try:
        from cryptography import x509  # noqa: PLC0415 (an optional extra)
        from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    except ImportError:
        from ..extras import install_hint  # noqa: PLC0415

        raise NetworkError("network credentials need the proxy to speak TLS, which needs the "
                           f"`cryptography` package: {install_hint('tls')}") from None
    return x509, hashes, serialization, ec


def require_crypto() -> None:
    """NetworkError with the pip line when `cryptography` (the `tls` extra) is missing."""
    _crypto()


def default_ca_dir() -> Path:
    from ..records import state_dir  # noqa: PLC0415

    return state_dir() / "ca"


class SandboxCA:
    """The CA's certificate (public) and key (host-side only), and a TLS server context per host."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory else default_ca_dir()
        self.cert_path = self.directory / "ca.pem"
        self._key_path = self.directory / "ca.key"
        self._lock = threading.Lock()
        self._contexts: dict[str, tuple[float, ssl.SSLContext]] = {}
        self._leaf_key = None
        self._ca = self._load_or_create()

    @property
    def cert_pem(self) -> bytes:
        return self.cert_path.read_bytes()

    def _load_or_create(self):
        x509, _, serialization, _ = _crypto()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        with open(self.directory / ".lock", "a") as lock:  # two lis-tui starting at once make one CA
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self._key_path.exists():
                self._create()
            key = serialization.load_pem_private_key(self._key_path.read_bytes(), None)
            cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        return cert, key

    def _create(self) -> None:
        x509, hashes, serialization, ec = _crypto()
        from cryptography.x509.oid import NameOID  # noqa: PLC0415

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"lis-tui sandbox CA ({_who()})"),
                          x509.NameAttribute(NameOID.ORGANIZATION_NAME, "lis-tui")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False, key_agreement=False,
                                             key_cert_sign=True, crl_sign=True, encipher_only=False,
                                             decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        _write_private(self._key_path, key_pem, 0o600)
        _write_private(self.cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for `host` signed by this CA (cached)."""
        with self._lock:
            made, context = self._contexts.get(host, (0.0, None))
            if context is None or time.monotonic() - made > LEAF_DAYS * 86400 / 2:  # a server runs for weeks
                context = self._make_context(host)
                self._contexts[host] = (time.monotonic(), context)
            return context

    def _make_context(self, host: str) -> ssl.SSLContext:
        x509, hashes, serialization, ec = _crypto()
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: PLC0415

        ca_cert, ca_key = self._ca
        if self._leaf_key is None:  # one key for every leaf: signing is cheap, key generation less so
            self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        try:
            san = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
                .issuer_name(ca_cert.subject).public_key(self._leaf_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
                .add_extension(x509.SubjectAlternativeName([san]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        chain = cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(serialization.Encoding.PEM)
        key = self._leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])  # the proxy reads HTTP/1.1 heads, not HTTP/2 frames
        # ssl loads a chain only from files: a private directory, gone once loaded.
        with tempfile.TemporaryDirectory(dir=self.directory, prefix="leaf-") as tmp:
            _write_private(Path(tmp) / "leaf.pem", chain + key, 0o600)
            context.load_cert_chain(Path(tmp) / "leaf.pem")
        return context

    def bundle(self) -> bytes:
        """The system's CA bundle with this CA appended: what sandboxes trust."""
        system = b""
        for path in SYSTEM_BUNDLES:
            try:
                system = Path(path).read_bytes()
                break
            except OSError:
                continue
        if system and not system.endswith(b"\n"):
            system += b"\n"
        return system + self.cert_pem


def upstream_context(extra_ca: str | os.PathLike | None = None) -> ssl.SSLContext:
    """How the proxy checks the real server: the system trust store and the host name, as any client."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    if extra_ca is not None:
        context.load_verify_locations(cafile=str(extra_ca))
    return context


def _write_private(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _who() -> str:
    try:
        import pwd  # noqa: PLC0415

        user = pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"[:50]
