"""An asyncio client of a Schema Registry's REST API (Confluent's, which Apicurio and
Karapace also serve), with the ids and schemas it learns cached.

Built on ``httpx`` (the ``schema-registry`` extra): one connection pool per event loop, basic
or bearer authentication, TLS with a CA file, a client certificate or an ``SSLContext``.
Everything a serializer asks for more than once is answered from memory: a schema's id
(and, once looked up, its version) under a subject, a schema by id, a subject's latest
version (for ``latest_ttl`` seconds).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.parse
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aioproducer.errors import ConfigurationError, SchemaRegistryError

if TYPE_CHECKING:
    import httpx

    from aioproducer.config import ProducerConfig

__all__ = [
    "InMemorySchemaRegistry",
    "RegisteredSchema",
    "Schema",
    "SchemaReference",
    "SchemaRegistryClient",
]

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_ACCEPT = (
    "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
)
_RETRIABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class SchemaReference:
    """A schema another one uses: its name there, and where it is registered."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class Schema:
    """A schema as the registry takes it.

    Attributes:
        schema_str: the schema's text (Avro or JSON Schema as JSON, Protobuf as .proto).
        schema_type: ``"AVRO"``, ``"JSON"`` or ``"PROTOBUF"``.
        references: the schemas it uses, registered under their own subjects.
    """

    schema_str: str
    schema_type: str = "AVRO"
    references: tuple[SchemaReference, ...] = ()

    def body(self) -> dict[str, Any]:
        """The request body that names this schema."""
        body: dict[str, Any] = {"schema": self.schema_str}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [
                {"name": r.name, "subject": r.subject, "version": r.version}
                for r in self.references
            ]
        return body


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema registered under a subject: its id (what the wire format carries), the
    subject, its version there, and the schema."""

    schema_id: int
    subject: str
    version: int
    schema: Schema


@dataclass
class _Latest:
    registered: RegisteredSchema
    fetched_at: float


@dataclass
class _Settings:
    urls: tuple[str, ...]
    auth: tuple[str, str] | None = None
    token: str | None = None
    verify: ssl.SSLContext | bool = True
    timeout: float = 30.0
    latest_ttl: float | None = None
    headers: dict[str, str] = field(default_factory=dict)


class SchemaRegistryClient:
    """A Schema Registry's REST API, asynchronously, with caches.

    Args:
        url: the registry's URL, or several (comma-separated or a sequence), tried in
            turn when one cannot be reached. ``https://user:password@host`` is basic
            authentication.
        basic_auth: ``(user, password)`` for HTTP basic authentication.
        bearer_token: a token sent as ``Authorization: Bearer``.
        ssl_context: the TLS context for an ``https`` registry; by default, the system's
            trust store (or ``ssl_cafile``).
        ssl_cafile: a CA bundle (PEM) to trust instead of the system's.
        ssl_certfile: a client certificate (PEM), with ``ssl_keyfile`` its key.
        ssl_keyfile: the key of ``ssl_certfile``.
        ssl_password: the password of ``ssl_keyfile``.
        timeout: seconds for each request.
        latest_ttl: how long a subject's latest version is kept (seconds); None keeps it
            until the client closes.

    Use :meth:`from_config` for the option names of confluent-kafka and the Java
    serializers (``schema.registry.url``, ``basic.auth.user.info``, ...).
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        basic_auth: tuple[str, str] | None = None,
        bearer_token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        timeout: float = 30.0,
        latest_ttl: float | None = None,
    ) -> None:
        urls = [u.strip() for u in (url.split(",") if isinstance(url, str) else url)]
        urls = [u.rstrip("/") for u in urls if u]
        if not urls:
            raise ConfigurationError("the Schema Registry URL is empty")
        cleaned: list[str] = []
        for each in urls:
            parts = urllib.parse.urlsplit(each)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigurationError(
                    f"a Schema Registry URL must be http://host[:port] or https://...: "
                    f"{_without_credentials(each)!r}"
                )
            if parts.username is not None:
                if basic_auth is None:
                    basic_auth = (
                        urllib.parse.unquote(parts.username),
                        urllib.parse.unquote(parts.password or ""),
                    )
                netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
                each = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
            cleaned.append(each)
        if basic_auth is not None and bearer_token is not None:
            raise ConfigurationError(
                "a Schema Registry client takes basic authentication or a bearer token, not both"
            )
        verify: ssl.SSLContext | bool = True
        if ssl_context is not None:
            verify = ssl_context
        elif ssl_cafile or ssl_certfile:
            context = ssl.create_default_context(cafile=ssl_cafile)
            if ssl_certfile:
                context.load_cert_chain(ssl_certfile, ssl_keyfile, ssl_password)
            verify = context
        self._settings = _Settings(
            urls=tuple(cleaned),
            auth=basic_auth,
            token=bearer_token,
            verify=verify,
            timeout=timeout,
            latest_ttl=latest_ttl,
        )
        # One connection pool per event loop (httpx's are bound to the loop they start on);
        # a loop that is gone takes its pool with it.
        self._http: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._ids: dict[tuple[str, Schema, bool], int] = {}
        self._schemas: dict[int, Schema] = {}
        self._latest: dict[str, _Latest] = {}
        self._versions: dict[tuple[str, int], RegisteredSchema] = {}
        self._found: dict[tuple[str, Schema, bool], RegisteredSchema] = {}
        #: How many HTTP requests were made (what the caches spare is not counted).
        self.requests = 0

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        tls_from: ProducerConfig | Mapping[str, Any] | None = None,
    ) -> SchemaRegistryClient:
        """A client from confluent-kafka's ``SchemaRegistryClient`` options or the Java
        serializers' (``schema.registry.``-prefixed names are taken too).

        ``tls_from`` (a :class:`~aioproducer.ProducerConfig`, or producer options by Java
        or snake_case name) lends an ``https`` registry the producer's TLS settings (its
        trusted CAs, its client certificate) when ``config`` has no ``ssl.*`` option of its
        own and the producer uses TLS (``SSL`` or ``SASL_SSL``): one trust store for the
        brokers and the registry, as the Java serializers' users often configure twice.

        ``url``, ``basic.auth.user.info`` (``user:password``), ``basic.auth.credentials.source``
        (``USER_INFO`` or ``URL``), ``bearer.auth.credentials.source`` (``STATIC_TOKEN``) with
        ``bearer.auth.token``, ``ssl.ca.location``, ``ssl.certificate.location``,
        ``ssl.key.location``, ``ssl.key.password``, ``timeout`` and
        ``cache.latest.ttl.sec``. An option it does not know raises
        :class:`~aioproducer.errors.ConfigurationError` naming it.
        """
        options = {
            (k[len("schema.registry.") :] if k.startswith("schema.registry.") else k): v
            for k, v in config.items()
        }
        known = {
            "url",
            "basic.auth.user.info",
            "basic.auth.credentials.source",
            "bearer.auth.credentials.source",
            "bearer.auth.token",
            "ssl.ca.location",
            "ssl.certificate.location",
            "ssl.key.location",
            "ssl.key.password",
            "timeout",
            "cache.latest.ttl.sec",
        }
        unknown = sorted(set(options) - known)
        if unknown:
            given = {k.removeprefix("schema.registry."): k for k in config}
            raise ConfigurationError(
                "unknown Schema Registry options: " + ", ".join(given[n] for n in unknown)
            )
        if "url" not in options:
            raise ConfigurationError("the Schema Registry options need url (schema.registry.url)")
        basic_auth: tuple[str, str] | None = None
        source = str(options.get("basic.auth.credentials.source", "USER_INFO")).upper()
        info = options.get("basic.auth.user.info")
        if info is not None and source in ("USER_INFO", "SASL_INHERIT"):
            user, sep, password = str(info).partition(":")
            if not sep:
                raise ConfigurationError("basic.auth.user.info must be user:password")
            basic_auth = (user, password)
        token = None
        bearer_source = options.get("bearer.auth.credentials.source")
        if bearer_source is not None:
            if str(bearer_source).upper() != "STATIC_TOKEN":
                raise ConfigurationError(
                    f"bearer.auth.credentials.source {bearer_source!r} is not supported; "
                    "STATIC_TOKEN (with bearer.auth.token) is"
                )
            token = options.get("bearer.auth.token")
            if not token:
                raise ConfigurationError("bearer.auth.credentials.source needs bearer.auth.token")
        ttl = options.get("cache.latest.ttl.sec")
        context = None
        if tls_from is not None and not any(name.startswith("ssl.") for name in options):
            context = _producer_tls(tls_from)
        return cls(
            options["url"],
            ssl_context=context,
            basic_auth=basic_auth,
            bearer_token=token,
            ssl_cafile=options.get("ssl.ca.location"),
            ssl_certfile=options.get("ssl.certificate.location"),
            ssl_keyfile=options.get("ssl.key.location"),
            ssl_password=options.get("ssl.key.password"),
            timeout=float(options.get("timeout", 30.0)),
            latest_ttl=None if ttl is None or float(ttl) < 0 else float(ttl),
        )

    # ---- cached answers, without I/O ---------------------------------------------------------

    def cached_id(self, subject: str, schema: Schema, normalize: bool = False) -> int | None:
        """The id of ``schema`` under ``subject`` if this client has learned it."""
        return self._ids.get((subject, schema, normalize))

    def cached_latest(self, subject: str) -> RegisteredSchema | None:
        """The latest version of ``subject`` if known and younger than ``latest_ttl``."""
        latest = self._latest.get(subject)
        if latest is None:
            return None
        ttl = self._settings.latest_ttl
        if ttl is not None and time.monotonic() - latest.fetched_at > ttl:
            return None
        return latest.registered

    # ---- requests --------------------------------------------------------------------------

    async def register(self, subject: str, schema: Schema, normalize: bool = False) -> int:
        """Register ``schema`` under ``subject`` (a no-op when it is there already) and
        return its id.

        Raises:
            SchemaRegistryError: refused (409: incompatible with the subject's versions;
                42201: not a valid schema) or unreachable.
        """
        key = (subject, schema, normalize)
        known = self._ids.get(key)
        if known is not None:
            return known
        answer = await self._request(
            "POST",
            f"/subjects/{_quote(subject)}/versions",
            f"registering a schema under subject {subject!r}",
            body=schema.body(),
            params={"normalize": "true"} if normalize else None,
        )
        schema_id = int(answer["id"])
        self._ids[key] = schema_id
        self._schemas.setdefault(schema_id, schema)
        return schema_id

    async def lookup(
        self, subject: str, schema: Schema, normalize: bool = False
    ) -> RegisteredSchema | None:
        """``schema`` as registered under ``subject`` (its id and its version there, what a
        :class:`SchemaReference` to it names), or None when it is not there. What is found is
        kept: asked again, it costs no request."""
        key = (subject, schema, normalize)
        known = self._found.get(key)
        if known is not None:
            return known
        try:
            answer = await self._request(
                "POST",
                f"/subjects/{_quote(subject)}",
                f"looking up a schema under subject {subject!r}",
                body=schema.body(),
                params={"normalize": "true"} if normalize else None,
            )
        except SchemaRegistryError as exc:
            if exc.registry_error_code in (40401, 40403):
                return None
            raise
        registered = RegisteredSchema(
            int(answer["id"]), subject, int(answer.get("version", -1)), schema
        )
        self._ids[key] = registered.schema_id
        self._found[key] = registered
        self._schemas.setdefault(registered.schema_id, schema)
        return registered

    async def latest_version(self, subject: str) -> RegisteredSchema:
        """The latest version registered under ``subject`` (cached for ``latest_ttl``)."""
        cached = self.cached_latest(subject)
        if cached is not None:
            return cached
        answer = await self._request(
            "GET",
            f"/subjects/{_quote(subject)}/versions/latest",
            f"reading the latest version of subject {subject!r}",
        )
        registered = _registered(answer, subject)
        self._latest[subject] = _Latest(registered, time.monotonic())
        self._schemas.setdefault(registered.schema_id, registered.schema)
        return registered

    async def version(self, subject: str, version: int) -> RegisteredSchema:
        """Version ``version`` of ``subject``."""
        known = self._versions.get((subject, version))
        if known is not None:
            return known
        answer = await self._request(
            "GET",
            f"/subjects/{_quote(subject)}/versions/{version}",
            f"reading version {version} of subject {subject!r}",
        )
        registered = _registered(answer, subject)
        self._versions[(subject, version)] = registered
        return registered

    async def schema_by_id(self, schema_id: int) -> Schema:
        """The schema with id ``schema_id``."""
        known = self._schemas.get(schema_id)
        if known is not None:
            return known
        answer = await self._request(
            "GET", f"/schemas/ids/{schema_id}", f"reading schema {schema_id}"
        )
        schema = _schema_of(answer)
        self._schemas[schema_id] = schema
        return schema

    async def is_compatible(
        self, subject: str, schema: Schema, version: int | str = "latest"
    ) -> bool:
        """Whether ``schema`` may be registered under ``subject`` after ``version``, by the
        subject's compatibility rule."""
        answer = await self._request(
            "POST",
            f"/compatibility/subjects/{_quote(subject)}/versions/{version}",
            f"checking a schema against version {version} of subject {subject!r}",
            body=schema.body(),
        )
        return bool(answer.get("is_compatible"))

    async def set_compatibility(self, subject: str, level: str) -> None:
        """Set ``subject``'s compatibility rule (``BACKWARD``, ``FORWARD``, ``FULL``, their
        ``_TRANSITIVE`` forms, or ``NONE``)."""
        await self._request(
            "PUT",
            f"/config/{_quote(subject)}",
            f"setting the compatibility of subject {subject!r} to {level}",
            body={"compatibility": level},
        )

    async def subjects(self) -> list[str]:
        """Every subject the registry has."""
        answer = await self._request("GET", "/subjects", "listing subjects")
        return [str(s) for s in answer]

    async def close(self) -> None:
        """Close the connection pools (the caches stay)."""
        clients, self._http = self._http, weakref.WeakKeyDictionary()
        for client in list(clients.values()):
            await client.aclose()

    # ---- HTTP ------------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._http.get(loop)
        if client is None:
            try:
                import httpx
            except ImportError as exc:
                raise ConfigurationError(
                    "the Schema Registry client needs httpx: "
                    "pip install 'aioproducer[schema-registry]'"
                ) from exc
            settings = self._settings
            headers = {"Accept": _ACCEPT}
            if settings.token is not None:
                headers["Authorization"] = f"Bearer {settings.token}"
            client = httpx.AsyncClient(
                auth=settings.auth,
                headers=headers,
                verify=settings.verify,
                timeout=settings.timeout,
            )
            self._http[loop] = client
        return client

    async def _request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        import httpx

        client = self._client()
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": _CONTENT_TYPE} if content is not None else None
        last: SchemaRegistryError | None = None
        for url in self._settings.urls:
            self.requests += 1
            try:
                response = await client.request(
                    method, url + path, content=content, headers=headers, params=params
                )
            except httpx.HTTPError as exc:
                reason = str(exc) or (
                    f"no answer within {self._settings.timeout:g} s (the client's timeout)"
                    if isinstance(exc, httpx.TimeoutException)
                    else "no reason given"
                )
                last = SchemaRegistryError(
                    f"{what}: the Schema Registry at {url} could not be reached: "
                    f"{type(exc).__name__}: {reason}",
                    retriable=True,
                )
                continue
            if response.status_code < 300:
                try:
                    return response.json()
                except ValueError as exc:
                    raise SchemaRegistryError(
                        f"{what}: the Schema Registry at {url} answered HTTP "
                        f"{response.status_code} with a body that is not JSON"
                    ) from exc
            error = _http_error(what, url, response.status_code, response.text)
            if response.status_code in _RETRIABLE_STATUS:
                last = error
                continue
            raise error
        assert last is not None
        raise last


