"""``sasl.jaas.config`` and the Java OAUTHBEARER options: the JAAS grammar, how a line becomes
the producer's SASL settings, and the client credentials token provider against a local
token endpoint (http.server in a thread)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioproducer import ClientCredentialsTokenProvider, ProducerConfig, UnsecuredTokenProvider
from aioproducer.errors import AuthenticationError, ConfigurationError, KafkaConnectionError
from aioproducer.jaas import parse_jaas_config, resolve_jaas
from aioproducer.net.sasl import create_mechanism
from tests.support.token_endpoint import TokenEndpoint

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
SECRET = "pa55-w0rd-9f2e"


def _java(jaas: str, mechanism: str = "PLAIN", **more: str) -> ProducerConfig:
    return ProducerConfig.from_options(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": jaas,
            **more,
        }
    )


# ---- the grammar ------------------------------------------------------------------------------


def test_a_plain_line_as_java_jobs_write_it() -> None:
    entry = parse_jaas_config(f'{PLAIN} required username="alice" password="{SECRET}";')
    assert entry.login_module == PLAIN
    assert entry.control_flag == "required"
    assert dict(entry.options) == {"username": "alice", "password": SECRET}
    assert SECRET not in repr(entry)


@pytest.mark.parametrize(
    ("text", "options"),
    [
        # bare words, single quotes, line breaks and tabs between tokens
        (f"{SCRAM} REQUIRED\n\tusername=alice\n\tpassword='x y';", {"username": "alice",
                                                                    "password": "x y"}),
        # escapes inside quotes: \" \\ \n \t, octal, any other character stands for itself
        (f'{SCRAM} required username="a\\"b" password="c\\\\d\\n\\t\\101\\q";',
         {"username": 'a"b', "password": "c\\d\n\tAq"}),
        # comments of both kinds, and no space before ';'
        (f"/* client */ {PLAIN} sufficient // who\n username=u password=p;",
         {"username": "u", "password": "p"}),
        # '=' and ';' inside quotes are text; the last of two equal names wins
        (f'{PLAIN} optional username="a=b;c" password=x password="y";',
         {"username": "a=b;c", "password": "y"}),
        # no options at all
        (f"{OAUTH} requisite;", {}),
        # characters beyond ASCII in bare words
        (f"{PLAIN} required username=jürgen password=\u20ac;",
         {"username": "jürgen", "password": "\u20ac"}),
    ],
)
def test_the_grammar_of_kafka_jaas_config(text: str, options: dict[str, str]) -> None:
    assert dict(parse_jaas_config(text).options) == options


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (f'{PLAIN} required username="alice" password="{SECRET}"', "at its end: the login "
         "module's entry is not ended with ';'"),
        (f'{PLAIN} required username="alice" password "{SECRET}";', "(a quoted string): "
         "expected '=' after the option name at column"),
        (f'{PLAIN} required username="alice" password=;', "(a ';'): expected a value"),
        (f'{PLAIN} mandatory username="alice" password="{SECRET}";', "column 57 (a word): "
         "the control flag must be"),
        (f'{PLAIN} required username="alice" password="{SECRET};', "column 92: a quoted "
         "string has no closing quote"),
        (f'{PLAIN} required username="alice" password="{SECRET}\n";', "a quoted string runs "
         "past the end of its line"),
        (f'{PLAIN} required username="alice" /* password="{SECRET}";', "a /* comment is not "
         "closed"),
        (f'= required password="{SECRET}";', "column 1 (a '='): expected the login module"),
        (f'{PLAIN};', "expected the control flag"),
        ("   // nothing but a comment", "is empty"),
        (f'{PLAIN} required password="{SECRET}"; {PLAIN} required;', "holds 2 login modules"),
        (f'{PLAIN} required password="{SECRET}" \x85 x=y;', "(a character): expected an "
         "option name"),
        (f"{PLAIN} required username=alice password=p@ss/{SECRET};", "not ended with ';' "
         "(the '/' at column 94 starts a comment to the end of its line"),
    ],
)
def test_a_malformed_line_says_where_and_never_what(text: str, where: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _java(text)
    message = str(caught.value)
    assert where in message, message
    assert message.startswith("sasl_jaas_config (sasl.jaas.config)")
    assert SECRET not in message and "alice" not in message
    assert SECRET not in repr(caught.value.args)


# ---- from the line to the producer's settings -------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_and_plain_lines_set_the_user_and_password(mechanism: str) -> None:
    config = _java(f'{SCRAM} required username="alice" password="{SECRET}";', mechanism)
    assert (config.sasl_plain_username, config.sasl_plain_password) == ("alice", SECRET)
    config = _java(f'{PLAIN} required username="bob" password="{SECRET}";')
    assert (config.sasl_plain_username, config.sasl_plain_password) == ("bob", SECRET)
    assert SECRET not in repr(config) and "sasl_jaas_config='***'" in repr(config)


def test_a_shaded_login_module_is_the_same_module() -> None:
    config = _java(f'kafkashaded.{PLAIN} required username="u" password="{SECRET}";')
    assert config.sasl_plain_username == "u"


@pytest.mark.parametrize(
    ("module", "mechanism", "message"),
    [
        (SCRAM, "PLAIN", "names ScramLoginModule, which goes with sasl_mechanism "
         "(sasl.mechanism) SCRAM-SHA-256 or SCRAM-SHA-512, but sasl_mechanism is 'PLAIN'"),
        (PLAIN, "SCRAM-SHA-256", "names PlainLoginModule, which goes with sasl_mechanism "
         "(sasl.mechanism) PLAIN, but"),
        (PLAIN, "OAUTHBEARER", "names PlainLoginModule"),
    ],
)
def test_the_login_module_must_fit_the_mechanism(
    module: str, mechanism: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _java(f'{module} required username="u" password="{SECRET}";', mechanism)


def test_own_settings_that_disagree_with_the_line_are_an_error() -> None:
    jaas = f'{PLAIN} required username="alice" password="{SECRET}";'
    base = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}
    with pytest.raises(ConfigurationError, match="sasl_plain_username and sasl_jaas_config"):
        ProducerConfig.from_options(base, sasl_plain_username="bob")
    with pytest.raises(ConfigurationError) as caught:
        ProducerConfig.from_options(base, sasl_plain_password="other-password")
    assert "sasl_plain_password and sasl_jaas_config" in str(caught.value)
    assert "other-password" not in str(caught.value) and SECRET not in str(caught.value)
    # The same value both ways is no disagreement.
    same = ProducerConfig.from_options(base, sasl_plain_username="alice")
    assert same.sasl_plain_password == SECRET


def test_a_krb5_login_module_line_gives_the_keytab_or_the_ticket_cache() -> None:
    keytab = resolve_jaas(
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
        'keyTab="/etc/security/keytabs/alice.keytab" principal="alice@EXAMPLE.COM";',
        mechanism="GSSAPI",
    )
    assert (keytab.kerberos_keytab, keytab.kerberos_principal) == (
        "/etc/security/keytabs/alice.keytab",
        "alice@EXAMPLE.COM",
    )
    assert keytab.kerberos_ccache is None and keytab.username is None
    cache = resolve_jaas(
        "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true "
        'ticketCache="/tmp/krb5cc_1000" serviceName="kafka";',
        mechanism="GSSAPI",
    )
    assert cache.kerberos_ccache == "FILE:/tmp/krb5cc_1000"
    assert cache.kerberos_principal is None and cache.kerberos_service_name == "kafka"
    url = resolve_jaas(
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
        'keyTab="file:/etc/security/keytabs/alice.keytab" principal="alice@EXAMPLE.COM";',
        mechanism="GSSAPI",
    )
    assert url.kerberos_keytab == "/etc/security/keytabs/alice.keytab"  # as the JDK reads it
    default_cache = resolve_jaas(
        "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true;",
        mechanism="GSSAPI",
    )
    assert default_cache.kerberos_ccache is None
    with pytest.raises(ConfigurationError, match="useKeyTab=true needs keyTab and principal"):
        resolve_jaas(
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;",
            mechanism="GSSAPI",
        )
    with pytest.raises(ConfigurationError, match="would prompt for a password"):
        resolve_jaas(
            "com.sun.security.auth.module.Krb5LoginModule required;", mechanism="GSSAPI"
        )
    with pytest.raises(ConfigurationError, match=r"goes with sasl_mechanism .*GSSAPI"):
        resolve_jaas(
            "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true;",
            mechanism="PLAIN",
        )


def test_gssapi_without_the_gssapi_package_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gssapi", None)  # import gssapi raises ImportError
    with pytest.raises(ConfigurationError, match=r"pip install 'aioproducer\[kerberos\]'"):
        ProducerConfig.from_options(
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
             "sasl.kerberos.service.name": "kafka"}
        )


def test_a_keytab_needs_its_principal_and_must_be_readable(tmp_path: Path) -> None:
    keytab = tmp_path / "alice.keytab"
    base = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"}
    with pytest.raises(ConfigurationError, match="sasl_kerberos_principal is not"):
        ProducerConfig.from_options(base, sasl_kerberos_keytab=str(keytab))
    with pytest.raises(ConfigurationError, match="is not a readable file"):
        ProducerConfig.from_options(
            base, sasl_kerberos_keytab=str(keytab), sasl_kerberos_principal="alice@EXAMPLE.COM"
        )
    with pytest.raises(ConfigurationError, match="security_protocol is 'PLAINTEXT'"):
        ProducerConfig.from_options(sasl_kerberos_principal="alice@EXAMPLE.COM")


def test_other_login_modules_and_handlers_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"login module 'com\.example\.MyLogin'.*not "
                       r"supported; use SCRAM"):
        _java("com.example.MyLogin required;")
    with pytest.raises(ConfigurationError, match="delegation tokens are not supported"):
        _java(f'{SCRAM} required username="u" password="p" tokenauth="true";', "SCRAM-SHA-256")
    with pytest.raises(ConfigurationError, match="PlainLoginModule needs the option"
                       r"\(s\) password"):
        _java(f'{PLAIN} required username="u";')
    with pytest.raises(ConfigurationError, match="names a Java class"):
        _java(f"{OAUTH} required;", "OAUTHBEARER",
              **{"sasl.login.callback.handler.class": "com.example.Handler"})


def test_a_jaas_line_without_sasl_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match=r"sasl_jaas_config.*security_protocol is "
                       r"'SSL'"):
        ProducerConfig.from_options(
            {"security.protocol": "SSL", "sasl.jaas.config": f"{PLAIN} required;"}
        )


def test_unsecured_oauthbearer_tokens_as_kafka_makes_them() -> None:
    config = _java(
        f'{OAUTH} required unsecuredLoginStringClaim_sub="alice" '
        "unsecuredLoginListClaim_scope=',read,write' unsecuredLoginNumberClaim_tier=2 "
        "unsecuredLoginExtension_traceId=abc unsecuredLoginLifetimeSeconds=60;",
        "OAUTHBEARER",
    )
    provider = config.sasl_oauth_token_provider
    assert isinstance(provider, UnsecuredTokenProvider)
    header, payload, signature = provider.token().split(".")
    assert signature == ""
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["sub"] == "alice" and claims["scope"] == ["read", "write"]
    assert claims["tier"] == 2 and claims["exp"] - claims["iat"] == 60
    # Whole seconds, never ahead of the clock: Kafka's unsecured validator allows no skew.
    assert isinstance(claims["iat"], int) and claims["iat"] <= time.time()
    mechanism = asyncio.run(create_mechanism("OAUTHBEARER", token_provider=provider))
    assert b"traceId=abc\x01" in mechanism.initial_response()
    with pytest.raises(ConfigurationError, match="needs the 'sub' claim"):
        _java(f"{OAUTH} required unsecuredLoginStringClaim_name=x;", "OAUTHBEARER")


def test_an_oauthbearer_line_without_options_keeps_a_given_provider() -> None:
    def provider() -> str:
        return "token"

    config = ProducerConfig.from_options(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
         "sasl.jaas.config": f"{OAUTH} required;"},
        sasl_oauth_token_provider=provider,
    )
    assert config.sasl_oauth_token_provider is provider
    with pytest.raises(ConfigurationError, match="needs sasl_oauth_token_provider"):
        _java(f"{OAUTH} required;", "OAUTHBEARER")


def test_the_token_endpoint_needs_client_credentials() -> None:
    url = {"sasl.oauthbearer.token.endpoint.url": "https://idp.example/token"}
    with pytest.raises(ConfigurationError, match="option\\(s\\) clientSecret"):
        _java(f'{OAUTH} required clientId="c";', "OAUTHBEARER", **url)
    with pytest.raises(ConfigurationError, match=r"needs sasl\.jaas\.config"):
        ProducerConfig.from_options(
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", **url}
        )
    with pytest.raises(ConfigurationError, match="must be an https:// \\(or http://\\) URL"):
        _java(f'{OAUTH} required clientId="c" clientSecret="{SECRET}";', "OAUTHBEARER",
              **{"sasl.oauthbearer.token.endpoint.url": "file:///tmp/token"})
    config = _java(
        f'{OAUTH} required clientId="c" clientSecret="{SECRET}" scope="kafka";',
        "OAUTHBEARER",
        **url,
        **{
            "sasl.login.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.secured."
                "OAuthBearerLoginCallbackHandler",
            "sasl.login.connect.timeout.ms": "5000",
        },
    )
    provider = config.sasl_oauth_token_provider
    assert isinstance(provider, ClientCredentialsTokenProvider)
    assert SECRET not in repr(provider) and SECRET not in repr(config)
    # A copy of the configuration keeps the provider: it agrees with its own line.
    import dataclasses

    assert dataclasses.replace(config).sasl_oauth_token_provider is provider


# ---- the client credentials grant against a local token endpoint ------------------------------


class FakeClock:
    """Seconds since the epoch, moved by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def endpoint(clock: FakeClock) -> Iterator[TokenEndpoint]:
    with TokenEndpoint("producer-app", SECRET, number_subjects=True, clock=clock) as server:
        yield server


