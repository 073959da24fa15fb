"""TLS contexts for broker connections, built from the ``ssl_*`` options or given ready.

The trusted CAs come from ``ssl_cafile``, or from the Java client's trust store options
(``ssl.truststore.location`` as a PKCS12 or PEM file, or ``ssl.truststore.certificates`` as
PEM text); the client certificate for mutual TLS from ``ssl_certfile``/``ssl_keyfile``, or from
the Java client's key store options (``ssl.keystore.location``, or
``ssl.keystore.certificate.chain`` with ``ssl.keystore.key``). PKCS12 files are read with the
``cryptography`` package; JKS files are refused with the ``keytool`` command that converts them.

A context built from files is shared by the producers of a process until one of its files
changes; a given context is used as it is, with a warning (once) if it verifies less than
the default. A context that does not check host names is warned about once too.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import ssl
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from aioproducer.errors import ConfigurationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
    from cryptography.x509 import Certificate

    from aioproducer.config import ProducerConfig

__all__ = ["ssl_context_for"]

log = logging.getLogger("aioproducer.net")

_SSL_PROTOCOLS: Final = frozenset({"SSL", "SASL_SSL"})

# The first bytes of Java's own key store formats (JKS and JCEKS), which nothing in Python
# reads with a maintained library.
_JAVA_STORE_MAGIC: Final = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")
_PEM_MARK: Final = b"-----BEGIN "


def _protocol_name(value: object) -> str:
    # security_protocol may be a str or a str-valued enum.
    return str(getattr(value, "value", value)).upper()


@dataclass(frozen=True)
class _Sources:
    """Where the TLS material comes from: the ssl_* options that matter for a built context."""

    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    key_password: str | None = None
    truststore_location: str | None = None
    truststore_password: str | None = None
    truststore_type: str | None = None
    truststore_certificates: str | None = None
    keystore_location: str | None = None
    keystore_password: str | None = None
    keystore_type: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    check_hostname: bool = True

    def cache_key(self) -> tuple[object, ...]:
        """Stamps of the files and digests of the rest: a changed file or a wrong password
        misses the cache; the key holds no password, key or certificate text."""
        return (
            _file_stamp(self.cafile),
            _file_stamp(self.certfile),
            _file_stamp(self.keyfile),
            _digest(self.key_password),
            _file_stamp(self.truststore_location),
            _digest(self.truststore_password),
            self.truststore_type,
            _digest(self.truststore_certificates),
            _file_stamp(self.keystore_location),
            _digest(self.keystore_password),
            self.keystore_type,
            _digest(self.keystore_certificate_chain),
            _digest(self.keystore_key),
            self.check_hostname,
        )


def ssl_context_for(config: ProducerConfig) -> ssl.SSLContext | None:
    """The TLS context for ``config``: None without TLS, else the given or a built one.

    A given ``ssl_context`` is used as it is (its own ``check_hostname`` and ``verify_mode``
    decide; one that verifies less is warned about once); ``ssl_check_hostname`` applies to
    the context built from the ``ssl_*`` files and stores.
    """
    if _protocol_name(config.security_protocol) not in _SSL_PROTOCOLS:
        return None
    if config.ssl_context is not None:
        _warn_if_unverified(config.ssl_context)
        return config.ssl_context
    truststore = config.ssl_truststore_location
    keystore = config.ssl_keystore_location
    return _build_ssl_context(
        _Sources(
            # The same file under both names (the configuration checks they agree) is read
            # once, as the store, whose type may be PKCS12.
            cafile=None if truststore is not None else config.ssl_cafile,
            certfile=None if keystore is not None else config.ssl_certfile,
            keyfile=config.ssl_keyfile,
            key_password=config.ssl_password,
            truststore_location=truststore,
            truststore_password=config.ssl_truststore_password,
            truststore_type=config.ssl_truststore_type,
            truststore_certificates=config.ssl_truststore_certificates,
            keystore_location=keystore,
            keystore_password=config.ssl_keystore_password,
            keystore_type=config.ssl_keystore_type,
            keystore_certificate_chain=config.ssl_keystore_certificate_chain,
            keystore_key=config.ssl_keystore_key,
            check_hostname=bool(config.ssl_check_hostname),
        )
    )


def trusted_pem(config: ProducerConfig) -> str | None:
    """The CAs ``config`` trusts as PEM text, from ``ssl_cafile`` or the trust store options;
    None when it trusts the system's CAs. For handing the same trust to another client
    (the command line's read-back check)."""
    if config.ssl_truststore_location is None and config.ssl_truststore_certificates is None:
        if config.ssl_cafile is None:
            return None
        with open(config.ssl_cafile, encoding="ascii", errors="replace") as file:
            return file.read()
    return _trusted_pem(
        _Sources(
            truststore_location=config.ssl_truststore_location,
            truststore_password=config.ssl_truststore_password,
            truststore_type=config.ssl_truststore_type,
            truststore_certificates=config.ssl_truststore_certificates,
        )
    )


# The given contexts already warned about (weakly held: a context may go away).
_UNVERIFIED_WARNED: weakref.WeakSet[ssl.SSLContext] = weakref.WeakSet()


def _warn_if_unverified(context: ssl.SSLContext) -> None:
    if context in _UNVERIFIED_WARNED:
        return
    if context.verify_mode == ssl.CERT_NONE:
        risk = "does not verify the broker's certificate (verify_mode is CERT_NONE)"
    elif not context.check_hostname:
        risk = "does not check that the broker's certificate names the host (check_hostname)"
    else:
        return
    _UNVERIFIED_WARNED.add(context)
    log.warning(
        "the ssl_context given %s: anyone on the network path can pose as the broker and read "
        "what the producer sends",
        risk,
    )


def _warn_hostname_unchecked() -> None:
    log.warning(
        "ssl_check_hostname is False (ssl.endpoint.identification.algorithm=''): the broker's "
        "certificate is not checked to name the host connected to, so any certificate the "
        "trusted CAs signed, for any host, is accepted as the broker's"
    )


# Building a context reads files and costs milliseconds: the producers of a process share one
# per set of files, until a file changes (a renewed certificate, a CA removed). The key holds
# digests of the passwords and PEM texts, never the secrets themselves.
_SSL_CONTEXTS: dict[tuple[object, ...], ssl.SSLContext] = {}
_SSL_CONTEXTS_MAX: Final = 8


def _file_stamp(path: str | None) -> tuple[object, ...] | None:
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return (path,)  # building fails and says why
    return (path, stat.st_mtime_ns, stat.st_size, stat.st_ino)


def _digest(text: str | None) -> bytes | None:
    # A digest, so that a wrong password misses the cache and fails as it should.
    return hashlib.sha256(text.encode()).digest() if text is not None else None


def _build_ssl_context(sources: _Sources) -> ssl.SSLContext:
    key = sources.cache_key()
    context = _SSL_CONTEXTS.get(key)
    if context is not None:
        return context
    # The default context verifies the chain against the CAs given (or the system's), checks
    # the host name and refuses TLS below 1.2. Turning the host name check off keeps the chain
    # verification: the certificate must still come from a trusted CA.
    try:
        cadata = _trusted_pem(sources)
        if cadata is not None:
            context = ssl.create_default_context(cadata=cadata)
        else:
            context = ssl.create_default_context(cafile=sources.cafile)
        context.check_hostname = sources.check_hostname
        _load_client_certificate(context, sources)
    except ConfigurationError:
        raise
    except (OSError, ssl.SSLError, ValueError) as exc:
        # The message names the file problem; a password never appears in it.
        raise ConfigurationError(
            f"cannot build the TLS context from the ssl_* options: {exc}"
        ) from exc
    if not sources.check_hostname:
        _warn_hostname_unchecked()
    if len(_SSL_CONTEXTS) >= _SSL_CONTEXTS_MAX:
        _SSL_CONTEXTS.pop(next(iter(_SSL_CONTEXTS)))
    _SSL_CONTEXTS[key] = context
    return context


# ---- Java key and trust stores -------------------------------------------------------------


def _read_store(path: str, option: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {option} {path!r}: {exc.strerror or exc}") from exc


def _store_format(data: bytes, path: str, option: str, declared: str | None) -> str:
    """``"PEM"`` or ``"PKCS12"``, from the file's content and the type the user declared.

    Java's JKS and PKCS12 key store types each read the other's files, so a declared JKS or
    PKCS12 type accepts either; a JKS file is refused with the command that converts it.
    """
    type_option = option.replace("location", "type")
    if data[:4] in _JAVA_STORE_MAGIC:
        raise ConfigurationError(
            f"{option} {path!r} is a Java key store (JKS), which aioproducer cannot read; "
            f"convert it to PKCS12 with: keytool -importkeystore -srckeystore {path} "
            f"-destkeystore {_p12_name(path)} -deststoretype PKCS12, then set {option} to the "
            f"new file ({type_option}=PKCS12)"
        )
    # openssl writes "Bag Attributes" lines before the PEM blocks it exports.
    is_pem = _PEM_MARK in data[:4096]
    if declared == "PEM" and not is_pem:
        raise ConfigurationError(
            f"{option} {path!r} is not a PEM file, but {type_option} is 'PEM'"
        )
    if declared in ("PKCS12", "JKS") and is_pem:
        raise ConfigurationError(
            f"{option} {path!r} is a PEM file, but {type_option} is {declared!r}; set it to "
            "'PEM'"
        )
    return "PEM" if is_pem else "PKCS12"


def _p12_name(path: str) -> str:
    stem, extension = os.path.splitext(path)
    return (stem if extension.lower() in (".jks", ".keystore", ".truststore") else path) + ".p12"


def _load_pkcs12(
    data: bytes, path: str, option: str, passwords: tuple[str | None, ...]
) -> tuple[PrivateKeyTypes | None, Certificate | None, list[Certificate]]:
    """The key, certificate and other certificates of a PKCS12 file, trying each password."""
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigurationError(
            f"reading the PKCS12 file {option} needs the cryptography package: "
            "pip install 'aioproducer[pkcs12]'"
        ) from None
    password_option = option.replace("location", "password")
    tried: set[str | None] = set()
    for password in passwords:
        if password in tried:
            continue
        tried.add(password)
        try:
            store = pkcs12.load_pkcs12(data, password.encode() if password is not None else None)
        except ValueError:
            continue
        others = [extra.certificate for extra in store.additional_certs]
        certificate = store.cert.certificate if store.cert is not None else None
        return store.key, certificate, others
    given = "is wrong" if any(p is not None for p in passwords) else "is not set"
    raise ConfigurationError(
        f"cannot read {option} {path!r} as PKCS12: {password_option} {given}, or the file is "
        "damaged"
    )


def _pem_certificates(certificates: list[Certificate]) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding

    return "".join(cert.public_bytes(Encoding.PEM).decode("ascii") for cert in certificates)


def _trusted_pem(sources: _Sources) -> str | None:
    """The trusted CAs as PEM text from the trust store options, or None to use ssl_cafile
    (or the system's CAs)."""
    if sources.truststore_certificates is not None:
        return sources.truststore_certificates
    path = sources.truststore_location
    if path is None:
        return None
    option = "ssl.truststore.location"
    data = _read_store(path, option)
    if _store_format(data, path, option, sources.truststore_type) == "PEM":
        return data.decode("ascii", errors="replace")
    key, certificate, others = _load_pkcs12(data, path, option, (sources.truststore_password,))
    # Trusted-certificate entries (what keytool -importcert writes) come without a key; a
    # key entry's own certificate is a client identity, not a CA to trust.
    trusted = [*others, *([certificate] if key is None and certificate is not None else [])]
    if not trusted:
        raise ConfigurationError(f"{option} {path!r} holds no certificates to trust")
    return _pem_certificates(trusted)


def _load_client_certificate(context: ssl.SSLContext, sources: _Sources) -> None:
    if sources.keystore_key is not None and sources.keystore_certificate_chain is not None:
        # ssl reads a key from a file only: a private one, removed at once.
        pem = sources.keystore_key + "\n" + sources.keystore_certificate_chain
        with _private_file(pem) as path:
            _load_chain(context, path, None, sources.key_password, "ssl.keystore.key")
        return
    if sources.keystore_location is None:
        if sources.certfile is not None:
            context.load_cert_chain(sources.certfile, sources.keyfile, sources.key_password)
        return
    path = sources.keystore_location
    option = "ssl.keystore.location"
    data = _read_store(path, option)
    if _store_format(data, path, option, sources.keystore_type) == "PEM":
        _load_chain(context, path, None, sources.key_password, f"{option} {path!r}")
        return
    # A PKCS12 store's key is protected by the store's password; keytool does not let the two
    # differ, but other tools do: the key password is tried second.
    key, certificate, others = _load_pkcs12(
        data, path, option, (sources.keystore_password, sources.key_password)
    )
    if key is None or certificate is None:
        raise ConfigurationError(
            f"{option} {path!r} holds no private key with its certificate; a trust store "
            "goes in ssl.truststore.location"
        )
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        Encoding,
        PrivateFormat,
    )

    # Written encrypted with a one-time password that never leaves this process, so that the
    # file, if it ever outlived this call, would not give the key away.
    one_time = secrets.token_urlsafe(32)
    key_pem = key.private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(one_time.encode())
    ).decode("ascii")
    with _private_file(key_pem + _pem_certificates([certificate, *others])) as pem_path:
        context.load_cert_chain(pem_path, password=one_time)


def _load_chain(
    context: ssl.SSLContext,
    certfile: str,
    keyfile: str | None,
    password: str | None,
    what: str,
) -> None:
    try:
        context.load_cert_chain(certfile, keyfile, password)
    except ssl.SSLError as exc:
        given = "is wrong" if password is not None else "is not set"
        raise ConfigurationError(
            f"cannot load the client key and certificate from {what}: the key's password "
            f"(ssl_password, ssl.key.password) {given}, the key does not match the "
            f"certificate, or they are not PEM ({exc.reason or exc})"
        ) from exc


@contextlib.contextmanager
def _private_file(text: str) -> Iterator[str]:
    """A file only this user can read, holding ``text``, in a folder only this user can
    enter; both are removed when the block ends."""
    folder = tempfile.mkdtemp(prefix="aioproducer-tls-")  # mode 0700
    path = os.path.join(folder, "client.pem")
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(text)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        os.rmdir(folder)
