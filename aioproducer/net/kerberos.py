"""SASL GSSAPI: Kerberos V5 authentication (RFC 4752), as Kafka's GSSAPI listeners speak it.

Through the ``gssapi`` package (``pip install 'aioproducer[kerberos]'``), a binding of the
system's MIT Kerberos library; nothing here speaks Kerberos itself.

Credentials come from a keytab (``sasl_kerberos_keytab`` with ``sasl_kerberos_principal``,
the Java JAAS line's ``useKeyTab=true keyTab=... principal=...``) or from a ticket cache
(``sasl_kerberos_ccache``, ``useTicketCache=true ticketCache=...``; by default the cache
``KRB5CCNAME`` names, as ``kinit`` fills it). With a keytab the library gets a new ticket
whenever the one it holds has expired, kept in a memory cache of this process: a producer
that runs for weeks keeps authenticating (each new connection, and each KIP-368
re-authentication, asks for a service ticket with the current one). A ticket cache is
renewed while a producer that uses it is open, as the Java client does: ``kinit -R`` runs
once ``sasl_kerberos_ticket_renew_window_factor`` of the ticket's lifetime has passed (plus
up to ``sasl_kerberos_ticket_renew_jitter`` of it at random), and never twice within
``sasl_kerberos_min_time_before_relogin`` (:func:`hold_ticket_renewal`). A ticket that
cannot be renewed (not renewable, or past its renewable life) is said so at WARNING, with
the time it has left; a cache refilled from outside (``kinit``, ``k5start``) is picked up.

The service principal is ``<sasl_kerberos_service_name>/<host>``: the broker's host name
as the producer was given it (in ``bootstrap_servers``, or as the brokers advertise
themselves), or ``sasl_kerberos_domain_name`` when set. The Kerberos library may
canonicalize that name through DNS first (``dns_canonicalize_hostname`` and ``rdns`` in
``krb5.conf``), as it does for every other program on the machine.

The exchange: the client's first token (an AP-REQ, asking for mutual authentication), the
broker's AP-REP, then the security-layer negotiation of RFC 4752 section 3.1: the broker
offers layers in a wrapped 4-byte message, the client picks "no security layer" (Kafka
protects the connection with TLS when it needs to) and names itself as the authorization id.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import os
import random
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from aioproducer.errors import AuthenticationError, ConfigurationError, KafkaConnectionError
from aioproducer.net.sasl import SaslMechanism

if TYPE_CHECKING:
    from aioproducer.config import ProducerConfig

__all__ = [
    "GssapiMechanism",
    "KdcUnreachableError",
    "RenewalHold",
    "RenewalSettings",
    "create_gssapi_mechanism",
    "hold_ticket_renewal",
    "renewal_delay",
]

log = logging.getLogger("aioproducer.net")


class KdcUnreachableError(KafkaConnectionError):
    """The Kerberos KDC could not be reached or found (retriable): the broker was."""


# RFC 4752 section 3.1: the security layer bit for "no security layer".
_NO_SECURITY_LAYER: Final = 0x01

# MIT krb5's minor codes for a KDC that could not be reached or found (worth retrying), as
# opposed to a refusal (a wrong keytab, an unknown principal): KRB5_KDC_UNREACH,
# KRB5_REALM_CANT_RESOLVE, KRB5KDC_ERR_SVC_UNAVAILABLE, KRB5_REALM_UNKNOWN.
# (Compared as unsigned 32-bit numbers, as the library may report them either way.)
_UNREACHABLE_CODES: Final = frozenset(
    code & 0xFFFFFFFF for code in (-1765328228, -1765328164, -1765328355, -1765328230)
)
# And words of such messages, for a library that reports other codes.
_UNREACHABLE: Final = (
    "cannot contact any kdc",
    "cannot find kdc",
    "cannot resolve network address for kdc",
    "service is not available",
    "timed out",
)

# The calls that may ask the KDC block: they run on threads of their own, never more than
# two at once, so that a KDC that does not answer cannot take the event loop's default
# executor (which resolves the brokers' host names) with it.
_EXECUTOR: Final = ThreadPoolExecutor(max_workers=2, thread_name_prefix="aioproducer-kerberos")

_INSTALL_HINT: Final = (
    "install the gssapi package (pip install 'aioproducer[kerberos]'), which builds against "
    "the MIT Kerberos libraries (Debian: libkrb5-dev; Red Hat: krb5-devel)"
)


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigurationError(f"sasl_mechanism GSSAPI needs Kerberos: {_INSTALL_HINT}") from exc
    return gssapi


class _State(enum.Enum):
    ESTABLISHING = "establishing"
    LAYERS = "layers"
    FINAL = "final"


class GssapiMechanism(SaslMechanism):
    """SASL GSSAPI over an initiating ``gssapi.SecurityContext`` whose first token was
    made already (:func:`create_gssapi_mechanism` does that off the event loop: it may ask
    the KDC for a service ticket)."""

    name = "GSSAPI"

    def __init__(self, context: Any, first_token: bytes, authorization_id: str) -> None:
        super().__init__()
        self._context = context
        self._first_token = first_token
        self._authorization_id = authorization_id
        self._state = _State.ESTABLISHING

    def _initial_response(self) -> bytes:
        return self._first_token

    def _respond(self, challenge: bytes) -> bytes | None:
        gssapi = _gssapi()
        try:
            if self._state is _State.ESTABLISHING and not self._context.complete:
                token = self._context.step(challenge)
                if self._context.complete:
                    self._state = _State.LAYERS
                # An empty answer asks the broker for its security layers.
                return bytes(token) if token else b""
            if self._state in (_State.ESTABLISHING, _State.LAYERS):
                return self._choose_layer(challenge)
        except gssapi.exceptions.GSSError as exc:
            raise self._fail(
                f"the broker's Kerberos answer was refused: {_gss_text(exc)}"
            ) from None
        # The broker's answer to the layer choice: the exchange is complete.
        self._complete = True
        return None

    def _choose_layer(self, challenge: bytes) -> bytes:
        offer = bytes(self._context.unwrap(challenge).message)
        if len(offer) != 4:
            raise self._fail(f"the broker's security layer offer has {len(offer)} bytes, not 4")
        if not offer[0] & _NO_SECURITY_LAYER:
            raise self._fail(
                "the broker requires a SASL security layer (integrity or confidentiality); "
                "Kafka brokers offer none: use SASL_SSL for an encrypted connection"
            )
        # No security layer, so no maximum message size: 0.
        choice = bytes([_NO_SECURITY_LAYER, 0, 0, 0]) + self._authorization_id.encode()
        self._state = _State.FINAL
        return bytes(self._context.wrap(choice, False).message)


def _gss_text(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _memory_cache(principal: str, keytab: str) -> str:
    """A memory credential cache per (principal, keytab) in this process: the connections
    of every producer with those credentials share the tickets got from the keytab."""
    digest = hashlib.sha256(f"{principal}\0{os.path.abspath(keytab)}".encode()).hexdigest()
    return f"MEMORY:aioproducer-{digest[:16]}"


def _first_step(
    service_name: str,
    host: str,
    principal: str | None,
    keytab: str | None,
    ccache: str | None,
) -> tuple[Any, bytes, str]:
    """Acquire the credentials and make the first token (blocking: it may ask the KDC)."""
    gssapi = _gssapi()
    name = (
        gssapi.Name(principal, gssapi.NameType.kerberos_principal)
        if principal is not None
        else None
    )
    store: dict[str, str] = {}
    if keytab is not None:
        assert principal is not None
        store["client_keytab"] = keytab
        store["ccache"] = ccache or _memory_cache(principal, keytab)
    elif ccache is not None:
        store["ccache"] = ccache
    kerberos = gssapi.MechType.kerberos
    credentials = gssapi.Credentials(
        name=name, usage="initiate", mechs=[kerberos], store=store or None
    )
    target = gssapi.Name(f"{service_name}@{host}", gssapi.NameType.hostbased_service)
    context = gssapi.SecurityContext(
        name=target,
        creds=credentials,
        usage="initiate",
        mech=kerberos,
        flags=gssapi.RequirementFlag.mutual_authentication,
    )
    token = context.step()
    return context, bytes(token or b""), str(credentials.name)


async def create_gssapi_mechanism(
    *,
    service_name: str,
    host: str,
    principal: str | None,
    keytab: str | None,
    ccache: str | None,
) -> GssapiMechanism:
    """A GSSAPI mechanism for one exchange with the broker at ``host``: credentials from
    the keytab or the ticket cache, and the first token, made on a worker thread.

    Raises:
        ConfigurationError: the gssapi package is missing.
        AuthenticationError: no credentials (a keytab without the principal's key, an
            unknown principal, an expired ticket cache) or no service ticket for
            ``<service_name>/<host>``; the message says what to check, never a secret.
        KdcUnreachableError: the KDC could not be reached (a retriable
            :class:`~aioproducer.errors.KafkaConnectionError`).
    """
    gssapi = _gssapi()
    source = (
        f"keytab {keytab}" if keytab is not None else f"ticket cache {ccache or '(KRB5CCNAME)'}"
    )
    who = principal or "the cache's default principal"
    loop = asyncio.get_running_loop()
    try:
        context, token, authorization_id = await loop.run_in_executor(
            _EXECUTOR, _first_step, service_name, host, principal, keytab, ccache
        )
    except gssapi.exceptions.GSSError as exc:
        text = _gss_text(exc)
        code = getattr(exc, "min_code", None)
        known = isinstance(code, int) and (code & 0xFFFFFFFF) in _UNREACHABLE_CODES
        if known or any(word in text.lower() for word in _UNREACHABLE):
            raise KdcUnreachableError(
                f"SASL GSSAPI: the Kerberos KDC could not be reached for {who}: {text}"
            ) from None
        if "server" in text.lower() and "not found in kerberos database" in text.lower():
            # Logged in, but the KDC knows no such service principal.
            raise AuthenticationError(
                f"SASL GSSAPI: the Kerberos KDC knows no service principal "
                f"{service_name}/{host} ({text}). Check sasl_kerberos_service_name (the "
                "brokers' sasl.kerberos.service.name) and the host name the broker is reached "
                "by, which its service principal names (or sasl_kerberos_domain_name)"
            ) from None
        check = (
            f"Check the principal and the keytab (klist -k {keytab} lists the principals "
            "whose keys it holds; the KDC must know the principal)"
            if keytab is not None
            else "Check the principal and the ticket cache (klist shows what it holds and "
            "until when; kinit fills it)"
        )
        raise AuthenticationError(
            f"SASL GSSAPI: could not log in to Kerberos as {who} ({source}) for service "
            f"{service_name}/{host}: {text}. {check}"
        ) from None
    return GssapiMechanism(context, token, authorization_id)


# ---- ticket cache renewal -----------------------------------------------------------------


class RenewalSettings(NamedTuple):
    """How a ticket cache is renewed (the ``sasl_kerberos_*`` renewal options)."""

    kinit_cmd: str
    window_factor: float
    jitter: float
    min_interval: float
    """Seconds: the shortest wait between two renewal attempts."""

    @classmethod
    def from_config(cls, config: ProducerConfig) -> RenewalSettings:
        return cls(
            config.sasl_kerberos_kinit_cmd,
            config.sasl_kerberos_ticket_renew_window_factor,
            config.sasl_kerberos_ticket_renew_jitter,
            config.sasl_kerberos_min_time_before_relogin / 1000.0,
        )


# Never two renewal attempts closer than this, whatever min_interval says.
_LEAST_INTERVAL: Final = 1.0


def renewal_delay(lifetime: float, settings: RenewalSettings, draw: float) -> float:
    """Seconds from now until a ticket with ``lifetime`` seconds left is renewed.

    ``window_factor`` of the lifetime, plus ``jitter`` times ``draw`` (in [0, 1)) of it, as
    the Java client's refresh thread waits; at least ``min_interval``, unless the ticket
    would expire first: then at once (0).
    """
    wait = lifetime * (settings.window_factor + settings.jitter * draw)
    if wait >= lifetime or settings.min_interval >= lifetime:
        return 0.0
    return max(wait, settings.min_interval)


class _CacheRenewal:
    """The thread that renews one ticket cache for the producers of this process."""

    def __init__(self, ccache: str | None, settings: RenewalSettings) -> None:
        self.ccache = ccache
        self.settings = settings
        self.holders = 0
        self.stop = threading.Event()
        self.shown = ccache or os.environ.get("KRB5CCNAME") or "the default ticket cache"
        self._warned: str | None = None
        # The lifetime a renewal that succeeded gave the ticket last (None: none yet).
        self.renewed_lifetime: float | None = None
        self._thread = threading.Thread(
            target=self._run, name="aioproducer-kerberos-renewal", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def lifetime(self) -> float | None:
        """Seconds the cache's ticket has left; None without a usable ticket."""
        try:
            gssapi = _gssapi()
            store = {"ccache": self.ccache} if self.ccache is not None else None
            credentials = gssapi.Credentials(
                usage="initiate", mechs=[gssapi.MechType.kerberos], store=store
            )
            left = credentials.lifetime
        except Exception as exc:  # no cache, an expired ticket, no gssapi: nothing to renew
            log.debug("no ticket to renew in %s: %s", self.shown, _gss_text(exc))
            return None
        return float(left) if left else None

    def renew(self, lifetime: float) -> None:
        """Run ``kinit -R`` on the cache; say what came of it."""
        command = [self.settings.kinit_cmd, "-R"]
        if self.ccache is not None:
            command += ["-c", self.ccache]
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=60.0, check=False
            )
            failure = (
                (
                    " ".join((result.stderr or result.stdout).split())
                    or f"exit code {result.returncode}"
                )
                if result.returncode
                else None
            )
        except (OSError, subprocess.SubprocessError) as exc:
            level = logging.DEBUG if str(exc) == self._warned else logging.WARNING
            self._warned = str(exc)
            log.log(
                level,
                "could not run %s to renew the Kerberos ticket in %s (%s); it expires in "
                "%.0f s. Check sasl_kerberos_kinit_cmd (sasl.kerberos.kinit.cmd)",
                self.settings.kinit_cmd,
                self.shown,
                exc,
                lifetime,
            )
            return
        if failure is None:
            self._warned = None
            after = self.lifetime()
            self.renewed_lifetime = after
            log.info(
                "renewed the Kerberos ticket in %s; it now expires in %s",
                self.shown,
                "an unknown time" if after is None else f"{after:.0f} s",
            )
            return
        level = logging.DEBUG if failure == self._warned else logging.WARNING
        self._warned = failure
        log.log(
            level,
            "could not renew the Kerberos ticket in %s (%s -R: %s); it expires in %.0f s, "
            "after which new connections and re-authentications fail. Ask for renewable "
            "tickets (kinit -r), refill the cache, or give a keytab (sasl_kerberos_keytab)",
            self.shown,
            self.settings.kinit_cmd,
            failure,
            lifetime,
        )

    def _run(self) -> None:
        least = max(self.settings.min_interval, _LEAST_INTERVAL)
        last_attempt = -least
        had_ticket = False
        warned_short = False
        while True:
            lifetime = self.lifetime()
            now = time.monotonic()
            renew = lifetime is not None
            if lifetime is None:
                if had_ticket:
                    log.warning(
                        "the Kerberos ticket in %s has expired: new connections and "
                        "re-authentications fail until the cache is filled again (kinit)",
                        self.shown,
                    )
                had_ticket = False
                delay = least  # look again: the cache may be filled from outside
            else:
                had_ticket = True
                delay = renewal_delay(lifetime, self.settings, random.random())
                earliest = last_attempt + least - now
                if delay < earliest and earliest >= lifetime:
                    # Tried too recently to try again before it expires: look again when it
                    # has expired. When even a renewed ticket lives less than the shortest
                    # wait between renewals, the option is what to change: say so once.
                    # (A ticket that could not be renewed was said so by renew().)
                    renewed = self.renewed_lifetime
                    if (
                        not warned_short
                        and renewed is not None
                        and renewed < self.settings.min_interval
                    ):
                        warned_short = True
                        log.warning(
                            "the Kerberos ticket in %s expires in %.0f s, before it may be "
                            "renewed again (sasl_kerberos_min_time_before_relogin is %d ms): "
                            "lower that option below the tickets' lifetime",
                            self.shown,
                            lifetime,
                            round(self.settings.min_interval * 1000),
                        )
                    delay, renew = lifetime + 0.5, False
                else:
                    delay = max(delay, earliest)
            if self.stop.wait(delay):
                return
            if renew and lifetime is not None:
                last_attempt = time.monotonic()
                self.renew(max(0.0, lifetime - (last_attempt - now)))


