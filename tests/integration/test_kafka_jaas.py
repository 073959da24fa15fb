"""Java SASL settings against Apache Kafka's own SASL listeners.

A Java or Spark job's settings are given as they are: ``security.protocol``,
``sasl.mechanism`` and ``sasl.jaas.config`` (plus, for OAUTHBEARER, the token endpoint),
by their Java names, and nothing else about SASL. The ``kafka_secure`` node
(tests.support.kafka.SecureKafka) checks PLAIN and SCRAM passwords and validates OAUTHBEARER
tokens with Kafka's unsecured validator (unsigned JWTs naming the principal in ``sub``).
What the producer wrote is read back by confluent-kafka through the node's PLAINTEXT
listener.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import AuthenticationError
from tests.support.kafka import SecureKafka
from tests.support.readback import read_back
from tests.support.spark import ONCE_PER_CI_RUN, local_spark
from tests.support.token_endpoint import TokenEndpoint

pytestmark = pytest.mark.kafka

# Every test ends well before this; it only turns a hang into a failure.
_HANG = 60.0
_ROOT = Path(__file__).resolve().parents[2]

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
CLIENT_SECRET = "client-secret-5b1d"


def _topic(secure: SecureKafka) -> str:
    name = f"jaas-{uuid.uuid4().hex[:10]}"
    secure.create_topic(name, 1)
    return name


def _java_properties(secure: SecureKafka, mechanism: str, jaas: str, **more: str) -> dict[str, str]:
    """What a Java job's producer properties hold for SASL over TLS."""
    return {
        "bootstrap.servers": secure.address("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": jaas,
        # The test CA (the Java job's trust store).
        "ssl.ca.location": str(secure.tls.ca_cert),
        **more,
    }


async def _produce_and_read_back(secure: SecureKafka, properties: dict[str, str]) -> None:
    topic = _topic(secure)
    sent = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(10)]
    async with Producer(properties) as producer:
        futures = [await producer.send(topic, value, key=key) for key, value in sent]
        await asyncio.wait_for(asyncio.gather(*futures), _HANG)
    records = read_back(secure.broker.bootstrap_servers, topic, expected=len(sent))
    assert [(record.key, record.value) for record in records] == sent


@pytest.mark.parametrize(("module", "mechanism"), [(PLAIN, "PLAIN"), (SCRAM, "SCRAM-SHA-512")])
async def test_a_java_jaas_line_over_sasl_ssl(
    kafka_secure: SecureKafka, module: str, mechanism: str
) -> None:
    user = SecureKafka.SUPER_USER
    password = kafka_secure.passwords[user]
    jaas = f'{module} required username="{user}" password="{password}";'
    await _produce_and_read_back(kafka_secure, _java_properties(kafka_secure, mechanism, jaas))


async def test_a_wrong_password_in_the_jaas_line_is_refused_without_showing_it(
    kafka_secure: SecureKafka,
) -> None:
    wrong = "not-alices-password-93"
    jaas = f'{SCRAM} required username="{SecureKafka.SUPER_USER}" password="{wrong}";'
    producer = Producer(_java_properties(kafka_secure, "SCRAM-SHA-512", jaas))
    with pytest.raises(AuthenticationError) as caught:
        await asyncio.wait_for(producer.start(), _HANG)
    assert not caught.value.retriable
    assert wrong not in str(caught.value) and wrong not in repr(producer.config)
    await producer.close()


async def test_oauthbearer_client_credentials_from_a_token_endpoint(
    kafka_secure: SecureKafka,
) -> None:
    with TokenEndpoint("producer-app", CLIENT_SECRET, subject=SecureKafka.SUPER_USER) as idp:
        properties = _java_properties(
            kafka_secure,
            "OAUTHBEARER",
            f'{OAUTH} required clientId="producer-app" clientSecret="{CLIENT_SECRET}" '
            'scope="kafka";',
            **{
                "sasl.oauthbearer.token.endpoint.url": idp.url,
                "sasl.login.callback.handler.class": (
                    "org.apache.kafka.common.security.oauthbearer."
                    "OAuthBearerLoginCallbackHandler"
                ),
            },
        )
        await _produce_and_read_back(kafka_secure, properties)
        # One token served every connection (bootstrap and leader).
        assert len(idp.requests) == 1
        assert idp.requests[0]["form"] == {"grant_type": "client_credentials", "scope": "kafka"}

        wrong = dict(properties)
        wrong["sasl.jaas.config"] = (
            f'{OAUTH} required clientId="producer-app" clientSecret="wrong-secret-77";'
        )
        producer = Producer(wrong)
        with pytest.raises(AuthenticationError) as caught:
            await asyncio.wait_for(producer.start(), _HANG)
        assert "HTTP 401" in str(caught.value) and not caught.value.retriable
        assert "wrong-secret-77" not in str(caught.value)
        await producer.close()


async def test_oauthbearer_unsecured_tokens_from_the_jaas_line(kafka_secure: SecureKafka) -> None:
    jaas = f'{OAUTH} required unsecuredLoginStringClaim_sub="{SecureKafka.SUPER_USER}";'
    properties = _java_properties(kafka_secure, "OAUTHBEARER", jaas)
    await _produce_and_read_back(kafka_secure, properties)


# ---- the Spark data source ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    with local_spark("aioproducer-jaas-tests") as session:
        yield session


@pytest.mark.spark
@ONCE_PER_CI_RUN
def test_a_spark_job_with_its_kafka_sasl_options(kafka_secure: SecureKafka, spark: Any) -> None:
    topic = _topic(kafka_secure)
    user = SecureKafka.SUPER_USER
    rows = [(f"k{i}", f"value-{i}") for i in range(20)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(2)
    (
        df.write.format("aioproducer")
        .option("kafka.bootstrap.servers", kafka_secure.address("SASL_SSL"))
        .option("topic", topic)
        .option("kafka.security.protocol", "SASL_SSL")
        .option("kafka.sasl.mechanism", "SCRAM-SHA-512")
        .option(
            "kafka.sasl.jaas.config",
            f'{SCRAM} required username="{user}" password="{kafka_secure.passwords[user]}";',
        )
        .option("kafka.ssl.ca.location", str(kafka_secure.tls.ca_cert))
        .mode("append")
        .save()
    )
    records = read_back(kafka_secure.broker.bootstrap_servers, topic, expected=len(rows))
    assert sorted((r.key, r.value) for r in records) == sorted(
        (key.encode(), value.encode()) for key, value in rows
    )
