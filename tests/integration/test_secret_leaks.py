"""Secrets never leak: runs that fail while carrying distinctive secret strings print none
of them, anywhere.

Each run is a subprocess with everything turned up: DEBUG logging on the root logger,
Python's development mode (asyncio debug, every warning shown) and the full traceback of
the failure printed. Its stdout and stderr together must hold no secret (nor its hex
form, as a dump of the bytes sent would show it), and the run must have failed the way
it should: with the error class expected, so that a run that failed early for another
reason cannot pass for a quiet one.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.sasl_broker import ScriptedSaslBroker

ROOT = Path(__file__).resolve().parents[2]

#: The secrets the runs carry, each distinctive enough that finding it means a leak.
PASSWORD = "pw-Zq8sN1w-leakcheck"
TOKEN = "tok-Yw3rT5x-leakcheck"
KEY_PASSWORD = "kpw-Hb7uV2y-leakcheck"
FILE_PASSWORD = "fpw-Lc4mX9z-leakcheck"
SECRETS = (PASSWORD, TOKEN, KEY_PASSWORD, FILE_PASSWORD)

#: The broker knows this user with another password, and no token of ours.
USER = "alice"
BROKER_PASSWORD = "the-right-password"

#: A run finishes in a second or two; this only turns a hang into a failure.
HANG = 60.0

PRELUDE = """\
import asyncio, logging, sys, traceback, warnings
logging.basicConfig(
    level=logging.DEBUG, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
)
warnings.simplefilter("always")

def failed(exc):
    traceback.print_exception(exc)  # the whole chain, as an unhandled error shows it
    print("FAILED WITH", type(exc).__name__, flush=True)
"""


async def run(body: str, **values: object) -> str:
    """Run ``body`` (after the prelude, with ``values`` as globals) and return everything
    it printed, stdout and stderr."""
    assignments = "".join(f"{name} = {value!r}\n" for name, value in values.items())
    code = PRELUDE + assignments + textwrap.dedent(body)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-X",
        "dev",
        "-c",
        code,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": path, "PYTHONASYNCIODEBUG": "1"},
        cwd=ROOT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), HANG)
    return output.decode("utf-8", "replace")


def assert_quiet_failure(output: str, expected: str) -> None:
    """``output`` shows the run failed with ``expected`` and holds no secret."""
    for secret in SECRETS:
        for form in (secret, secret.encode().hex()):
            assert form not in output, f"{form!r} leaked:\n{output}"
    assert expected in output, output


@pytest.fixture
async def sasl_broker() -> AsyncIterator[ScriptedSaslBroker]:
    """A SASL listener that refuses our password and token, and (as a careless broker
    might) puts what it received into its error messages."""
    broker = ScriptedSaslBroker(
        users={USER: BROKER_PASSWORD},
        tokens={"some-other-token": "bob"},
        echo_credentials=True,
    )
    await broker.start()
    try:
        yield broker
    finally:
        await broker.close()


PRODUCER_FAILS_TO_START = """
from aioproducer import Producer

async def main():
    producer = Producer(
        bootstrap_servers=BOOTSTRAP,
        security_protocol="SASL_PLAINTEXT",
        max_block_ms=20_000,
        **OPTIONS,
    )
    print(repr(producer), producer.config)
    logging.getLogger("leakcheck").debug("config: %r / %s", producer.config, producer.config)
    try:
        await producer.start()
    except Exception as exc:
        failed(exc)
    finally:
        await producer.close(timeout=0)