def _producer_tls(config: ProducerConfig | Mapping[str, Any]) -> ssl.SSLContext | None:
    """The TLS context of a producer's configuration; None when it uses no TLS."""
    from aioproducer.config import ProducerConfig
    from aioproducer.net.tls import ssl_context_for

    if not isinstance(config, ProducerConfig):
        # Only the TLS side of the options: a SASL_SSL producer's SASL settings are no
        # business of the registry's (and its TLS is SSL's).
        protocol = next(
            (str(v) for k, v in config.items() if k in ("security.protocol", "security_protocol")),
            "PLAINTEXT",
        )
        if not protocol.upper().endswith("SSL"):
            return None
        tls = {k: v for k, v in config.items() if k.startswith(("ssl.", "ssl_"))}
        config = ProducerConfig.from_options({**tls, "security.protocol": "SSL"})
    return ssl_context_for(config)


def _http_error(what: str, url: str, status: int, text: str) -> SchemaRegistryError:
    code: int | None = None
    message = text.strip()[:500]
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        raw_code = parsed.get("error_code")
        code = int(raw_code) if isinstance(raw_code, int) else None
        message = str(parsed.get("message", message))
    detail = f" (error {code})" if code is not None else ""
    error = SchemaRegistryError(
        f"{what}: the Schema Registry at {url} answered HTTP {status}{detail}: {message}",
        retriable=status in _RETRIABLE_STATUS,
    )
    error.http_status = status
    error.registry_error_code = code
    return error


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _without_credentials(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, f"***@{netloc}", parts.path, "", ""))