def _provider(endpoint: TokenEndpoint, secret: str = SECRET, **options: Any) -> Any:
    config = _java(
        f'{OAUTH} required clientId="producer-app" clientSecret="{secret}" '
        'scope="kafka.write" extension_logicalCluster="lkc-1";',
        "OAUTHBEARER",
        **{"sasl.oauthbearer.token.endpoint.url": endpoint.url},
    )
    provider = config.sasl_oauth_token_provider
    assert isinstance(provider, ClientCredentialsTokenProvider)
    return provider


def _provider_on(clock: FakeClock, endpoint: TokenEndpoint) -> ClientCredentialsTokenProvider:
    return ClientCredentialsTokenProvider(endpoint.url, "producer-app", SECRET, clock=clock)


def test_client_credentials_request_as_the_java_client_sends_it(
    endpoint: TokenEndpoint,
) -> None:
    provider = _provider(endpoint)
    mechanism = asyncio.run(create_mechanism("OAUTHBEARER", token_provider=provider))
    first = mechanism.initial_response()
    assert b"auth=Bearer ey" in first and b"logicalCluster=lkc-1\x01" in first
    [request] = endpoint.requests
    assert request["path"] == "/oauth2/token"
    assert request["content_type"] == "application/x-www-form-urlencoded"
    assert request["form"] == {"grant_type": "client_credentials", "scope": "kafka.write"}


