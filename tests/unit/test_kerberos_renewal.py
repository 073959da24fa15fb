"""Renewal of a Kerberos ticket cache (GSSAPI without a keytab), as the Java client's
refresh thread does it: when, with which command, what is logged, and one thread per cache.

The cache's remaining lifetime is scripted here and ``kinit`` is a script that records how
it was called; tests/integration/test_kafka_kerberos.py renews a real ticket against an MIT
KDC while a producer writes.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aioproducer.config import ProducerConfig
from aioproducer.errors import ConfigurationError
from aioproducer.net import kerberos
from aioproducer.net.kerberos import RenewalSettings, hold_ticket_renewal, renewal_delay

SETTINGS = RenewalSettings("kinit", 0.8, 0.05, 60.0)


@pytest.fixture(autouse=True)
def _no_gssapi_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the options and the renewal's schedule are checked: gssapi need not be installed.
    monkeypatch.setitem(sys.modules, "gssapi", types.ModuleType("gssapi"))


def _config(**options: object) -> ProducerConfig:
    return ProducerConfig.from_options(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI", **options
    )


# ---- when --------------------------------------------------------------------------------


def test_a_ticket_is_renewed_after_the_window_factor_of_its_lifetime() -> None:
    assert renewal_delay(36000.0, SETTINGS, 0.0) == pytest.approx(28800.0)
    # The jitter adds up to its fraction of the lifetime.
    assert renewal_delay(36000.0, SETTINGS, 0.999) == pytest.approx(36000.0 * 0.84995)


def test_never_sooner_than_the_minimum_interval_unless_the_ticket_expires_first() -> None:
    # 0.8 of 100 s is 80 s: the minimum of 90 s wins, as it leaves the ticket time.
    assert renewal_delay(100.0, SETTINGS._replace(min_interval=90.0), 0.0) == 90.0
    # A ticket that would expire before the minimum interval is renewed at once.
    assert renewal_delay(50.0, SETTINGS, 0.0) == 0.0
    # As is one whose window (factor plus jitter) reaches its expiry.
    assert renewal_delay(100.0, RenewalSettings("kinit", 1.0, 0.05, 0.0), 0.5) == 0.0


# ---- the options -------------------------------------------------------------------------


def test_the_java_renewal_options_are_options_here() -> None:
    config = ProducerConfig.from_options(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "GSSAPI",
            "sasl.kerberos.kinit.cmd": "/opt/krb5/bin/kinit",
            "sasl.kerberos.ticket.renew.window.factor": "0.5",
            "sasl.kerberos.ticket.renew.jitter": "0.1",
            "sasl.kerberos.min.time.before.relogin": "30000",
        }
    )
    assert RenewalSettings.from_config(config) == RenewalSettings(
        "/opt/krb5/bin/kinit", 0.5, 0.1, 30.0
    )
    assert RenewalSettings.from_config(_config()) == RenewalSettings("kinit", 0.8, 0.05, 60.0)


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("sasl_kerberos_ticket_renew_window_factor", 0, "must be a number in (0, 1]"),
        ("sasl_kerberos_ticket_renew_window_factor", 1.5, "must be a number in (0, 1]"),
        ("sasl_kerberos_ticket_renew_window_factor", "soon", "must be a number in (0, 1]"),
        ("sasl_kerberos_ticket_renew_window_factor", True, "must be a number in (0, 1]"),
        ("sasl_kerberos_ticket_renew_jitter", 1.0, "must be a number in [0, 1)"),
        ("sasl_kerberos_ticket_renew_jitter", -0.1, "must be a number in [0, 1)"),
        ("sasl_kerberos_min_time_before_relogin", -1, "must be an integer >= 0"),
        ("sasl_kerberos_kinit_cmd", " ", "must be a non-empty string"),
    ],
)
def test_invalid_renewal_options_are_refused_naming_the_option(
    name: str, value: object, problem: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _config(**{name: value})
    assert str(caught.value).startswith(name), caught.value
    assert problem in str(caught.value)


# ---- the renewal thread ------------------------------------------------------------------


def _kinit(tmp_path: Path, *, fails: str | None = None) -> tuple[Path, Path]:
    """A kinit that appends its arguments to a file (and fails with ``fails`` on stderr)."""
    calls = tmp_path / "calls"
    script = tmp_path / "kinit"
    body = f'echo "$@" >> {calls}\n'
    if fails is not None:
        body += f'echo "{fails}" >&2\nexit 1\n'
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, calls


def _calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _until(condition: Callable[[], bool], patience: float = 20.0) -> None:
    # Only there to turn a hang into a failure; never a measured threshold.
    deadline = time.monotonic() + patience
    while not condition():
        assert time.monotonic() < deadline, "not within the patience"
        time.sleep(0.02)


@pytest.fixture
def lifetimes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float | None]]:
    """The cache's remaining lifetime, as the renewal reads it: the first value until the
    list is changed (the last value is repeated)."""
    values: list[float | None] = [None]

    def lifetime(self: object) -> float | None:
        return values[0] if len(values) == 1 else values.pop(0)

    monkeypatch.setattr(kerberos._CacheRenewal, "lifetime", lifetime)
    yield values
    assert not kerberos._RENEWALS, "a renewal outlived its holders"


def test_the_cache_is_renewed_with_kinit_r_and_the_renewal_is_logged(
    tmp_path: Path, lifetimes: list[float | None], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioproducer.net")
    script, calls = _kinit(tmp_path)
    lifetimes[:] = [1.0, 10.0]  # 0.5 of 1 s: renewed after half a second; 10 s after
    release = hold_ticket_renewal(
        _config(
            sasl_kerberos_ccache="FILE:/tmp/krb5cc_test",
            sasl_kerberos_kinit_cmd=str(script),
            sasl_kerberos_ticket_renew_window_factor=0.5,
            sasl_kerberos_ticket_renew_jitter=0.0,
            sasl_kerberos_min_time_before_relogin=0,
        )
    )
    try:
        _until(lambda: bool(_calls(calls)))
        _until(lambda: any("renewed the Kerberos" in r.getMessage() for r in caplog.records))
    finally:
        release()
    assert _calls(calls) == ["-R -c FILE:/tmp/krb5cc_test"]
    renewed = [r for r in caplog.records if "renewed the Kerberos" in r.getMessage()]
    assert renewed[0].levelno == logging.INFO
    assert renewed[0].getMessage() == (
        "renewed the Kerberos ticket in FILE:/tmp/krb5cc_test; it now expires in 10 s"
    )


def test_a_ticket_that_cannot_be_renewed_is_a_warning_once_with_the_time_left(
    tmp_path: Path, lifetimes: list[float | None], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioproducer.net")
    refusal = "kinit: KDC can't fulfill requested option while renewing credentials"
    script, calls = _kinit(tmp_path, fails=refusal)
    lifetimes[:] = [0.5]  # shorter than any wait: tried at once, then once a second
    release = hold_ticket_renewal(
        _config(
            sasl_kerberos_ccache="FILE:/tmp/krb5cc_test",
            sasl_kerberos_kinit_cmd=str(script),
            sasl_kerberos_min_time_before_relogin=0,
        )
    )
    try:
        # The second refusal is logged once its kinit has returned.
        _until(
            lambda: len([r for r in caplog.records if "could not renew" in r.getMessage()]) >= 2
        )
    finally:
        release()
    assert len(_calls(calls)) >= 2
    said = [r for r in caplog.records if "could not renew" in r.getMessage()]
    assert [r.levelno for r in said[:2]] == [logging.WARNING, logging.DEBUG]
    message = said[0].getMessage()
    assert "FILE:/tmp/krb5cc_test" in message and refusal in message
    assert "it expires in 0 s" in message and "sasl_kerberos_keytab" in message


def test_a_missing_kinit_is_said_and_nothing_else_breaks(
    tmp_path: Path, lifetimes: list[float | None], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aioproducer.net")
    lifetimes[:] = [0.5]
    release = hold_ticket_renewal(
        _config(sasl_kerberos_ccache="FILE:/tmp/x", sasl_kerberos_kinit_cmd=str(tmp_path / "no"))
    )
    try:
        _until(lambda: any("could not run" in r.getMessage() for r in caplog.records))
    finally:
        release()
    said = next(r.getMessage() for r in caplog.records if "could not run" in r.getMessage())
    assert "Check sasl_kerberos_kinit_cmd" in said and "kinit -r" not in said


def test_an_expired_ticket_is_said_once_and_an_empty_cache_left_alone(
    tmp_path: Path, lifetimes: list[float | None], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aioproducer.net")
    script, calls = _kinit(tmp_path)
    # Half a second left: renewed at once; then the cache holds no ticket any more.
    lifetimes[:] = [0.5, None]
    release = hold_ticket_renewal(
        _config(
            sasl_kerberos_ccache="FILE:/tmp/krb5cc_gone",
            sasl_kerberos_kinit_cmd=str(script),
            sasl_kerberos_min_time_before_relogin=0,
        )
    )
    try:
        _until(lambda: any("has expired" in r.getMessage() for r in caplog.records))
        time.sleep(1.5)  # the cache is looked at again each second: nothing more is said
    finally:
        release()
    assert _calls(calls) == ["-R -c FILE:/tmp/krb5cc_gone"]  # an empty cache: no kinit
    expired = [r for r in caplog.records if "has expired" in r.getMessage()]
    assert len(expired) == 1 and expired[0].levelno == logging.WARNING
    assert "FILE:/tmp/krb5cc_gone" in expired[0].getMessage()


def test_tickets_shorter_than_the_minimum_interval_are_said_to_expire_between_renewals(
    tmp_path: Path, lifetimes: list[float | None], caplog: pytest.LogCaptureFixture
) -> None:
    # A 2-s ticket with the default 60-s minimum between renewals: renewed at once, then
    # it would expire before the next renewal may run. That is said once, at WARNING, with
    # the option to change; nothing runs kinit again early.
    caplog.set_level(logging.INFO, logger="aioproducer.net")
    script, calls = _kinit(tmp_path)
    lifetimes[:] = [2.0]
    release = hold_ticket_renewal(
        _config(sasl_kerberos_ccache="FILE:/tmp/krb5cc_short", sasl_kerberos_kinit_cmd=str(script))
    )
    try:
        _until(lambda: any("before it may be" in r.getMessage() for r in caplog.records))
        time.sleep(0.2)
    finally:
        release()
    assert _calls(calls) == ["-R -c FILE:/tmp/krb5cc_short"]
    short = [r for r in caplog.records if "before it may be" in r.getMessage()]
    assert len(short) == 1 and short[0].levelno == logging.WARNING
    assert "sasl_kerberos_min_time_before_relogin is 60000 ms" in short[0].getMessage()


def test_a_ticket_that_is_not_renewed_near_its_expiry_is_no_advice_about_the_option(
    tmp_path: Path, lifetimes: list[float | None], caplog: pytest.LogCaptureFixture
) -> None:
    # A long ticket whose renewals fail comes close to its expiry with attempts ever closer
    # together: the minimum interval is not what to change, and is not named.
    caplog.set_level(logging.INFO, logger="aioproducer.net")
    script, calls = _kinit(tmp_path, fails="kinit: Ticket expired while renewing credentials")
    lifetimes[:] = [0.5]
    release = hold_ticket_renewal(
        _config(sasl_kerberos_ccache="FILE:/tmp/krb5cc_long", sasl_kerberos_kinit_cmd=str(script))
    )
    try:
        _until(lambda: bool(_calls(calls)))
        time.sleep(1.2)
    finally:
        release()
    assert not [r for r in caplog.records if "before it may be" in r.getMessage()]
    assert [r for r in caplog.records if "could not renew" in r.getMessage()]


def test_a_hold_let_go_by_the_collector_stops_the_renewal(
    tmp_path: Path, lifetimes: list[float | None]
) -> None:
    # A producer dropped without close(): its hold goes with it, and the thread stops.
    import gc

    script, _ = _kinit(tmp_path)
    hold = hold_ticket_renewal(
        _config(sasl_kerberos_ccache="FILE:/tmp/dropped", sasl_kerberos_kinit_cmd=str(script))
    )
    renewal = next(iter(kerberos._RENEWALS.values()))
    del hold
    gc.collect()
    assert renewal.stop.is_set() and not kerberos._RENEWALS


def test_producers_sharing_a_cache_share_one_renewal(
    tmp_path: Path, lifetimes: list[float | None]
) -> None:
    script, _ = _kinit(tmp_path)
    config = _config(sasl_kerberos_ccache="FILE:/tmp/shared", sasl_kerberos_kinit_cmd=str(script))
    other = _config(sasl_kerberos_ccache="FILE:/tmp/other", sasl_kerberos_kinit_cmd=str(script))
    first, second, third = (
        hold_ticket_renewal(config),
        hold_ticket_renewal(config),
        hold_ticket_renewal(other),
    )
    assert sorted(r.holders for r in kerberos._RENEWALS.values()) == [1, 2]
    shared = kerberos._RENEWALS[("FILE:/tmp/shared", RenewalSettings.from_config(config))]
    first()
    first()  # releasing twice counts once
    assert shared.holders == 1 and not shared.stop.is_set()
    second()
    assert shared.stop.is_set()
    third()
    assert not kerberos._RENEWALS


def test_without_a_cache_option_the_one_krb5ccname_names_is_renewed(
    tmp_path: Path, lifetimes: list[float | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    script, calls = _kinit(tmp_path)
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'cc'}")
    lifetimes[:] = [0.5]
    release = hold_ticket_renewal(_config(sasl_kerberos_kinit_cmd=str(script)))
    try:
        _until(lambda: bool(_calls(calls)))
    finally:
        release()
    assert _calls(calls)[0] == f"-R -c FILE:{tmp_path / 'cc'}"
    assert os.environ["KRB5CCNAME"] == f"FILE:{tmp_path / 'cc'}"