def _schema_of(answer: Mapping[str, Any]) -> Schema:
    references = tuple(
        SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
        for r in answer.get("references") or ()
    )
    return Schema(str(answer["schema"]), str(answer.get("schemaType", "AVRO")), references)


def _registered(answer: Mapping[str, Any], subject: str) -> RegisteredSchema:
    return RegisteredSchema(
        int(answer["id"]),
        str(answer.get("subject", subject)),
        int(answer["version"]),
        _schema_of(answer),
    )


class InMemorySchemaRegistry(SchemaRegistryClient):
    """A Schema Registry in this process, for tests: what :class:`SchemaRegistryClient`
    asks a registry is answered from memory, with the same caching and the same errors.

    Ids count from 1, shared by every subject (one schema text has one id); each subject
    numbers its versions from 1. Compatibility is never checked: ``is_compatible`` answers
    True and every registration is taken (test schema evolution against a real registry).
    A test helper, not a registry: nothing outlives the object.
    """

    def __init__(self) -> None:
        super().__init__("http://in-memory.invalid")
        self._next_id = 1
        self._by_text: dict[tuple[str, str], int] = {}
        self._texts: dict[int, dict[str, Any]] = {}
        self._subjects: dict[str, list[int]] = {}
        self._config: dict[str, str] = {}

    async def _request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        self.requests += 1
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts == ["subjects"] and method == "GET":
            return sorted(self._subjects)
        if parts[0] == "schemas" and method == "GET":
            found = self._texts.get(int(parts[2]))
            if found is None:
                raise self._missing(what, 40403, f"schema {parts[2]} not found")
            return found
        if parts[0] == "config" and method == "PUT":
            self._config[parts[1]] = str(body["compatibility"])
            return {"compatibility": self._config[parts[1]]}
        if parts[0] == "compatibility":
            return {"is_compatible": True}
        subject = parts[1]
        versions = self._subjects.get(subject, [])
        if len(parts) == 2 and method == "POST":  # lookup
            schema_id = self._by_text.get((body["schema"], body.get("schemaType", "AVRO")))
            if schema_id is None or schema_id not in versions:
                raise self._missing(what, 40403, "schema not found")
            return {
                "id": schema_id,
                "version": versions.index(schema_id) + 1,
                "subject": subject,
                **self._texts[schema_id],
            }
        if len(parts) == 3 and method == "POST":  # register
            key = (body["schema"], body.get("schemaType", "AVRO"))
            schema_id = self._by_text.get(key)
            if schema_id is None:
                schema_id = self._by_text[key] = self._next_id
                self._next_id += 1
                self._texts[schema_id] = dict(body)
            if schema_id not in versions:
                self._subjects.setdefault(subject, []).append(schema_id)
            return {"id": schema_id}
        if len(parts) == 4 and method == "GET":
            if not versions:
                raise self._missing(what, 40401, f"subject {subject!r} not found")
            index = len(versions) if parts[3] == "latest" else int(parts[3])
            if not 1 <= index <= len(versions):
                raise self._missing(what, 40402, f"version {parts[3]} not found")
            schema_id = versions[index - 1]
            return {
                "id": schema_id,
                "version": index,
                "subject": subject,
                **self._texts[schema_id],
            }
        raise SchemaRegistryError(f"{what}: the in-memory registry does not serve {method} {path}")

    @staticmethod
    def _missing(what: str, code: int, message: str) -> SchemaRegistryError:
        error = SchemaRegistryError(
            f"{what}: the in-memory registry answered 404 (error {code}): {message}"
        )
        error.http_status = 404
        error.registry_error_code = code
        return error
