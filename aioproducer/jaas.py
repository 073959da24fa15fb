"""The Java client's ``sasl.jaas.config``: parsed, and turned into the producer's own settings.

A Java or Spark job configures SASL with one JAAS line, for example::

    org.apache.kafka.common.security.scram.ScramLoginModule required
        username="alice" password="alice-secret";

:func:`parse_jaas_config` reads that line with the grammar of Kafka's ``JaasConfig`` (Java's
``StreamTokenizer`` with Kafka's settings): the login module class, a control flag
(``required``, ``requisite``, ``sufficient`` or ``optional``), options ``name=value`` where the
value is a quoted string (``"..."`` or ``'...'``, with backslash escapes) or a bare word, and a
closing ``;``. ``//`` and ``/* */`` comments are skipped. As in Kafka's clients, there must be
exactly one login module.

:func:`resolve_jaas` maps the login module to the producer's settings:

- ``PlainLoginModule`` (``sasl.mechanism=PLAIN``): ``username`` and ``password`` become
  ``sasl_plain_username`` and ``sasl_plain_password``;
- ``ScramLoginModule`` (``SCRAM-SHA-256`` or ``SCRAM-SHA-512``): the same;
- ``OAuthBearerLoginModule`` (``OAUTHBEARER``): with ``sasl.oauthbearer.token.endpoint.url``,
  the ``clientId``, ``clientSecret`` and ``scope`` options make a
  :class:`~aioproducer.oauth.ClientCredentialsTokenProvider` (KIP-768); with the
  ``unsecuredLogin*`` options, an :class:`~aioproducer.oauth.UnsecuredTokenProvider` (Kafka's
  unsecured tokens, for development).

- ``Krb5LoginModule`` (Kerberos, ``GSSAPI``): ``useKeyTab=true keyTab="..."
  principal="..."`` sets ``sasl_kerberos_keytab`` and ``sasl_kerberos_principal``;
  ``useTicketCache=true`` (with ``ticketCache="..."``, and ``principal`` if given) sets
  ``sasl_kerberos_ccache`` and ``sasl_kerberos_principal``. ``storeKey``, ``doNotPrompt``
  and ``debug`` change nothing here; ``serviceName`` sets ``sasl_kerberos_service_name``
  (given both ways, they must agree).

A malformed line is a
:class:`~aioproducer.errors.ConfigurationError` that says what is wrong and at which column,
never what the line holds: it carries a password.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aioproducer.errors import ConfigurationError

__all__ = ["JaasEntry", "JaasSettings", "parse_jaas_config", "resolve_jaas"]

_CONTROL_FLAGS: Final = ("required", "requisite", "sufficient", "optional")

PLAIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_KERBEROS_MODULES: Final = (
    "com.sun.security.auth.module.Krb5LoginModule",
    "com.ibm.security.auth.module.Krb5LoginModule",
)
_MODULE_MECHANISMS: Final[Mapping[str, tuple[str, ...]]] = {
    **{module: ("GSSAPI",) for module in _KERBEROS_MODULES},
    PLAIN_MODULE: ("PLAIN",),
    SCRAM_MODULE: ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    OAUTHBEARER_MODULE: ("OAUTHBEARER",),
}

#: The Java client's login callback handlers for OAUTHBEARER that this client does itself:
#: the KIP-768 handler (under its 3.x and 4.x packages) and the unsecured one.
LOGIN_CALLBACK_HANDLERS: Final = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredLoginCallbackHandler",
)
_UNSECURED_HANDLER: Final = LOGIN_CALLBACK_HANDLERS[2]

_NOT_SUPPORTED_HINT: Final = (
    "use SCRAM (ScramLoginModule with sasl.mechanism SCRAM-SHA-256 or SCRAM-SHA-512), PLAIN "
    "(PlainLoginModule) or OAUTHBEARER (OAuthBearerLoginModule) instead"
)

_LABEL: Final = "sasl_jaas_config (sasl.jaas.config)"


@dataclass(frozen=True)
class JaasEntry:
    """One login module of a JAAS configuration.

    Attributes:
        login_module: the login module class as written (``"org.apache...PlainLoginModule"``).
        control_flag: ``"required"``, ``"requisite"``, ``"sufficient"`` or ``"optional"``
            (lower case).
        options: the ``name=value`` options, in order; a name given twice keeps its last
            value, as in Java.
    """

    login_module: str
    control_flag: str
    options: Mapping[str, str]

    def __repr__(self) -> str:
        # The options hold passwords and client secrets: show their names only.
        return (
            f"JaasEntry(login_module={self.login_module!r}, control_flag={self.control_flag!r}, "
            f"options={sorted(self.options)!r})"
        )


# ---- the tokenizer ----------------------------------------------------------------------------
#
# Kafka configures java.io.StreamTokenizer so: characters 0-32 are white space; '/' starts a
# comment ('//' and '/* */' too); '"' and '\'' quote; ';' and '=' are tokens of their own;
# every other character from 33 to 128 and from 160 up makes words (code points above 255
# too); 129-159 are tokens of their own, which no grammar rule takes.

_WORD, _QUOTED, _SEMICOLON, _EQUALS, _OTHER = "word", "quoted string", "';'", "'='", "character"

_ESCAPES: Final = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    column: int  # 1-based, where the token starts


def _is_word_char(char: str) -> bool:
    code = ord(char)
    if char in "/;=\"'":
        return False
    return 32 < code <= 128 or code >= 160


def _tokens(text: str) -> tuple[list[_Token], int | None]:
    """The tokens of ``text``, and the column of the first unquoted single ``/`` (a
    comment to the end of its line, as in Java's parser: a likely mistake in a value)."""
    tokens: list[_Token] = []
    slash: int | None = None
    position = 0
    length = len(text)
    while position < length:
        char = text[position]
        code = ord(char)
        if code <= 32:
            position += 1
        elif char == "/":
            following = text[position + 1 : position + 2]
            if following == "*":
                end = text.find("*/", position + 2)
                if end < 0:
                    raise _syntax(position, "a /* comment is not closed with */")
                position = end + 2
            else:  # '//' or a lone '/': a comment to the end of the line
                if following != "/" and slash is None:
                    slash = position + 1
                while position < length and text[position] not in "\r\n":
                    position += 1
        elif char in "\"'":
            length_of_string = _quoted_length(text, position)
            tokens.append(_quoted(text, position))
            position += length_of_string
        elif char == ";":
            tokens.append(_Token(_SEMICOLON, char, position + 1))
            position += 1
        elif char == "=":
            tokens.append(_Token(_EQUALS, char, position + 1))
            position += 1
        elif _is_word_char(char):
            start = position
            while position < length and _is_word_char(text[position]):
                position += 1
            tokens.append(_Token(_WORD, text[start:position], start + 1))
        else:
            tokens.append(_Token(_OTHER, char, position + 1))
            position += 1
    return tokens, slash


def _quoted_length(text: str, start: int) -> int:
    """The length of the quoted string at ``start``, both quotes included."""
    quote = text[start]
    position = start + 1
    while position < len(text):
        char = text[position]
        if char == "\\":
            position += 2
            continue
        if char == quote:
            return position + 1 - start
        position += 1
    raise _syntax(start, "a quoted string has no closing quote")


def _quoted(text: str, start: int) -> _Token:
    quote = text[start]
    out: list[str] = []
    position = start + 1
    while True:
        char = text[position]
        if char == quote:
            return _Token(_QUOTED, "".join(out), start + 1)
        if char in "\r\n":
            # StreamTokenizer ends a quoted string at a line end; a value cut there is a
            # mistake, not something to guess at.
            raise _syntax(start, "a quoted string runs past the end of its line")
        if char != "\\":
            out.append(char)
            position += 1
            continue
        escaped = text[position + 1]
        if escaped in "01234567":
            # Octal, as in Java: up to three digits, the first of three at most '3'.
            limit = 3 if escaped <= "3" else 2
            digits = escaped
            while len(digits) < limit and text[position + 1 + len(digits)] in "01234567":
                digits += text[position + 1 + len(digits)]
            out.append(chr(int(digits, 8)))
            position += 1 + len(digits)
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        position += 2


def _syntax(index: int, problem: str) -> ConfigurationError:
    return ConfigurationError(f"{_LABEL} is malformed at column {index + 1}: {problem}")


def _at(token: _Token | None, problem: str) -> ConfigurationError:
    if token is None:
        return ConfigurationError(f"{_LABEL} is malformed at its end: {problem}")
    return ConfigurationError(
        f"{_LABEL} is malformed at column {token.column} (a {token.kind}): {problem}"
    )


def parse_jaas_config(text: str) -> JaasEntry:
    """Parse a ``sasl.jaas.config`` value holding one login module.

    Raises:
        ConfigurationError: the text is not a JAAS configuration of exactly one login
            module: the message says what is wrong and at which column, and never shows the
            text (it holds a password).
    """
    if not isinstance(text, str):
        raise ConfigurationError(f"{_LABEL} must be a string, got {type(text).__name__}")
    tokens, slash = _tokens(text)
    if not tokens:
        raise ConfigurationError(f"{_LABEL} is empty: it needs a login module")
    entries: list[JaasEntry] = []
    index = 0

    def take() -> _Token | None:
        nonlocal index
        token = tokens[index] if index < len(tokens) else None
        index += 1
        return token

    while index < len(tokens):
        module = take()
        assert module is not None
        if module.kind not in (_WORD, _QUOTED):
            raise _at(module, "expected the login module class name")
        flag = take()
        if flag is None or flag.kind not in (_WORD, _QUOTED):
            raise _at(flag, "expected the control flag (required, requisite, sufficient or "
                      "optional) after the login module")
        if flag.text.lower() not in _CONTROL_FLAGS:
            raise _at(flag, "the control flag must be required, requisite, sufficient or "
                      "optional")
        options: dict[str, str] = {}
        while True:
            name = take()
            if name is None:
                hint = ""
                if slash is not None:
                    hint = (
                        f" (the '/' at column {slash} starts a comment to the end of its line, "
                        "as in Java: put a value that holds '/' in double quotes)"
                    )
                raise _at(None, f"the login module's entry is not ended with ';'{hint}")
            if name.kind == _SEMICOLON:
                break
            if name.kind not in (_WORD, _QUOTED):
                raise _at(name, "expected an option name or ';'")
            equals = take()
            if equals is None or equals.kind != _EQUALS:
                raise _at(equals, f"expected '=' after the option name at column {name.column}")
            value = take()
            if value is None or value.kind not in (_WORD, _QUOTED):
                raise _at(value, f"expected a value for the option at column {name.column}")
            options[name.text] = value.text
        entries.append(JaasEntry(module.text, flag.text.lower(), options))
    if len(entries) != 1:
        raise ConfigurationError(
            f"{_LABEL} holds {len(entries)} login modules; a client takes exactly one"
        )
    return entries[0]


# ---- from the entry to the producer's settings -----------------------------------------------


def _module_of(login_module: str) -> str | None:
    """The Kafka login module ``login_module`` is, also under a shaded package
    (``kafkashaded.org.apache.kafka...``, as some Spark platforms ship it); None if none."""
    for known in (*_MODULE_MECHANISMS, *_KERBEROS_MODULES):
        if login_module == known or login_module.endswith("." + known):
            return known
    return None


def _handler_of(name: str) -> str | None:
    for known in LOGIN_CALLBACK_HANDLERS:
        if name == known or name.endswith("." + known):
            return known
    return None


@dataclass(frozen=True)
class JaasSettings:
    """What a ``sasl.jaas.config`` sets, in the producer's terms.

    Attributes:
        username: ``sasl_plain_username`` (PLAIN, SCRAM), or None.
        password: ``sasl_plain_password`` (PLAIN, SCRAM), or None.
        token_provider: ``sasl_oauth_token_provider`` (OAUTHBEARER), or None when the line
            names no way to get a token (the one given as ``sasl_oauth_token_provider`` is
            then used).
        kerberos_principal: ``sasl_kerberos_principal`` (GSSAPI), or None.
        kerberos_keytab: ``sasl_kerberos_keytab`` (GSSAPI, ``useKeyTab``), or None.
        kerberos_ccache: ``sasl_kerberos_ccache`` (GSSAPI, ``useTicketCache`` with
            ``ticketCache``), or None.
        kerberos_service_name: the line's ``serviceName``, or None.
    """

    username: str | None = None
    password: str | None = None
    token_provider: Any = None
    kerberos_principal: str | None = None
    kerberos_keytab: str | None = None
    kerberos_ccache: str | None = None
    kerberos_service_name: str | None = None

    def __repr__(self) -> str:
        return (
            f"JaasSettings(username={self.username!r}, "
            f"password={'***' if self.password is not None else None!r}, "
            f"token_provider={type(self.token_provider).__name__ if self.token_provider else None})"
        )


def _flag(options: Mapping[str, str], name: str) -> bool:
    value = options.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise ConfigurationError(f"{_LABEL}: Krb5LoginModule's {name} must be true or false")
    return value == "true"


def _kerberos_settings(options: Mapping[str, str]) -> JaasSettings:
    """A Krb5LoginModule line: a keytab with its principal, or a ticket cache."""
    principal = options.get("principal") or None
    service = options.get("serviceName") or None
    if _flag(options, "useKeyTab"):
        missing = [name for name in ("keyTab", "principal") if not options.get(name)]
        if missing:
            raise ConfigurationError(
                f"{_LABEL}: Krb5LoginModule with useKeyTab=true needs {' and '.join(missing)}"
            )
        keytab = options["keyTab"]
        if keytab[:5].lower() == "file:":
            keytab = keytab[5:]  # the JDK takes a file: URL's path
        return JaasSettings(
            kerberos_principal=principal,
            kerberos_keytab=keytab,
            kerberos_service_name=service,
        )
    if _flag(options, "useTicketCache"):
        cache = options.get("ticketCache") or None
        if cache is not None and ":" not in cache.split("/", 1)[0]:
            cache = f"FILE:{cache}"
        return JaasSettings(
            kerberos_principal=principal,
            kerberos_ccache=cache,
            kerberos_service_name=service,
        )
    raise ConfigurationError(
        f"{_LABEL}: Krb5LoginModule needs useKeyTab=true (with keyTab and principal) or "
        "useTicketCache=true: a Java client without either would prompt for a password"
    )


def resolve_jaas(
    text: str | None,
    *,
    mechanism: str,
    token_endpoint_url: str | None = None,
    login_callback_handler: str | None = None,
    connect_timeout_ms: int | None = None,
    read_timeout_ms: int | None = None,
    sub_claim_name: str = "sub",
    scope_claim_name: str = "scope",
    urlencode_header: bool = False,
) -> JaasSettings:
    """The producer settings a ``sasl.jaas.config`` (and the Java OAUTHBEARER options that go
    with it) stand for.

    Args:
        text: the ``sasl.jaas.config`` value, or None (then only the OAUTHBEARER options are
            checked).
        mechanism: ``sasl_mechanism``; it must fit the login module.
        token_endpoint_url: ``sasl.oauthbearer.token.endpoint.url``.
        login_callback_handler: ``sasl.login.callback.handler.class``.
        connect_timeout_ms: ``sasl.login.connect.timeout.ms``.
        read_timeout_ms: ``sasl.login.read.timeout.ms``.
        sub_claim_name: ``sasl.oauthbearer.sub.claim.name``.
        scope_claim_name: ``sasl.oauthbearer.scope.claim.name``.
        urlencode_header: ``sasl.oauthbearer.header.urlencode``.

    Raises:
        ConfigurationError: a malformed line, an unsupported login module, a module that does
            not fit ``mechanism``, or options missing.
    """
    from aioproducer.oauth import ClientCredentialsTokenProvider, UnsecuredTokenProvider

    mechanism = mechanism.upper()
    handler = None
    if login_callback_handler is not None:
        handler = _handler_of(login_callback_handler)
        if handler is None:
            raise ConfigurationError(
                "sasl_login_callback_handler_class (sasl.login.callback.handler.class) names a "
                "Java class, which cannot run here; for OAUTHBEARER pass a Python "
                "sasl_oauth_token_provider instead, or use the token endpoint "
                "(sasl.oauthbearer.token.endpoint.url)"
            )
    if text is None:
        if token_endpoint_url is not None:
            raise ConfigurationError(
                "sasl_oauthbearer_token_endpoint_url (sasl.oauthbearer.token.endpoint.url) "
                "needs sasl.jaas.config with an OAuthBearerLoginModule and its clientId and "
                "clientSecret options"
            )
        return JaasSettings()
    entry = parse_jaas_config(text)
    module = _module_of(entry.login_module)
    if module is None:
        raise ConfigurationError(
            f"{_LABEL} names the login module {entry.login_module!r}, which is not supported; "
            + _NOT_SUPPORTED_HINT
        )
    short = module.rsplit(".", 1)[1]
    mechanisms = _MODULE_MECHANISMS[module]
    if mechanism not in mechanisms:
        raise ConfigurationError(
            f"{_LABEL} names {short}, which goes with sasl_mechanism (sasl.mechanism) "
            f"{' or '.join(mechanisms)}, but sasl_mechanism is {mechanism!r}"
        )
    options = entry.options
    if module in _KERBEROS_MODULES:
        return _kerberos_settings(options)
    if module != OAUTHBEARER_MODULE:
        if token_endpoint_url is not None:
            raise ConfigurationError(
                "sasl_oauthbearer_token_endpoint_url (sasl.oauthbearer.token.endpoint.url) is "
                f"set, but {_LABEL} names {short}, not OAuthBearerLoginModule"
            )
        if options.get("tokenauth", "false").lower() == "true":
            raise ConfigurationError(
                f"{_LABEL} sets tokenauth: delegation tokens are not supported; log in with "
                "the user's own SCRAM credentials"
            )
        missing = [name for name in ("username", "password") if name not in options]
        if missing:
            raise ConfigurationError(
                f"{_LABEL}: {short} needs the option(s) {' and '.join(missing)}"
            )
        return JaasSettings(username=options["username"], password=options["password"])

    unsecured = {name: value for name, value in options.items()
                 if name.startswith("unsecuredLogin")}
    if token_endpoint_url is not None:
        if handler == _UNSECURED_HANDLER:
            raise ConfigurationError(
                "sasl_oauthbearer_token_endpoint_url (sasl.oauthbearer.token.endpoint.url) is "
                "set, but sasl.login.callback.handler.class names the unsecured handler"
            )
        missing = [name for name in ("clientId", "clientSecret") if not options.get(name)]
        if missing:
            raise ConfigurationError(
                f"{_LABEL}: the token endpoint (sasl.oauthbearer.token.endpoint.url) needs the "
                f"OAuthBearerLoginModule option(s) {' and '.join(missing)}"
            )
        extensions = {name[len("extension_"):]: value for name, value in options.items()
                      if name.startswith("extension_")}
        provider: Any = ClientCredentialsTokenProvider(
            token_endpoint_url,
            options["clientId"],
            options["clientSecret"],
            scope=options.get("scope") or None,
            extensions=extensions,
            connect_timeout_ms=connect_timeout_ms,
            read_timeout_ms=read_timeout_ms,
            sub_claim_name=sub_claim_name,
            scope_claim_name=scope_claim_name,
            urlencode_header=urlencode_header,
        )
        return JaasSettings(token_provider=provider)
    if handler is not None and handler != _UNSECURED_HANDLER:
        raise ConfigurationError(
            "sasl_login_callback_handler_class (sasl.login.callback.handler.class) names the "
            "token endpoint handler, which needs sasl.oauthbearer.token.endpoint.url"
        )
    if unsecured:
        return JaasSettings(token_provider=UnsecuredTokenProvider.from_jaas_options(unsecured))
    return JaasSettings()
