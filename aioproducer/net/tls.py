"""TLS contexts for broker connections, built from the ``ssl_*`` options or given ready.

A context built from files is shared by the producers of a process until one of its files
changes; a given context is used as it is, with a warning (once) if it verifies less than
the default.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import weakref
from typing import TYPE_CHECKING, Final

from aioproducer.errors import ConfigurationError

if TYPE_CHECKING:
    from aioproducer.config import ProducerConfig

__all__ = ["ssl_context_for"]

log = logging.getLogger("aioproducer.net")

_SSL_PROTOCOLS: Final = frozenset({"SSL", "SASL_SSL"})


def _protocol_name(value: object) -> str:
    # security_protocol may be a str or a str-valued enum.
    return str(getattr(value, "value", value)).upper()


def ssl_context_for(config: ProducerConfig) -> ssl.SSLContext | None:
    """The TLS context for ``config``: None without TLS, else the given or a built one.

    A given ``ssl_context`` is used as it is (its own ``check_hostname`` and ``verify_mode``
    decide; one that verifies less is warned about once); ``ssl_check_hostname`` applies to
    the context built from the ``ssl_*`` files.
    """
    if _protocol_name(config.security_protocol) not in _SSL_PROTOCOLS:
        return None
    if config.ssl_context is not None:
        _warn_if_unverified(config.ssl_context)
        return config.ssl_context
    return _build_ssl_context(
        config.ssl_cafile,
        config.ssl_certfile,
        config.ssl_keyfile,
        config.ssl_password,
        bool(config.ssl_check_hostname),
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


# Building a context reads files and costs milliseconds: the producers of a process share one
# per set of files, until a file changes (a renewed certificate, a CA removed). The key holds
# a digest of the key password, never the password.
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


def _build_ssl_context(
    cafile: str | None,
    certfile: str | None,
    keyfile: str | None,
    password: str | None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    key = (
        _file_stamp(cafile),
        _file_stamp(certfile),
        _file_stamp(keyfile),
        # A digest, so that a wrong password misses the cache and fails as it should.
        hashlib.sha256(password.encode()).digest() if password is not None else None,
        check_hostname,
    )
    context = _SSL_CONTEXTS.get(key)
    if context is not None:
        return context
    # The default context verifies the chain against cafile (or the system's CAs), checks the
    # host name and refuses TLS below 1.2. Turning the host name check off keeps the chain
    # verification: the certificate must still come from a trusted CA.
    try:
        context = ssl.create_default_context(cafile=cafile)
        context.check_hostname = check_hostname
        if certfile is not None:
            context.load_cert_chain(certfile, keyfile, password)
    except (OSError, ssl.SSLError, ValueError) as exc:
        # The message names the file problem; the password never appears in it.
        raise ConfigurationError(
            f"cannot build the TLS context from the ssl_* files: {exc}"
        ) from exc
    if len(_SSL_CONTEXTS) >= _SSL_CONTEXTS_MAX:
        _SSL_CONTEXTS.pop(next(iter(_SSL_CONTEXTS)))
    _SSL_CONTEXTS[key] = context
    return context