asyncio.run(main())
"""


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_a_wrong_password_is_never_shown(
    mechanism: str, sasl_broker: ScriptedSaslBroker
) -> None:
    options = {
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }
    output = await run(
        PRODUCER_FAILS_TO_START, BOOTSTRAP=sasl_broker.bootstrap_servers, OPTIONS=options
    )
    assert_quiet_failure(output, "FAILED WITH SaslAuthenticationFailedError")
    # The run did log at DEBUG, and the broker did see the attempt.
    assert "DEBUG leakcheck: config: " in output, output
    assert [(a.mechanism, a.succeeded) for a in sasl_broker.attempts] == [(mechanism, False)]


async def test_a_refused_oauth_token_is_never_shown(sasl_broker: ScriptedSaslBroker) -> None:
    body = PRODUCER_FAILS_TO_START.replace(
        "**OPTIONS,", "**OPTIONS, sasl_oauth_token_provider=lambda: TOKEN,"
    )
    output = await run(
        body,
        BOOTSTRAP=sasl_broker.bootstrap_servers,
        OPTIONS={"sasl_mechanism": "OAUTHBEARER"},
        TOKEN=TOKEN,
    )
    assert_quiet_failure(output, "FAILED WITH SaslAuthenticationFailedError")
    assert [(a.mechanism, a.succeeded) for a in sasl_broker.attempts] == [("OAUTHBEARER", False)]


JAAS_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


async def test_a_wrong_password_in_a_jaas_line_is_never_shown(
    sasl_broker: ScriptedSaslBroker,
) -> None:
    # A Java client's settings, by their Java names: the password inside sasl.jaas.config.
    options = {
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{JAAS_SCRAM} required username="{USER}" password="{PASSWORD}";',
    }
    body = PRODUCER_FAILS_TO_START.replace("**OPTIONS,", "").replace(
        "Producer(", "Producer(OPTIONS, ", 1
    )
    output = await run(body, BOOTSTRAP=sasl_broker.bootstrap_servers, OPTIONS=options)
    assert_quiet_failure(output, "FAILED WITH SaslAuthenticationFailedError")
    assert 'password="' not in output, output  # nothing of the JAAS line
    assert [(a.mechanism, a.succeeded) for a in sasl_broker.attempts] == [
        ("SCRAM-SHA-512", False)
    ]


async def test_a_malformed_jaas_line_is_never_shown() -> None:
    body = """
    from aioproducer import Producer
    try:
        Producer({
            "bootstrap.servers": "127.0.0.1:9092",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": LINE,
        })
    except Exception as exc:
        failed(exc)
    """
    line = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{USER}" password="{PASSWORD}'  # the closing quote and ';' are missing
    )
    output = await run(body, LINE=line)
    assert_quiet_failure(output, "FAILED WITH ConfigurationError")
    assert "a quoted string has no closing quote" in output, output


async def test_a_trust_store_with_a_wrong_password_is_never_shown(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    from tests.support.tls import make_certificates

    ca = make_certificates(tmp_path / "ca").ca_cert
    from cryptography import x509

    certificate = x509.load_pem_x509_certificate(ca.read_bytes())
    store = tmp_path / "truststore.p12"
    store.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"ca", None, None, [certificate], BestAvailableEncryption(FILE_PASSWORD.encode())
        )
    )
    body = """
    from aioproducer import Producer

    async def main():
        producer = Producer({
            "bootstrap.servers": "127.0.0.1:9",
            "security.protocol": "SSL",
            "ssl.truststore.location": STORE,
            "ssl.truststore.password": WRONG,
            "ssl.truststore.type": "PKCS12",
            "max.block.ms": 5000,
        })
        print(repr(producer), producer.config)
        try:
            await producer.start()
        except Exception as exc:
            failed(exc)
        finally:
            await producer.close(timeout=0)

    asyncio.run(main())
    """
    output = await run(body, STORE=str(store), WRONG=KEY_PASSWORD)
    assert_quiet_failure(output, "FAILED WITH ConfigurationError")
    assert "ssl.truststore.password is wrong" in output, output


async def test_a_token_given_as_the_token_provider_is_never_shown() -> None:
    # The token string itself where an object with token() belongs: refused, not echoed.
    body = """
    from aioproducer import Producer
    try:
        Producer(
            bootstrap_servers="127.0.0.1:9092",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=TOKEN,
        )
    except Exception as exc:
        failed(exc)
    """
    output = await run(body, TOKEN=TOKEN)
    assert_quiet_failure(output, "FAILED WITH ConfigurationError")
    assert "sasl_oauth_token_provider must be" in output, output


async def test_spark_sink_options_never_show_their_passwords(tmp_path: Path) -> None:
    certificate = tmp_path / "client.pem"
    certificate.write_text("not read here\n")
    body = """
    from aioproducer.integrations.spark import SinkOptions

    options = {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "topic": "events",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.username": "alice",
        "kafka.sasl.password": PASSWORD,
        "kafka.ssl.key.password": KEY_PASSWORD,
        "kafka.ssl.certificate.location": CERTIFICATE,
        "kafka.ssl.key.location": CERTIFICATE,
    }
    sink = SinkOptions.parse(options)
    print(repr(sink), str(sink), f"{sink!r}")
    logging.getLogger("leakcheck").debug("sink options: %r", sink)
    del options["kafka.ssl.certificate.location"]  # a key password without its certificate
    try:
        SinkOptions.parse(options)
    except Exception as exc:
        failed(exc)
    """
    output = await run(
        body, PASSWORD=PASSWORD, KEY_PASSWORD=KEY_PASSWORD, CERTIFICATE=str(certificate)
    )
    assert_quiet_failure(output, "FAILED WITH ConfigurationError")
    assert "'kafka.sasl.password': '***'" in output or "'sasl.password': '***'" in output, output


CLI = """
from aioproducer.cli import main
code = main(ARGS)
print("EXIT", code, flush=True)
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A malformed escape inside the password.
        (
            f"acks=all\nsasl.password={FILE_PASSWORD[:4]}\\u{FILE_PASSWORD[4:]}\n",
            "line 2: malformed \\uXXXX escape",
        ),
        # A continued value whose backslash went missing: the password's line is a name.
        (
            f"sasl.username=alice \\\n    and more\n    {FILE_PASSWORD}\n",
            "line 3: unknown producer config (its name is not shown",
        ),
    ],
)
async def test_the_command_never_shows_a_malformed_properties_line(
    text: str, expected: str, tmp_path: Path
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(text, encoding="utf-8")
    config.chmod(0o600)
    args = ["produce", "--topic", "t", "--bootstrap-server", "127.0.0.1:9"]
    args += ["--producer.config", str(config)]
    output = await run(CLI, ARGS=args)
    assert_quiet_failure(output, "EXIT 2")
    assert expected in output, output
    assert FILE_PASSWORD[4:8] not in output, output  # nor the part after a bad escape


async def test_the_command_never_shows_a_wrong_password_from_its_file(
    sasl_broker: ScriptedSaslBroker, tmp_path: Path
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username={USER}\nsasl.password={FILE_PASSWORD}\nmax.block.ms=20000\n",
        encoding="utf-8",
    )
    config.chmod(0o644)  # readable by others: warned about, without the password
    lines = tmp_path / "lines.txt"
    lines.write_text("one record\n", encoding="utf-8")
    args = ["produce", str(lines), "--topic", "t", "--producer.config", str(config)]
    args += ["--bootstrap-server", sasl_broker.bootstrap_servers]
    output = await run(CLI, ARGS=args)
    assert_quiet_failure(output, "EXIT 1")
    assert "SaslAuthenticationFailedError" in output, output
    assert "chmod 600" in output, output
    assert [(a.mechanism, a.succeeded) for a in sasl_broker.attempts] == [("SCRAM-SHA-512", False)]
