"""ProducerConfig: names, defaults, validation and the Java client's resolution rules."""

from __future__ import annotations

import dataclasses
import re
import ssl
from typing import Any

import pytest

from aioproducer._core.partitioner import DefaultPartitioner
from aioproducer.config import OptionInfo, ProducerConfig, options_table
from aioproducer.errors import ConfigurationError

# The Java producer's defaults in Kafka 4.x (ProducerConfig.java; linger.ms is 5 since KIP-1030).
JAVA_DEFAULTS = {
    "acks": -1,
    "linger_ms": 5,
    "batch_size": 16384,
    "buffer_memory": 33554432,
    "max_block_ms": 60000,
    "delivery_timeout_ms": 120000,
    "request_timeout_ms": 30000,
    "retries": 2147483647,
    "retry_backoff_ms": 100,
    "retry_backoff_max_ms": 1000,
    "reconnect_backoff_ms": 50,
    "reconnect_backoff_max_ms": 1000,
    "socket_connection_setup_timeout_ms": 10000,
    "socket_connection_setup_timeout_max_ms": 30000,
    "connections_max_idle_ms": 540000,
    "max_in_flight_requests_per_connection": 5,
    "enable_idempotence": True,
    "transactional_id": None,
    "transaction_timeout_ms": 60000,
    "compression_type": "none",
    "max_request_size": 1048576,
    "metadata_max_age_ms": 300000,
    "metadata_max_idle_ms": 300000,
    "partitioner_ignore_keys": False,
    "partitioner_adaptive_partitioning_enable": True,
    "partitioner_availability_timeout_ms": 0,
    "security_protocol": "PLAINTEXT",
    "metrics_sample_window_ms": 30000,
    "send_buffer_bytes": 131072,
    "receive_buffer_bytes": 32768,
}


def build(**options: Any) -> ProducerConfig:
    return ProducerConfig.from_options(**options)


def test_defaults_follow_the_java_client() -> None:
    config = build()
    for name, value in JAVA_DEFAULTS.items():
        assert getattr(config, name) == value, name
    assert config.bootstrap_servers == ("localhost:9092",)
    assert config.compression_level is None
    assert config.partitioner is None
    assert config.interceptors == ()
    assert config.client_software_name == "aioproducer"
    assert config.max_response_size == 32 * 1024 * 1024


def test_java_names_snake_names_and_keywords() -> None:
    config = ProducerConfig.from_options(
        {"bootstrap.servers": "k1:9092,k2:9093", "linger.ms": 50, "batch_size": 1000},
        linger_ms=7,
    )
    assert config.bootstrap_servers == ("k1:9092", "k2:9093")
    assert config.linger_ms == 7  # the keyword wins over the mapping
    assert config.batch_size == 1000


def test_values_from_property_files_arrive_as_strings() -> None:
    config = ProducerConfig.from_options(
        {"linger.ms": " 20 ", "enable.idempotence": "false", "acks": "1", "retries": "3"}
    )
    assert (config.linger_ms, config.enable_idempotence, config.acks, config.retries) == (
        20,
        False,
        1,
        3,
    )


def test_librdkafka_style_aliases_are_accepted() -> None:
    config = ProducerConfig.from_options(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "scram-sha-512",
            "sasl.username": "alice",
            "sasl.password": "pw",
            "ssl.ca.location": "/etc/ca.pem",
        }
    )
    assert config.security_protocol == "SASL_SSL"
    assert config.sasl_mechanism == "SCRAM-SHA-512"
    assert config.sasl_plain_username == "alice"
    assert config.ssl_cafile == "/etc/ca.pem"


def test_unknown_option_names_the_option_and_suggests_a_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"'lingerms'.*did you mean 'linger_ms'"):
        build(lingerms=5)
    with pytest.raises(ConfigurationError, match=r"'linger\.msec'"):
        ProducerConfig.from_options({"linger.msec": 5})
    with pytest.raises(ValueError):  # ConfigurationError is a ValueError
        build(no_such_thing=1)


def test_an_option_given_twice_in_the_mapping_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="twice"):
        ProducerConfig.from_options({"linger.ms": 1, "linger_ms": 2})