def test_the_token_is_kept_until_near_expiry_then_renewed(
    endpoint: TokenEndpoint, clock: FakeClock
) -> None:
    provider = _provider_on(clock, endpoint)

    async def scenario() -> list[str]:
        tokens = [await provider.token()]
        # Three connections at once share the cached token; no new request.
        tokens += await asyncio.gather(*(provider.token() for _ in range(3)))
        clock.now += 0.79 * endpoint.lifetime
        tokens.append(await provider.token())
        clock.now += 0.02 * endpoint.lifetime  # past 80% of the lifetime: renewed
        tokens.append(await provider.token())
        return tokens

    tokens = asyncio.run(scenario())
    assert len(endpoint.requests) == 2
    assert len(set(tokens[:5])) == 1 and tokens[5] != tokens[0]


def test_producers_configured_alike_share_the_token(endpoint: TokenEndpoint) -> None:
    # As the producer of each Spark task on one worker is: same settings, one token.
    first, second = _provider(endpoint), _provider(endpoint)
    assert first is not second
    assert asyncio.run(first.token()) == asyncio.run(second.token())
    assert len(endpoint.requests) == 1
    other = ClientCredentialsTokenProvider(endpoint.url, "producer-app", SECRET, scope="other")
    asyncio.run(other.token())
    assert len(endpoint.requests) == 2


