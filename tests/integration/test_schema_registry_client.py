"""The Schema Registry client against a real registry (Apicurio, Confluent-compatible API):
registering, looking up, caching, compatibility and the errors a user sees."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from aioproducer.errors import ConfigurationError, SchemaRegistryError
from aioproducer.schema_registry import Schema, SchemaRegistryClient


def _order(id_type: str = "long", extra: list[dict[str, Any]] | None = None) -> Schema:
    fields: list[dict[str, Any]] = [{"name": "id", "type": id_type}, *(extra or [])]
    return Schema(
        json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": fields})
    )


def _subject() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}-value"


async def test_a_schema_is_registered_once_and_then_served_from_the_cache(
    schema_registry: Any,
) -> None:
    client = SchemaRegistryClient(schema_registry.url)
    subject = _subject()
    try:
        schema_id = await client.register(subject, _order())
        assert client.requests == 1
        assert await client.register(subject, _order()) == schema_id
        assert client.cached_id(subject, _order()) == schema_id
        assert client.requests == 1  # the second registration cost no request
        found = await client.lookup(subject, _order())
        assert found is not None and (found.schema_id, found.version) == (schema_id, 1)
        latest = await client.latest_version(subject)
        assert (latest.schema_id, latest.subject, latest.version) == (schema_id, subject, 1)
        fetched = await SchemaRegistryClient(schema_registry.url).schema_by_id(schema_id)
        assert json.loads(fetched.schema_str) == json.loads(_order().schema_str)
        assert await client.lookup(_subject(), _order()) is None
    finally:
        await client.close()


async def test_compatibility_is_checked_and_an_incompatible_schema_is_refused(
    schema_registry: Any,
) -> None:
    client = SchemaRegistryClient(schema_registry.url)
    subject = _subject()
    try:
        await client.register(subject, _order())
        await client.set_compatibility(subject, "BACKWARD")
        widened = _order(extra=[{"name": "note", "type": ["null", "string"], "default": None}])
        assert await client.is_compatible(subject, widened)
        assert await client.register(subject, widened) != await client.register(subject, _order())
        assert not await client.is_compatible(subject, _order(id_type="string"))
        with pytest.raises(SchemaRegistryError) as refused:
            await client.register(subject, _order(id_type="string"))
        assert refused.value.http_status == 409
        assert not refused.value.retriable
        assert subject in str(refused.value)
    finally:
        await client.close()


async def test_an_invalid_schema_is_refused_with_the_registry_message(schema_registry: Any) -> None:
    client = SchemaRegistryClient(schema_registry.url)
    try:
        with pytest.raises(SchemaRegistryError) as refused:
            await client.register(_subject(), Schema("{not json"))
        assert refused.value.http_status == 422
        assert refused.value.registry_error_code == 42201
    finally:
        await client.close()


async def test_credentials_never_appear_in_errors(schema_registry: Any) -> None:
    # An unreachable second URL after a working one; a password in the URL.
    client = SchemaRegistryClient(
        f"http://user:s3cret@127.0.0.1:1/apis/ccompat/v7,{schema_registry.url}"
    )
    try:
        assert await client.register(_subject(), _order()) > 0  # the second URL answered
        unreachable = SchemaRegistryClient("http://user:s3cret@127.0.0.1:1", timeout=2)
        with pytest.raises(SchemaRegistryError) as failed:
            await unreachable.register(_subject(), _order())
        assert failed.value.retriable
        assert "s3cret" not in str(failed.value) and "user" not in str(failed.value)
        await unreachable.close()
    finally:
        await client.close()
    with pytest.raises(ConfigurationError) as bad:
        SchemaRegistryClient("ftp://user:s3cret@host")
    assert "s3cret" not in str(bad.value)


def test_the_option_names_of_confluent_kafka_and_the_java_serializers() -> None:
    client = SchemaRegistryClient.from_config(
        {
            "schema.registry.url": "https://registry.example:8081",
            "basic.auth.credentials.source": "USER_INFO",
            "basic.auth.user.info": "me:pw",
        }
    )
    assert client._settings.auth == ("me", "pw")
    assert client._settings.urls == ("https://registry.example:8081",)
    with pytest.raises(ConfigurationError, match="unknown Schema Registry options: colour"):
        SchemaRegistryClient.from_config({"url": "http://x", "colour": "blue"})
    with pytest.raises(ConfigurationError, match="user:password"):
        SchemaRegistryClient.from_config({"url": "http://x", "basic.auth.user.info": "nope"})


async def test_an_https_registry_is_trusted_with_the_producers_tls_settings(
    schema_registry: Any, tmp_path: Any
) -> None:
    """The registry behind TLS (a certificate of the test CA): the producer's trust settings
    reach it through ``tls_from``; without them the system's CAs refuse it, and the error
    says so."""
    import urllib.parse

    from tests.support.tls import TlsProxy, make_certificates, server_context

    certs = make_certificates(tmp_path / "certs")
    upstream = urllib.parse.urlsplit(schema_registry.url)
    proxy = TlsProxy((str(upstream.hostname), int(upstream.port or 80)), server_context(certs))
    await proxy.start()
    url = f"https://localhost:{proxy.port}{upstream.path}"
    # A SASL_SSL producer's: its TLS side reaches the registry, its SASL side does not.
    producer = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.truststore.location": str(certs.ca_cert),
        "ssl.truststore.type": "PEM",
    }
    trusting = SchemaRegistryClient.from_config({"url": url}, tls_from=producer)
    untrusting = SchemaRegistryClient.from_config({"url": url})
    try:
        subject = _subject()
        schema_id = await trusting.register(subject, _order())
        assert (await trusting.latest_version(subject)).schema_id == schema_id
        with pytest.raises(SchemaRegistryError, match=r"(?i)certificate"):
            await untrusting.subjects()
        # The registry's own TLS options win over the producer's.
        own = SchemaRegistryClient.from_config(
            {"url": url, "ssl.ca.location": str(certs.ca_cert)},
            tls_from={"security.protocol": "PLAINTEXT"},
        )
        assert subject in await own.subjects()
        await own.close()
    finally:
        await trusting.close()
        await untrusting.close()
        await proxy.close()


async def test_normalization_finds_a_schema_written_otherwise(schema_registry: Any) -> None:
    """The same Avro schema with its keys in another order and other whitespace: with
    normalization the registry finds the registered one (the same id, no new version);
    without it, the registry takes the text as a new version."""
    client = SchemaRegistryClient(schema_registry.url)
    subject = _subject()
    reordered = Schema(
        json.dumps(
            {
                "fields": [{"type": "long", "name": "id"}],
                "namespace": "shop",
                "name": "Order",
                "type": "record",
            },
            indent=2,
        )
    )
    try:
        first = await client.register(subject, _order())
        assert await client.register(subject, reordered, normalize=True) == first
        assert (await client.latest_version(subject)).version == 1
        second = await client.register(subject, reordered)
        assert second != first
        assert (await client.version(subject, 2)).schema_id == second
    finally:
        await client.close()