def test_config_must_be_a_mapping() -> None:
    with pytest.raises(ConfigurationError, match="mapping"):
        ProducerConfig.from_options([("linger_ms", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("linger_ms", -1),
        ("linger_ms", 1.5),
        ("linger_ms", True),
        ("linger_ms", "soon"),
        ("batch_size", -1),
        ("retries", -1),
        ("retries", 2**31),
        ("max_in_flight_requests_per_connection", 0),
        ("metadata_max_idle_ms", 4999),
        ("connections_max_idle_ms", -2),
        ("send_buffer_bytes", -2),
        ("acks", 2),
        ("acks", "none"),
        ("acks", True),
        ("enable_idempotence", "yes"),
        ("compression_type", "brotli"),
        ("security_protocol", "TLS"),
        ("sasl_mechanism", "KERBEROS"),
        ("transactional_id", ""),
        ("transactional_id", 5),
        ("client_id", None),
        ("key_serializer", "str"),
        ("interceptors", "not-a-list"),
        ("interceptors", [object()]),
        ("ssl_context", "ctx"),
        ("sasl_oauth_token_provider", object()),
        ("client_software_name", "my client"),
        ("client_software_version", "-1.0"),
        ("bootstrap_servers", ""),
        ("bootstrap_servers", "host:port"),
        ("bootstrap_servers", "host:70000"),
        ("bootstrap_servers", "[::1"),
        ("bootstrap_servers", 9092),
        ("partitioner", "random"),
        ("partitioner", 3),
        ("partitioner", DefaultPartitioner),
        ("max_response_size", 0),
    ],
)
def test_invalid_values_name_the_option(name: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=name):
        build(**{name: value})


def test_acks_forms() -> None:
    assert build(acks="all").acks == -1
    assert build(acks="ALL").acks == -1
    assert build(acks="-1").acks == -1
    assert build(acks=-1).acks == -1
    assert build(acks=1).acks == 1
    assert build(acks="0").acks == 0


class TestIdempotence:
    def test_defaulted_idempotence_is_turned_off_by_acks(self) -> None:
        assert build(acks=1).enable_idempotence is False
        assert build(acks=0).enable_idempotence is False

    def test_defaulted_idempotence_is_turned_off_by_retries_or_in_flight(self) -> None:
        assert build(retries=0).enable_idempotence is False
        assert build(max_in_flight_requests_per_connection=6).enable_idempotence is False
        assert build(max_in_flight_requests_per_connection=5).enable_idempotence is True

    @pytest.mark.parametrize(
        "conflict",
        [
            {"acks": 1},
            {"acks": 0},
            {"retries": 0},
            {"max_in_flight_requests_per_connection": 6},
        ],
    )
    def test_explicit_idempotence_with_a_conflict_is_an_error(
        self, conflict: dict[str, Any]
    ) -> None:
        with pytest.raises(ConfigurationError, match="enable_idempotence"):
            build(enable_idempotence=True, **conflict)

    def test_explicit_true_in_a_java_mapping_counts_as_explicit(self) -> None:
        with pytest.raises(ConfigurationError, match="acks"):
            ProducerConfig.from_options({"enable.idempotence": "true", "acks": "1"})

    def test_explicit_off_allows_anything(self) -> None:
        config = build(enable_idempotence=False, acks=1, max_in_flight_requests_per_connection=10)
        assert not config.enable_idempotence

    def test_transactional_id_needs_idempotence(self) -> None:
        assert build(transactional_id="tx").enable_idempotence
        with pytest.raises(ConfigurationError, match="transactional_id"):
            build(transactional_id="tx", enable_idempotence=False)
        # Java first turns defaulted idempotence off for acks=1, then rejects the id.
        with pytest.raises(ConfigurationError, match=r"transactional_id.*acks must be 'all'"):
            build(transactional_id="tx", acks=1)

    def test_direct_construction_treats_every_value_as_explicit(self) -> None:
        with pytest.raises(ConfigurationError, match="enable_idempotence"):
            ProducerConfig(acks=0)
        assert ProducerConfig(acks=0, enable_idempotence=False).acks == 0


class TestDeliveryTimeout:
    def test_a_default_too_small_is_raised_to_linger_plus_request_timeout(self) -> None:
        config = build(request_timeout_ms=200_000, linger_ms=100)
        assert config.delivery_timeout_ms == 200_100

    def test_an_explicit_value_too_small_is_an_error(self) -> None:
        with pytest.raises(ConfigurationError, match="delivery_timeout_ms"):
            build(delivery_timeout_ms=30_004)
        assert build(delivery_timeout_ms=30_005).delivery_timeout_ms == 30_005


class TestCompression:
    @pytest.mark.parametrize(
        ("codec", "good", "bad"),
        [
            ("gzip", [1, 9, -1], [0, 10, -2]),
            ("lz4", [1, 17], [0, 18]),
            ("zstd", [-131072, 0, 22], [-131073, 23]),
        ],
    )
    def test_levels_are_checked_per_codec(
        self, codec: str, good: list[int], bad: list[int]
    ) -> None:
        for level in good:
            assert build(compression_type=codec, compression_level=level).compression_level == level
        for level in bad:
            with pytest.raises(ConfigurationError, match="compression_level"):
                build(compression_type=codec, compression_level=level)

    @pytest.mark.parametrize("codec", ["none", "snappy"])
    def test_codecs_without_levels_reject_a_level(self, codec: str) -> None:
        with pytest.raises(ConfigurationError, match="compression_level"):
            build(compression_type=codec, compression_level=1)

    def test_codec_names_are_case_insensitive(self) -> None:
        assert build(compression_type="ZSTD").compression_type == "zstd"
        assert ProducerConfig.from_options({"compression.level": 5, "compression.type": "lz4"})


class TestBootstrap:
    def test_addresses(self) -> None:
        config = build(bootstrap_servers="a:1, [::1]:9093,b ,PLAINTEXT://c:9000,fe80::1")
        assert config.bootstrap_addresses() == [
            ("a", 1),
            ("::1", 9093),
            ("b", 9092),
            ("c", 9000),
            ("fe80::1", 9092),
        ]

    def test_a_list_is_accepted(self) -> None:
        config = build(bootstrap_servers=["a:1", "b:2,c:3"])
        assert config.bootstrap_addresses() == [("a", 1), ("b", 2), ("c", 3)]

    def test_bracketed_ipv6_without_port(self) -> None:
        assert build(bootstrap_servers="[::1]").bootstrap_addresses() == [("::1", 9092)]


def test_client_ids_are_unique_unless_given() -> None:
    first, second = build(), build()
    assert first.client_id != second.client_id
    assert first.client_id.startswith("aioproducer-")
    assert build(client_id="billing").client_id == "billing"


def test_secrets_never_show() -> None:
    config = build(
        security_protocol="SASL_SSL",
        sasl_plain_username="alice",
        sasl_plain_password="hunter2",
        ssl_certfile="/c.pem",
        ssl_password="keypass",
    )
    text = repr(config) + str(config)
    assert "hunter2" not in text and "keypass" not in text
    assert "alice" in text and "***" in text
    with pytest.raises(ConfigurationError) as info:
        build(security_protocol="SASL_SSL", sasl_plain_username="u", sasl_plain_password=123456)
    assert "123456" not in str(info.value)
    assert "sasl_plain_password" in str(info.value)


def test_a_token_given_as_the_token_provider_never_shows() -> None:
    token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJib2IifQ.c2VjcmV0LXNpZ25hdHVyZQ"
    with pytest.raises(ConfigurationError) as info:
        build(
            security_protocol="SASL_SSL",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=token,
        )
    assert token not in str(info.value) and "a value of type str" in str(info.value)

    async def provider() -> str:
        return token

    config = build(
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=provider,
    )
    assert "sasl_oauth_token_provider='***'" in repr(config)


def test_config_is_frozen_and_slotted() -> None:
    config = build()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.linger_ms = 10  # type: ignore[misc]
    assert not hasattr(config, "__dict__")


def test_replace_validates_again() -> None:
    config = build(linger_ms=10)
    assert dataclasses.replace(config, batch_size=1).batch_size == 1
    with pytest.raises(ConfigurationError):
        dataclasses.replace(config, linger_ms=-5)


class TestSecurityCombinations:
    def test_ssl_options_need_an_ssl_protocol(self) -> None:
        with pytest.raises(ConfigurationError, match=r"ssl_cafile.*security_protocol"):
            build(ssl_cafile="/ca.pem")
        with pytest.raises(ConfigurationError, match="ssl_context"):
            build(ssl_context=ssl.create_default_context())
        assert build(security_protocol="SSL", ssl_context=ssl.create_default_context())

    def test_context_and_files_are_exclusive(self) -> None:
        with pytest.raises(ConfigurationError, match="either ssl_context"):
            build(
                security_protocol="SSL",
                ssl_context=ssl.create_default_context(),
                ssl_cafile="/ca.pem",
            )

    def test_keyfile_needs_certfile(self) -> None:
        with pytest.raises(ConfigurationError, match="ssl_keyfile"):
            build(security_protocol="SSL", ssl_keyfile="/k.pem")

    def test_sasl_credentials(self) -> None:
        with pytest.raises(ConfigurationError, match="sasl_plain_username"):
            build(security_protocol="SASL_PLAINTEXT")
        with pytest.raises(ConfigurationError, match="sasl_oauth_token_provider"):
            build(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER")
        with pytest.raises(ConfigurationError, match="security_protocol"):
            build(sasl_plain_username="u", sasl_plain_password="p")

        class Tokens:
            def token(self) -> str:
                return "t"

        config = build(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Tokens(),
        )
        assert config.sasl_mechanism == "OAUTHBEARER"


class TestPartitionerOption:
    def test_names(self) -> None:
        for name in ("default", "uniform_sticky", "round_robin", "murmur3", "consistent"):
            assert build(partitioner=name.upper()).partitioner == name

    def test_java_class_name(self) -> None:
        config = ProducerConfig.from_options(
            {"partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"}
        )
        assert config.partitioner == "round_robin"

    def test_callables_and_instances_are_kept(self) -> None:
        def pick(topic: str, key: bytes | None, count: int) -> int:
            return 0

        instance = DefaultPartitioner()
        assert build(partitioner=pick).partitioner is pick
        assert build(partitioner=instance).partitioner is instance


def test_interceptors_become_a_tuple() -> None:
    class Interceptor:
        def on_send(self, record: Any) -> Any:
            return record

        def on_acknowledgement(self, metadata: Any, exc: BaseException | None) -> None:
            pass

    one = Interceptor()
    assert build(interceptors=[one]).interceptors == (one,)


def test_options_table_covers_every_field() -> None:
    table = options_table()
    names = [row.name for row in table]
    assert names == [spec.name for spec in dataclasses.fields(ProducerConfig)]
    assert all(isinstance(row, OptionInfo) and len(row) == 4 for row in table)
    for row in table:
        assert row.doc and "\n" not in row.doc, row.name
    by_name = {row.name: row for row in table}
    assert by_name["linger_ms"] == ("linger_ms", "linger.ms", 5, by_name["linger_ms"].doc)
    assert by_name["max_in_flight_requests_per_connection"].java_name == (
        "max.in.flight.requests.per.connection"
    )
    assert by_name["acks"].default == "all"
    assert by_name["ssl_context"].java_name is None
    java_names = [row.java_name for row in table if row.java_name]
    assert len(set(java_names)) == len(java_names)


def test_every_java_name_is_accepted_with_its_default() -> None:
    defaults = build()
    for row in options_table():
        if row.java_name is None or row.name == "client_id":
            continue
        value = getattr(defaults, row.name)
        config = ProducerConfig.from_options({row.java_name: value})
        assert getattr(config, row.name) == value, row.name


@pytest.mark.parametrize(
    ("name", "instead"),
    [
        ("message.timeout.ms", "delivery_timeout_ms"),
        ("queue.buffering.max.ms", "linger_ms"),
        ("queue.buffering.max.kbytes", "buffer_memory"),
        ("queue.buffering.max.messages", "nothing: buffer_memory"),
        ("batch.num.messages", "batch_size"),
        ("max_batch_size", "batch_size"),
    ],
)
def test_another_clients_option_name_says_what_to_use_instead(name: str, instead: str) -> None:
    """Spelling alone would point elsewhere (message.timeout.ms is nearest to
    request.timeout.ms): the hint names the option that does that job here."""
    with pytest.raises(ConfigurationError, match=rf"'{re.escape(name)}'.*use {instead}"):
        ProducerConfig.from_options({name: 1})


def test_a_sasl_mechanism_without_a_sasl_protocol_is_refused() -> None:
    # Authentication asked for but never done would be silently skipped otherwise.
    for mechanism in ("SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"):
        with pytest.raises(ConfigurationError, match="use 'SASL_PLAINTEXT' or 'SASL_SSL'"):
            ProducerConfig.from_options(sasl_mechanism=mechanism)
    with pytest.raises(ConfigurationError, match="security_protocol is 'SSL'"):
        ProducerConfig.from_options(sasl_mechanism="SCRAM-SHA-256", security_protocol="SSL")