_RENEWALS: dict[tuple[str | None, RenewalSettings], _CacheRenewal] = {}
_RENEWALS_LOCK = threading.Lock()


def _forget_renewals_in_child() -> None:
    # A forked process (a PySpark worker) has none of its parent's threads.
    global _RENEWALS_LOCK
    _RENEWALS.clear()
    _RENEWALS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_renewals_in_child)


class RenewalHold:
    """One holder's hold on a ticket cache's renewal (:func:`hold_ticket_renewal`):
    :meth:`release` (or calling it) lets go, once; so does its garbage collection, for a
    producer dropped without being closed."""

    __slots__ = ("__weakref__", "_finalizer")

    def __init__(self, release: Callable[[], None]) -> None:
        self._finalizer = weakref.finalize(self, release)

    def release(self) -> None:
        """Let go of the renewal (the thread stops when the last holder lets go)."""
        self._finalizer()

    def __call__(self) -> None:
        self.release()


def hold_ticket_renewal(config: ProducerConfig) -> RenewalHold:
    """Keep the ticket cache of ``config`` (``sasl_kerberos_ccache``, else the one
    ``KRB5CCNAME`` names, else the default) renewed until the returned hold is released.

    One thread per cache and settings in the process, however many producers hold it; it
    stops when the last one lets go.
    """
    settings = RenewalSettings.from_config(config)
    ccache = config.sasl_kerberos_ccache or os.environ.get("KRB5CCNAME") or None
    key = (ccache, settings)
    with _RENEWALS_LOCK:
        renewal = _RENEWALS.get(key)
        if renewal is None:
            renewal = _RENEWALS[key] = _CacheRenewal(ccache, settings)
            renewal.start()
        renewal.holders += 1

    def release() -> None:
        with _RENEWALS_LOCK:
            renewal.holders -= 1
            if renewal.holders == 0 and _RENEWALS.get(key) is renewal:
                del _RENEWALS[key]
                renewal.stop.set()

    return RenewalHold(release)