def test_a_wrong_secret_is_an_authentication_error_without_the_secret(
    endpoint: TokenEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "not-the-secret-4711"
    provider = _provider(endpoint, secret=wrong)
    with caplog.at_level(logging.DEBUG), pytest.raises(AuthenticationError) as caught:
        asyncio.run(create_mechanism("OAUTHBEARER", token_provider=provider))
    message = str(caught.value)
    assert "refused the client credentials of client 'producer-app': HTTP 401" in message
    assert "invalid_client" in message
    assert not caught.value.retriable
    assert wrong not in message and wrong not in caplog.text and wrong not in repr(provider)


def test_an_unavailable_endpoint_is_retriable_and_the_old_token_serves_meanwhile(
    endpoint: TokenEndpoint, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    provider = _provider_on(clock, endpoint)
    endpoint.status = 503
    with pytest.raises(KafkaConnectionError, match="answered HTTP 503") as caught:
        asyncio.run(provider.token())
    assert caught.value.retriable
    endpoint.status = None
    first = asyncio.run(provider.token())
    clock.now += 0.9 * endpoint.lifetime  # due for renewal, still valid
    endpoint.status = 503
    with caplog.at_level(logging.WARNING, logger="aioproducer.oauth"):
        assert asyncio.run(provider.token()) == first
    assert "could not renew the OAuth token" in caplog.text
    clock.now += 0.2 * endpoint.lifetime  # expired: no token to fall back on
    with pytest.raises(KafkaConnectionError):
        asyncio.run(provider.token())


def test_an_unreachable_endpoint_is_retriable(endpoint: TokenEndpoint) -> None:
    endpoint.close()
    provider = _provider(endpoint)
    with pytest.raises(KafkaConnectionError, match=r"could not get a token from the OAuth "
                       r"token endpoint http://127\.0\.0\.1") as caught:
        asyncio.run(create_mechanism("OAUTHBEARER", token_provider=provider))
    assert caught.value.retriable


def test_header_urlencode_as_rfc_6749_asks(endpoint: TokenEndpoint) -> None:
    endpoint.client_id = "app%3Aone"
    endpoint.client_secret = "s%2Fcret"
    provider = ClientCredentialsTokenProvider(
        endpoint.url, "app:one", "s/cret", urlencode_header=True, clock=endpoint.clock
    )
    assert asyncio.run(provider.token()).startswith("ey")


def test_a_token_without_the_sub_claim_is_refused(endpoint: TokenEndpoint) -> None:
    provider = ClientCredentialsTokenProvider(
        endpoint.url, "producer-app", SECRET, sub_claim_name="client_id",
        clock=endpoint.clock,
    )
    with pytest.raises(AuthenticationError, match="has no 'client_id' claim"):
        asyncio.run(provider.token())


def test_the_jaas_service_name_is_used_unless_the_option_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the options are checked here: whether gssapi is installed does not matter.
    monkeypatch.setitem(sys.modules, "gssapi", types.ModuleType("gssapi"))
    keytab = tmp_path / "alice.keytab"
    keytab.write_bytes(b"\x05\x02")
    line = (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
        f'keyTab="{keytab}" principal="alice@EXAMPLE.COM" serviceName="kafka-prod";'
    )
    base = {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.jaas.config": line}
    assert ProducerConfig.from_options(base).sasl_kerberos_service_name == "kafka-prod"
    same = ProducerConfig.from_options({**base, "sasl.kerberos.service.name": "kafka-prod"})
    assert same.sasl_kerberos_service_name == "kafka-prod"
    with pytest.raises(ConfigurationError, match="sasl_kerberos_service_name and sasl_jaas_config"):
        ProducerConfig.from_options({**base, "sasl.kerberos.service.name": "kafka"})


def test_kerberos_credentials_with_another_mechanism_are_refused(tmp_path: Path) -> None:
    keytab = tmp_path / "alice.keytab"
    keytab.write_bytes(b"\x05\x02")
    with pytest.raises(ConfigurationError) as caught:
        ProducerConfig.from_options(
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_plain_username="alice",
            sasl_plain_password="alice-secret",
            sasl_kerberos_keytab=str(keytab),
            sasl_kerberos_principal="alice@EXAMPLE.COM",
        )
    message = str(caught.value)
    assert message.startswith("sasl_kerberos_principal, sasl_kerberos_keytab set but ")
    assert "'GSSAPI' only" in message and "alice-secret" not in message
    # A service name copied from a Java configuration changes nothing: accepted.
    config = ProducerConfig.from_options(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.kerberos.service.name": "kafka",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="alice" password="alice-secret";',
        }
    )
    assert config.sasl_mechanism == "PLAIN"
