"""TLS for tests: a throwaway CA with server and client certificates made by the ``openssl`` CLI, and a
TLS-terminating proxy (its own thread and event loop) to put in front of a plain-TCP server."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from cli.process import LOOPBACK

_NEW_KEY = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
_CA_EXTENSIONS = ("basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign,cRLSign")
_LEAF_EXTENSIONS = """basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
subjectAltName=IP:127.0.0.1
"""


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def server_context(self, *, require_client_cert: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.ca))
        context.load_cert_chain(self.server_cert, self.server_key)
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
        return context


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=30)


def make_ca(directory: Path, name: str = "ca") -> tuple[Path, Path]:
    """A self-signed CA (P-256, valid one day): its certificate and key."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    extensions = [arg for ext in _CA_EXTENSIONS for arg in ("-addext", ext)]
    _openssl(
        *f"req -x509 {_NEW_KEY} -days 1".split(), "-keyout", key, "-out", cert, "-subj", f"/CN={name}", *extensions
    )
    return cert, key


def _leaf(directory: Path, name: str, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    cert, key, csr, ext = (directory / f"{name}.{suffix}" for suffix in ("crt", "key", "csr", "ext"))
    ext.write_text(_LEAF_EXTENSIONS)
    _openssl(*f"req {_NEW_KEY}".split(), "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    _openssl(
        "x509",
        "-req",
        "-in",
        csr,
        "-CA",
        ca[0],
        "-CAkey",
        ca[1],
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        cert,
        "-extfile",
        ext,
    )
    return cert, key


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for IP 127.0.0.1 and a client certificate, all signed by that CA."""
    ca = make_ca(directory)
    server = _leaf(directory, "server", ca)
    client = _leaf(directory, "client", ca)
    return Certs(ca[0], server[0], server[1], client[0], client[1])


class TlsProxy:
    """``with TlsProxy(port, target_port, context)``: TLS on ``port``, plain TCP to ``target_port``."""

    def __init__(self, port: int, target_port: int, context: ssl.SSLContext) -> None:
        self.port, self.target_port, self.context = port, target_port, context
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-proxy", daemon=True)
        self._server: asyncio.Server | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        start = asyncio.start_server(self._handle, LOOPBACK, self.port, ssl=self.context)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(timeout=10)
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(LOOPBACK, self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(OSError, ssl.SSLError):
            writer.close()
