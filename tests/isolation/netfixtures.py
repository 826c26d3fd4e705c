"""Loopback servers for network tests: static HTTP(S) on 127.0.0.2, a test CA, a pip index, a git
repository served over dumb HTTP, and a flat apt repository. Nothing listens beyond loopback."""
from __future__ import annotations

import functools
import hashlib
import http.server
import io
import shutil
import ssl
import subprocess
import threading
import time
import zipfile
from pathlib import Path

HOST = "127.0.0.2"  # loopback, but not the 127.0.0.1 that the sandbox's NO_PROXY names


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files, plus /stream (1 KiB every 20 ms until the client leaves) and /echo-headers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        self.server.headers.append(self.headers)
        if self.path == "/stream":
            return self._stream()
        if self.path == "/echo-headers":
            body = str(self.headers).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        return super().do_GET()

    def _stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(1 << 40))  # so a cut-off stream is an error to curl
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"x" * 1024)
                self.wfile.flush()
                time.sleep(0.02)
        except OSError:
            self.close_connection = True


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    tls: ssl.SSLContext | None = None

    def get_request(self):
        sock, address = self.socket.accept()
        if self.tls is not None:  # handshake in the request's thread, not in the accept loop
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address


class StaticServer:
    """Serves `root` at http(s)://127.0.0.2:PORT/ from a thread; `requests` lists the paths asked for."""

    def __init__(self, root: Path, tls: ssl.SSLContext | None = None) -> None:
        self.root = root
        self._server = _Server((HOST, 0), functools.partial(_Handler, directory=str(root)))
        self._server.requests = []
        self._server.headers = []
        self._server.tls = tls
        self.port = self._server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://{HOST}:{self.port}"
        self.hostport = f"{HOST}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    @property
    def headers(self) -> list:
        """Each request's headers (an email.message.Message), in order."""
        return self._server.headers

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# ---- a test CA, made with the openssl command ------------------------------------------------


def make_test_ca(directory: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA and a server certificate for 127.0.0.2; returns the CA file and a server context."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = functools.partial(subprocess.run, check=True, capture_output=True, cwd=directory)
    run(["openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
         "-subj", "/CN=lis-tui test CA"])
    run(["openssl", "req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={HOST}"])
    (directory / "ext.cnf").write_text(f"subjectAltName=IP:{HOST},DNS:localhost\nbasicConstraints=CA:FALSE\n"
                                       "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "server.pem", directory / "server.key")
    return directory / "ca.pem", context


# ---- what the servers serve ------------------------------------------------------------------


def make_wheel(directory: Path, name: str = "lisdemo", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b"VALUE = 42\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: lis-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    files[f"{dist}/RECORD"] = record.encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    path.write_bytes(buffer.getvalue())
    return path


def make_pip_index(root: Path, name: str = "lisdemo") -> None:
    """A PEP 503 simple index at /simple/ with one project and its wheel under /packages/."""
    (root / "packages").mkdir(parents=True, exist_ok=True)
    wheel = make_wheel(root / "packages", name)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    project = root / "simple" / name
    project.mkdir(parents=True)
    (root / "simple" / "index.html").write_text(f'<html><body><a href="{name}/">{name}</a></body></html>\n')
    (project / "index.html").write_text(
        f'<html><body><a href="../../packages/{wheel.name}#sha256={digest}">{wheel.name}</a></body></html>\n')


def make_git_repo(root: Path, name: str = "demo.git") -> str:
    """A bare repository with one commit, ready for dumb-HTTP clones; returns the commit's file text."""
    work = root.parent / f"{name}-work"
    git = ["git", "-c", "user.name=lis", "-c", "user.email=lis@example.invalid", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    (work / "README").write_text("hello from a loopback git server\n")
    subprocess.run([*git, "-C", str(work), "add", "README"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", "first"], check=True)
    subprocess.run([*git, "clone", "-q", "--bare", str(work), str(root / name)], check=True)
    subprocess.run(["git", "-C", str(root / name), "update-server-info"], check=True)
    shutil.rmtree(work)
    return "hello from a loopback git server\n"


def make_apt_repo(root: Path) -> None:
    """A flat apt repository (Packages and Release, no signature) with one made-up package."""
    root.mkdir(parents=True, exist_ok=True)
    packages = ("Package: lis-demo\nVersion: 1.0\nArchitecture: all\nMaintainer: lis <lis@example.invalid>\n"
                "Filename: ./lis-demo_1.0_all.deb\nSize: 1\nSHA256: " + "0" * 64 +
                "\nDescription: a package that only a loopback test mirror has\n\n").encode()
    (root / "Packages").write_bytes(packages)
    digest = hashlib.sha256(packages).hexdigest()
    (root / "Release").write_text(f"Origin: lis-test\nLabel: lis-test\nSuite: ./\nCodename: lis\n"
                                  f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S UTC', time.gmtime())}\n"
                                  f"SHA256:\n {digest} {len(packages)} Packages\n")
