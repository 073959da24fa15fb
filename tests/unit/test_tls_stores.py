"""The Java client's TLS options: key and trust stores, host name checking, and the Java
options this producer refuses, checked offline (contexts are built, no broker is reached).

The stores are made here: PKCS12 with Java's ``keytool`` where a JDK is installed (a trust
store of trusted-certificate entries, as Java writes it) and with ``cryptography``.
"""

from __future__ import annotations

import logging
import os
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    load_pem_private_key,
    pkcs12,
)

from aioproducer import ProducerConfig
from aioproducer.errors import ConfigurationError
from aioproducer.net import tls
from tests.support.tls import TlsFiles, make_certificates

STORE_PASSWORD = "store-secret-pass"
KEY_STORE_PASSWORD = "keystore-secret-pass"

keytool = shutil.which("keytool")
needs_keytool = pytest.mark.skipif(keytool is None, reason="keytool (a JDK) is not installed")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def pkcs12_truststore(certs: TlsFiles, path: Path, password: str = STORE_PASSWORD) -> Path:
    """A trust store holding the test CA as a trusted-certificate entry, made by keytool."""
    assert keytool is not None
    subprocess.run(
        [keytool, "-importcert", "-noprompt", "-storetype", "PKCS12", "-keystore", str(path),
         "-storepass", password, "-alias", "ca", "-file", str(certs.ca_cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return path


def pkcs12_keystore(certs: TlsFiles, path: Path, password: str = KEY_STORE_PASSWORD) -> Path:
    """A key store with the client's key, certificate and the CA, as one PKCS12 entry."""
    key = load_pem_private_key(certs.client_key.read_bytes(), certs.client_key_password.encode())
    certificate = x509.load_pem_x509_certificate(certs.client_cert.read_bytes())
    ca = x509.load_pem_x509_certificate(certs.ca_cert.read_bytes())
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"client", key, certificate, [ca], BestAvailableEncryption(password.encode())  # type: ignore[arg-type]
        )
    )
    return path


def context_for(**config: Any) -> ssl.SSLContext:
    options = {"security.protocol": "SSL", **config}
    context = tls.ssl_context_for(ProducerConfig.from_options(options))
    assert context is not None
    return context


def ca_subjects(context: ssl.SSLContext) -> list[str]:
    return [dict(item[0] for item in ca["subject"])["commonName"] for ca in context.get_ca_certs()]


# ---- trust stores -------------------------------------------------------------------------


@needs_keytool
def test_a_keytool_pkcs12_truststore_is_trusted(certs: TlsFiles, tmp_path: Path) -> None:
    store = pkcs12_truststore(certs, tmp_path / "trust.p12")
    context = context_for(
        **{
            "ssl.truststore.location": str(store),
            "ssl.truststore.password": STORE_PASSWORD,
            "ssl.truststore.type": "PKCS12",
        }
    )
    assert ca_subjects(context) == ["aioproducer test CA"]
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    # Java's JKS type reads PKCS12 files too, and so does a declared JKS type here.
    as_jks = context_for(
        **{
            "ssl.truststore.location": str(store),
            "ssl.truststore.password": STORE_PASSWORD,
            "ssl.truststore.type": "JKS",
        }
    )
    assert ca_subjects(as_jks) == ["aioproducer test CA"]


def test_a_pem_truststore_and_pem_text_are_trusted(certs: TlsFiles) -> None:
    by_file = context_for(
        **{"ssl.truststore.location": str(certs.ca_cert), "ssl.truststore.type": "PEM"}
    )
    by_text = context_for(**{"ssl.truststore.certificates": certs.ca_cert.read_text()})
    assert ca_subjects(by_file) == ca_subjects(by_text) == ["aioproducer test CA"]


@needs_keytool
def test_a_wrong_or_missing_store_password_is_a_clear_error(
    certs: TlsFiles, tmp_path: Path
) -> None:
    store = pkcs12_truststore(certs, tmp_path / "trust.p12")
    with pytest.raises(ConfigurationError) as caught:
        context_for(
            **{"ssl.truststore.location": str(store), "ssl.truststore.password": "not-it-xyz"}
        )
    message = str(caught.value)
    assert "ssl.truststore.password is wrong" in message and str(store) in message
    assert "not-it-xyz" not in message and "not-it-xyz" not in repr(caught.value.__cause__)
    with pytest.raises(ConfigurationError, match=r"ssl\.truststore\.password is not set"):
        context_for(**{"ssl.truststore.location": str(store)})


@needs_keytool
def test_a_jks_store_is_refused_with_the_conversion_command(
    certs: TlsFiles, tmp_path: Path
) -> None:
    assert keytool is not None
    store = tmp_path / "trust.jks"
    subprocess.run(
        [keytool, "-importcert", "-noprompt", "-storetype", "JKS", "-keystore", str(store),
         "-storepass", STORE_PASSWORD, "-alias", "ca", "-file", str(certs.ca_cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    with pytest.raises(ConfigurationError) as caught:
        context_for(
            **{
                "ssl.truststore.location": str(store),
                "ssl.truststore.password": STORE_PASSWORD,
                "ssl.truststore.type": "JKS",
            }
        )
    message = str(caught.value)
    assert "JKS" in message
    assert (
        f"keytool -importkeystore -srckeystore {store} -destkeystore {tmp_path / 'trust.p12'} "
        "-deststoretype PKCS12" in message
    )
    assert STORE_PASSWORD not in message


def test_a_declared_type_must_match_the_file(certs: TlsFiles, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"is a PEM file, but ssl\.truststore\.type"):
        context_for(
            **{"ssl.truststore.location": str(certs.ca_cert), "ssl.truststore.type": "PKCS12"}
        )
    store = pkcs12_keystore(certs, tmp_path / "client.p12")
    with pytest.raises(ConfigurationError, match=r"is not a PEM file, but ssl\.keystore\.type"):
        context_for(**{"ssl.keystore.location": str(store), "ssl.keystore.type": "PEM"})


# ---- key stores ---------------------------------------------------------------------------


def test_a_pkcs12_keystore_loads_the_client_key_through_a_private_file_removed_at_once(
    certs: TlsFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = pkcs12_keystore(certs, tmp_path / "client.p12")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    seen: list[tuple[int, int]] = []
    load = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(
            (os.stat(certfile).st_mode & 0o777, os.stat(os.path.dirname(certfile)).st_mode & 0o777)
        )
        assert b"ENCRYPTED PRIVATE KEY" in Path(certfile).read_bytes()
        load(self, certfile, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    context_for(
        **{
            "ssl.truststore.location": str(certs.ca_cert),
            "ssl.keystore.location": str(store),
            "ssl.keystore.password": KEY_STORE_PASSWORD,
        }
    )
    assert seen == [(0o600, 0o700)]
    assert list(scratch.iterdir()) == []
    with pytest.raises(ConfigurationError) as caught:
        context_for(
            **{"ssl.keystore.location": str(store), "ssl.keystore.password": "nope-123456"}
        )
    assert "ssl.keystore.password is wrong" in str(caught.value)
    assert "nope-123456" not in str(caught.value)
    assert list(scratch.iterdir()) == []


def test_pem_keystores_by_file_and_by_text(certs: TlsFiles, tmp_path: Path) -> None:
    combined = tmp_path / "client-keystore.pem"
    combined.write_bytes(certs.client_key.read_bytes() + certs.client_cert.read_bytes())
    context_for(
        **{
            "ssl.keystore.location": str(combined),
            "ssl.keystore.type": "PEM",
            "ssl.key.password": certs.client_key_password,
        }
    )
    context_for(
        **{
            "ssl.keystore.certificate.chain": certs.client_cert.read_text(),
            "ssl.keystore.key": certs.client_key.read_text(),
            "ssl.key.password": certs.client_key_password,
        }
    )
    with pytest.raises(ConfigurationError) as caught:
        context_for(
            **{
                "ssl.keystore.certificate.chain": certs.client_cert.read_text(),
                "ssl.keystore.key": certs.client_key.read_text(),
                "ssl.key.password": "wrong-key-pass",
            }
        )
    assert "ssl.key.password) is wrong" in str(caught.value)
    assert "wrong-key-pass" not in str(caught.value)


# ---- the context cache --------------------------------------------------------------------


@needs_keytool
def test_contexts_are_shared_until_a_store_changes_and_keys_hold_no_secret(
    certs: TlsFiles, tmp_path: Path
) -> None:
    store = pkcs12_truststore(certs, tmp_path / "trust.p12")
    options = {"ssl.truststore.location": str(store), "ssl.truststore.password": STORE_PASSWORD}
    first = context_for(**options)
    assert context_for(**options) is first
    for key in tls._SSL_CONTEXTS:
        assert STORE_PASSWORD not in repr(key)
    # Made again (a renewed store): a new file, so a new context.
    store.unlink()
    pkcs12_truststore(certs, store)
    assert context_for(**options) is not first


# ---- host name checking -------------------------------------------------------------------


def test_endpoint_identification_algorithm(
    certs: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    ca = {"ssl.ca.location": str(certs.ca_cert)}
    on = ProducerConfig.from_options(
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "https", **ca}
    )
    assert on.ssl_check_hostname is True
    with pytest.raises(ConfigurationError) as caught:
        ProducerConfig.from_options({"ssl.endpoint.identification.algorithm": "ldaps"})
    assert "'https'" in str(caught.value) and "''" in str(caught.value)
    with caplog.at_level(logging.WARNING, logger="aioproducer"):
        for _ in range(2):
            context = context_for(**{"ssl.endpoint.identification.algorithm": "", **ca})
            assert not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    warnings = [r.getMessage() for r in caplog.records if "ssl_check_hostname" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "any host" in warnings[0]


# ---- configuration rules ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"ssl.truststore.password": "p"},
            "ssl_truststore_location (ssl.truststore.location) is not",
        ),
        (
            {"ssl.truststore.location": "/a.pem", "ssl.truststore.type": "PEM",
             "ssl.truststore.password": "p"},
            "PEM trust store has no password",
        ),
        (
            {"ssl.truststore.location": "/t.p12", "ssl.ca.location": "/ca.pem"},
            "ssl_cafile and ssl_truststore_location",
        ),
        (
            {"ssl.truststore.certificates": "PEM", "ssl.truststore.type": "JKS"},
            "set it to 'PEM'",
        ),
        ({"ssl.keystore.key": "KEY"}, "go together"),
        (
            {"ssl.keystore.location": "/k.p12", "ssl.certificate.location": "/c.pem"},
            "ssl_certfile/ssl_keyfile and ssl_keystore_location",
        ),
        ({"ssl.key.password": "p"}, "there is no private key"),
        ({"ssl.truststore.type": "BKS"}, "'PKCS12', 'PEM', 'JKS'"),
    ],
)  # fmt: skip
def test_store_options_that_contradict_are_errors(config: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        ProducerConfig.from_options({"security.protocol": "SSL", **config})
    assert expected in str(caught.value)


def test_the_same_file_under_both_names_agrees(certs: TlsFiles) -> None:
    context = context_for(
        **{"ssl.ca.location": str(certs.ca_cert), "ssl.truststore.location": str(certs.ca_cert)}
    )
    assert ca_subjects(context) == ["aioproducer test CA"]


def test_store_options_need_tls() -> None:
    with pytest.raises(ConfigurationError, match="security_protocol is 'PLAINTEXT'"):
        ProducerConfig.from_options({"ssl.truststore.location": "/t.p12"})


def test_passwords_and_keys_never_show_in_reprs_or_errors() -> None:
    secrets = {
        "ssl.truststore.password": "trust-SECRET-1",
        "ssl.keystore.password": "store-SECRET-2",
        "ssl.key.password": "key-SECRET-3",
    }
    config = ProducerConfig.from_options(
        {
            "security.protocol": "SSL",
            "ssl.truststore.location": "/t.p12",
            "ssl.keystore.location": "/k.p12",
            **secrets,
        }
    )
    for secret in secrets.values():
        assert secret not in repr(config)
    key_text = "-----BEGIN PRIVATE KEY-----\nKEY-SECRET-4\n-----END PRIVATE KEY-----\n"
    masked = ProducerConfig.from_options(
        {
            "security.protocol": "SSL",
            "ssl.keystore.key": key_text,
            "ssl.keystore.certificate.chain": "CHAIN",
        }
    )
    assert "KEY-SECRET-4" not in repr(masked)
    for name in ("ssl.truststore.password", "ssl.keystore.password", "ssl.keystore.key"):
        with pytest.raises(ConfigurationError) as caught:
            ProducerConfig.from_options({name: 12345678})
        assert "12345678" not in str(caught.value)


# ---- Java options this producer does not have ---------------------------------------------


def test_unsupported_java_options_are_refused_in_one_error_naming_each() -> None:
    with pytest.raises(ConfigurationError) as caught:
        ProducerConfig.from_options(
            {
                "sasl.login.refresh.window.factor": "0.5",
                "sasl.login.class": "com.example.Login",
                "ssl.provider": "SunJSSE",
                "ssl.enabled.protocols": "TLSv1.3",
                "sasl.oauthbearer.client.credentials.client.secret": "oauth-SECRET",
                "linger.ms": "5",
            }
        )
    message = str(caught.value)
    assert message.startswith("Java client options not supported by aioproducer: ")
    for name in (
        "sasl.login.refresh.window.factor",
        "sasl.login.class",
        "ssl.provider",
        "ssl.enabled.protocols",
        "sasl.oauthbearer.client.credentials.client.secret",
    ):
        assert name in message
    assert "Java login and callback classes" in message and "ssl_context" in message
    assert "sasl_oauth_token_provider" in message
    assert "oauth-SECRET" not in message and "unknown option" not in message


def test_java_options_at_values_that_change_nothing_are_dropped() -> None:
    config = ProducerConfig.from_options(
        {
            "ssl.keymanager.algorithm": "SunX509",
            "ssl.trustmanager.algorithm": "PKIX",
            "ssl.enabled.protocols": "TLSv1.2, TLSv1.3",
            "ssl.protocol": "TLSv1.3",
            "ssl.cipher.suites": "",
            "enable.metrics.push": "false",
            "linger.ms": "7",
        }
    )
    assert config.linger_ms == 7
    # The same options at values that would change what Java does are refused.
    with pytest.raises(ConfigurationError, match=r"ssl.trustmanager.algorithm .*ssl.protocol"):
        ProducerConfig.from_options(
            {"ssl.trustmanager.algorithm": "SunX509", "ssl.protocol": "TLSv1.2"}
        )
