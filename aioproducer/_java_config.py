"""The Java client's side of the configuration, apart from the options themselves.

What :mod:`aioproducer.config` needs to take a Java producer's configuration as it is: the Java
options with no counterpart here (dropped where their value changes nothing, refused with
advice otherwise), other clients' option names and what to use instead, the Java class names
of the builtin partitioners, the checks of the Java key and trust store options, and the
``sasl.jaas.config`` reading. Nothing here holds state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple, Protocol

from aioproducer.errors import ConfigurationError

__all__ = [
    "FOREIGN_NAMES",
    "JAVA_ONLY",
    "JAVA_PARTITIONERS",
    "JavaOnly",
    "SaslOptions",
    "TlsStores",
    "apply_java_sasl",
    "check_stores",
    "is_java_only",
    "without_java_only",
]

log = logging.getLogger("aioproducer.config")


class TlsStores(Protocol):
    """The TLS options :func:`check_stores` reads (a :class:`~aioproducer.ProducerConfig`)."""

    @property
    def ssl_cafile(self) -> str | None: ...
    @property
    def ssl_certfile(self) -> str | None: ...
    @property
    def ssl_keyfile(self) -> str | None: ...
    @property
    def ssl_truststore_location(self) -> str | None: ...
    @property
    def ssl_truststore_password(self) -> str | None: ...
    @property
    def ssl_truststore_type(self) -> str | None: ...
    @property
    def ssl_truststore_certificates(self) -> str | None: ...
    @property
    def ssl_keystore_location(self) -> str | None: ...
    @property
    def ssl_keystore_password(self) -> str | None: ...
    @property
    def ssl_keystore_type(self) -> str | None: ...
    @property
    def ssl_keystore_certificate_chain(self) -> str | None: ...
    @property
    def ssl_keystore_key(self) -> str | None: ...


class SaslOptions(Protocol):
    """The SASL options :func:`apply_java_sasl` reads (a :class:`~aioproducer.ProducerConfig`,
    whose derived ``sasl_*`` fields it sets)."""

    @property
    def security_protocol(self) -> str: ...
    @property
    def sasl_mechanism(self) -> str: ...
    @property
    def sasl_jaas_config(self) -> str | None: ...
    @property
    def sasl_kerberos_service_name(self) -> str | None: ...
    @property
    def sasl_oauthbearer_token_endpoint_url(self) -> str | None: ...
    @property
    def sasl_login_callback_handler_class(self) -> str | None: ...
    @property
    def sasl_login_connect_timeout_ms(self) -> int | None: ...
    @property
    def sasl_login_read_timeout_ms(self) -> int | None: ...
    @property
    def sasl_oauthbearer_sub_claim_name(self) -> str: ...
    @property
    def sasl_oauthbearer_scope_claim_name(self) -> str: ...
    @property
    def sasl_oauthbearer_header_urlencode(self) -> bool: ...
    @property
    def sasl_plain_username(self) -> str | None: ...
    @property
    def sasl_plain_password(self) -> str | None: ...
    @property
    def sasl_oauth_token_provider(self) -> Any: ...


# The Java client's class names for the builtin partitioners it still ships.
JAVA_PARTITIONERS: Final = {
    "org.apache.kafka.clients.producer.RoundRobinPartitioner": "round_robin",
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": "default",
    "org.apache.kafka.clients.producer.UniformStickyPartitioner": "uniform_sticky",
}


#: Other clients' option names whose nearest name here is not the nearest in spelling:
#: what to use instead (the migration page's table).
FOREIGN_NAMES: Final[Mapping[str, str]] = {
    "queue.buffering.max.ms": "linger_ms (linger.ms)",
    "queue.buffering.max.kbytes": "buffer_memory (buffer.memory, in bytes)",
    "queue.buffering.max.messages": (
        "nothing: buffer_memory (buffer.memory, in bytes) bounds the buffer"
    ),
    "batch.num.messages": "batch_size (batch.size, in bytes)",
    "message.timeout.ms": "delivery_timeout_ms (delivery.timeout.ms)",
    "message.max.bytes": "max_request_size (max.request.size)",
    "message.send.max.retries": "retries",
    "socket.timeout.ms": "request_timeout_ms (request.timeout.ms)",
    "compression.codec": "compression_type (compression.type)",
    "max_batch_size": "batch_size",
    "api_version": "nothing: the protocol versions are negotiated with each broker",
}


class JavaOnly(NamedTuple):
    """A Java client option with no counterpart here."""

    harmless: frozenset[str] | None
    """Values under which the Java client does what this producer does anyway, so that the
    option is dropped (comma lists compared item by item); None: every value is refused."""
    instead: str
    """What to do instead, for the error message."""


def _java_only(instead: str, *harmless: str) -> JavaOnly:
    return JavaOnly(frozenset(harmless) if harmless else None, instead)


_NO_JAVA_LOGIN = _java_only(
    "Java login and callback classes cannot run here; for OAUTHBEARER give "
    "sasl.oauthbearer.token.endpoint.url with clientId and clientSecret in sasl.jaas.config, "
    "or pass sasl_oauth_token_provider, a callable that fetches the token"
)
_NO_JAVA_SECURITY = _java_only(
    "Java security providers and engine factories cannot run here; pass an ssl.SSLContext "
    "as ssl_context to control TLS"
)
_TLS_BY_CONTEXT = "pass an ssl.SSLContext as ssl_context to choose TLS versions and ciphers"

#: The Java producer's options that this producer does not have (Kafka 4.x ProducerConfig
#: and CommonClientConfigs), and what to do instead. Every option not listed with harmless
#: values is refused: a security setting (a TLS version, a Kerberos principal) that is
#: silently dropped would leave a connection less protected than its configuration says.
JAVA_ONLY: Final[Mapping[str, JavaOnly]] = {
    **{
        name: _NO_JAVA_LOGIN
        for name in (
            "sasl.client.callback.handler.class",
            "sasl.login.callback.handler.class",
            "sasl.login.class",
            "sasl.login.connect.timeout.ms",
            "sasl.login.read.timeout.ms",
            "sasl.login.refresh.buffer.seconds",
            "sasl.login.refresh.min.period.seconds",
            "sasl.login.refresh.window.factor",
            "sasl.login.refresh.window.jitter",
            "sasl.login.retry.backoff.max.ms",
            "sasl.login.retry.backoff.ms",
            "sasl.oauthbearer.allow.unverified.audience",
            "sasl.oauthbearer.allow.unverified.issuer",
            "sasl.oauthbearer.assertion.algorithm",
            "sasl.oauthbearer.assertion.claim.aud",
            "sasl.oauthbearer.assertion.claim.exp.seconds",
            "sasl.oauthbearer.assertion.claim.iss",
            "sasl.oauthbearer.assertion.claim.jti.include",
            "sasl.oauthbearer.assertion.claim.nbf.seconds",
            "sasl.oauthbearer.assertion.claim.sub",
            "sasl.oauthbearer.assertion.file",
            "sasl.oauthbearer.assertion.private.key.file",
            "sasl.oauthbearer.assertion.private.key.passphrase",
            "sasl.oauthbearer.assertion.template.file",
            "sasl.oauthbearer.client.credentials.client.id",
            "sasl.oauthbearer.client.credentials.client.secret",
            "sasl.oauthbearer.clock.skew.seconds",
            "sasl.oauthbearer.expected.audience",
            "sasl.oauthbearer.expected.issuer",
            "sasl.oauthbearer.header.urlencode",
            "sasl.oauthbearer.jwks.endpoint.refresh.ms",
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
            "sasl.oauthbearer.jwks.endpoint.url",
            "sasl.oauthbearer.jwt.retriever.class",
            "sasl.oauthbearer.jwt.validator.class",
            "sasl.oauthbearer.scope",
            "sasl.oauthbearer.scope.claim.name",
            "sasl.oauthbearer.sub.claim.name",
            "sasl.oauthbearer.token.endpoint.url",
        )
    },
    **{
        name: _NO_JAVA_SECURITY
        for name in (
            "security.providers",
            "ssl.engine.factory.class",
            "ssl.provider",
            "ssl.secure.random.implementation",
        )
    },
    # Java's algorithm names for what OpenSSL does here: X.509 key selection, and PKIX
    # chain validation.
    "ssl.keymanager.algorithm": _java_only(
        "the client key is chosen by OpenSSL; pass an ssl_context for anything else",
        "SunX509",
        "PKIX",
    ),
    "ssl.trustmanager.algorithm": _java_only(
        "certificates are validated by OpenSSL (PKIX); pass an ssl_context for anything else",
        "PKIX",
    ),
    # The default context already refuses TLS below 1.2 and negotiates 1.3 where it can.
    "ssl.protocol": _java_only(_TLS_BY_CONTEXT, "TLSv1.3", "TLS"),
    "ssl.enabled.protocols": _java_only(_TLS_BY_CONTEXT, "TLSv1.2,TLSv1.3", "TLSv1.3,TLSv1.2"),
    "ssl.cipher.suites": _java_only(_TLS_BY_CONTEXT, ""),
    "config.providers": _java_only(
        "resolve ${provider:key} placeholders before passing the options", ""
    ),
    "metric.reporters": _java_only(
        "read Producer.metrics() and report from there",
        "",
        "org.apache.kafka.common.metrics.JmxReporter",
    ),
    "metrics.num.samples": _java_only("metrics_sample_window_ms sets the window", "2"),
    "metrics.recording.level": _java_only("every metric is recorded", "INFO", "DEBUG"),
    "enable.metrics.push": _java_only("no client telemetry is pushed to brokers", "false"),
    "client.rack": _java_only("there is no rack-aware behaviour", ""),
    "partitioner.rack.aware": _java_only("there is no rack-aware partitioning", "false"),
    "client.dns.lookup": _java_only(
        "every address a name resolves to is tried, in order", "use_all_dns_ips"
    ),
    "bootstrap.resolve.timeout.ms": _java_only(
        "start() waits for a bootstrap server up to max_block_ms"
    ),
    "metadata.cluster.check.enable": _java_only(
        "the client does not send the cluster and node it expects for brokers to check "
        "(KIP-1242); it refuses metadata from another cluster itself",
        "false",
    ),
    "buffer.memory.allocation.strategy": _java_only(
        "buffer_memory is one pool shared by every partition"
    ),
    "transaction.two.phase.commit.enable": _java_only(
        "two-phase commit (KIP-939) is not supported", "false"
    ),
    **{
        f"compression.{codec}.level": _java_only(
            f"set compression_level (compression.level) with compression_type {codec!r}"
        )
        for codec in ("gzip", "lz4", "zstd")
    },
}


def is_java_only(name: str) -> bool:
    """Whether ``name`` is a Java client option with no counterpart here: :meth:`ProducerConfig.
    from_options` drops it where its value changes nothing, and refuses it, saying what to do
    instead, where it would."""
    return name in JAVA_ONLY


def _java_only_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        items = [str(item).strip() for item in value]
    else:
        items = [item.strip() for item in str(value).split(",")]
    return ",".join(item for item in items if item)


def without_java_only(config: Mapping[str, Any], known: Callable[[str], bool]) -> Mapping[str, Any]:
    """``config`` without the Java-only options whose value changes nothing here (``known``
    says which names are this producer's own, never dropped).

    Raises:
        ConfigurationError: naming every other Java-only option given, with what to do
            instead. Values are not shown: some of these options hold secrets.
    """
    dropped: list[str] = []
    refused: list[str] = []
    for key, value in config.items():
        if not isinstance(key, str) or known(key):
            continue
        java_only = JAVA_ONLY.get(key)
        if java_only is None:
            continue
        if java_only.harmless is not None and _java_only_value(value) in java_only.harmless:
            dropped.append(key)
        else:
            refused.append(key)
    if refused:
        advice: dict[str, list[str]] = {}
        for key in refused:
            advice.setdefault(JAVA_ONLY[key].instead, []).append(key)
        parts = [f"{', '.join(keys)} ({instead})" for instead, keys in advice.items()]
        raise ConfigurationError(
            "Java client options not supported by aioproducer: " + "; ".join(parts)
        )
    if not dropped:
        return config
    log.debug("ignoring Java client options that change nothing here: %s", ", ".join(dropped))
    return {key: value for key, value in config.items() if key not in dropped}


def check_stores(config: TlsStores, label: Callable[[str], str]) -> None:
    """The Java client's key and trust store options: complete, and not contradicting
    the ssl_* files (naming the same file under both names is fine). ``label`` names an
    option in messages (its field name and its Java name).

    Raises:
        ConfigurationError: the first contradiction or missing option found.
    """

    trust_location = config.ssl_truststore_location
    trust_type = config.ssl_truststore_type
    if config.ssl_truststore_certificates is not None:
        if trust_location is not None:
            raise ConfigurationError(
                f"give either {label('ssl_truststore_location')} or "
                f"{label('ssl_truststore_certificates')}, not both"
            )
        if trust_type not in (None, "PEM"):
            raise ConfigurationError(
                f"{label('ssl_truststore_certificates')} holds PEM certificates, but "
                f"{label('ssl_truststore_type')} is {trust_type!r}; set it to 'PEM'"
            )
    if config.ssl_truststore_password is not None:
        if trust_location is None:
            raise ConfigurationError(
                f"{label('ssl_truststore_password')} is set but "
                f"{label('ssl_truststore_location')} is not"
            )
        if trust_type == "PEM":
            raise ConfigurationError(
                f"{label('ssl_truststore_password')} is set but a PEM trust store has no password"
            )
    if config.ssl_cafile is not None and (
        config.ssl_truststore_certificates is not None
        or (trust_location is not None and trust_location != config.ssl_cafile)
    ):
        store = (
            "ssl_truststore_location"
            if trust_location is not None
            else "ssl_truststore_certificates"
        )
        raise ConfigurationError(
            f"ssl_cafile and {label(store)} both name the CAs to trust, differently; "
            "give one of them"
        )
    key_location = config.ssl_keystore_location
    key_type = config.ssl_keystore_type
    chain, key = config.ssl_keystore_certificate_chain, config.ssl_keystore_key
    if (chain is None) != (key is None):
        raise ConfigurationError(
            f"{label('ssl_keystore_certificate_chain')} and {label('ssl_keystore_key')} "
            "go together: give both or neither"
        )
    if chain is not None:
        if key_location is not None:
            raise ConfigurationError(
                f"give either {label('ssl_keystore_location')} or "
                f"{label('ssl_keystore_certificate_chain')} and {label('ssl_keystore_key')}"
                ", not both"
            )
        if key_type not in (None, "PEM"):
            raise ConfigurationError(
                f"{label('ssl_keystore_key')} holds a PEM key, but "
                f"{label('ssl_keystore_type')} is {key_type!r}; set it to 'PEM'"
            )
    if config.ssl_keystore_password is not None:
        if key_location is None:
            raise ConfigurationError(
                f"{label('ssl_keystore_password')} is set but "
                f"{label('ssl_keystore_location')} is not"
            )
        if key_type == "PEM":
            raise ConfigurationError(
                f"{label('ssl_keystore_password')} is set but a PEM key store has no "
                f"password; the key's password is {label('ssl_password')}"
            )
    client_store = key_location is not None or chain is not None
    if client_store and (
        config.ssl_keyfile is not None
        or (config.ssl_certfile is not None and config.ssl_certfile != key_location)
    ):
        store = "ssl_keystore_location" if key_location is not None else "ssl_keystore_key"
        raise ConfigurationError(
            f"ssl_certfile/ssl_keyfile and {label(store)} both name the client "
            "certificate, differently; give one of them"
        )


def apply_java_sasl(config: SaslOptions, label: Callable[[str], str]) -> None:
    """Set the ``sasl_*`` options from ``sasl_jaas_config`` and the Java OAUTHBEARER options
    (:func:`aioproducer.jaas.resolve_jaas`), as the Java client reads them.

    An option given both ways must agree; a token provider this made earlier from the same
    settings (a copy of the configuration) agrees with itself.
    """
    from aioproducer.jaas import resolve_jaas

    given_java = [
        name
        for name in (
            "sasl_jaas_config",
            "sasl_oauthbearer_token_endpoint_url",
            "sasl_login_callback_handler_class",
        )
        if getattr(config, name) is not None
    ]
    if not given_java:
        return
    protocol = config.security_protocol
    if not protocol.startswith("SASL"):
        raise ConfigurationError(
            f"{label(given_java[0])} is set but security_protocol is {protocol!r}; use "
            "'SASL_PLAINTEXT' or 'SASL_SSL' to authenticate with SASL"
        )
    settings = resolve_jaas(
        config.sasl_jaas_config,
        mechanism=config.sasl_mechanism,
        token_endpoint_url=config.sasl_oauthbearer_token_endpoint_url,
        login_callback_handler=config.sasl_login_callback_handler_class,
        connect_timeout_ms=config.sasl_login_connect_timeout_ms,
        read_timeout_ms=config.sasl_login_read_timeout_ms,
        sub_claim_name=config.sasl_oauthbearer_sub_claim_name,
        scope_claim_name=config.sasl_oauthbearer_scope_claim_name,
        urlencode_header=config.sasl_oauthbearer_header_urlencode,
    )
    for name, derived in (
        ("sasl_kerberos_service_name", settings.kerberos_service_name),
        ("sasl_plain_username", settings.username),
        ("sasl_plain_password", settings.password),
        ("sasl_oauth_token_provider", settings.token_provider),
        ("sasl_kerberos_principal", settings.kerberos_principal),
        ("sasl_kerberos_keytab", settings.kerberos_keytab),
        ("sasl_kerberos_ccache", settings.kerberos_ccache),
    ):
        if derived is None:
            continue
        given = getattr(config, name)
        if given is None:
            object.__setattr__(config, name, derived)
        elif given != derived:
            raise ConfigurationError(
                f"{name} and sasl_jaas_config (sasl.jaas.config) disagree; give the setting "
                "one way only, or the same value both ways"
            )
