"""A throwaway MIT Kerberos realm for the tests: a KDC (Debian's ``krb5-kdc``) on a free
loopback port, its database in a temporary folder, principals and keytabs made on demand.

    with KerberosRealm(tmp_path) as realm:
        keytab = realm.add_principal("kafka/localhost")      # a service, with its keytab
        client = realm.add_principal("alice")                  # a user, with hers
        os.environ["KRB5_CONFIG"] = str(realm.krb5_conf)       # for the C library
        # Java: -Djava.security.krb5.conf=<realm.krb5_conf>

Nothing outside the folder is touched: the KDC reads its own ``kdc.conf`` through
``KRB5_KDC_PROFILE`` and every client ``krb5.conf`` through ``KRB5_CONFIG``. The realm's
``krb5.conf`` turns off DNS lookups and host name canonicalization, so a service principal
is built from the host name exactly as the client was given it (``kafka/localhost``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

REALM = "AIOPRODUCER.TEST"
#: The Debian packages the realm needs (``.ci/run`` installs them).
PACKAGES = ("krb5-kdc", "krb5-admin-server", "krb5-user", "libkrb5-dev")


class KdcUnavailableError(RuntimeError):
    """The MIT KDC programs are not installed here."""


def kdc_available() -> str | None:
    """None when the KDC programs are installed; else what is missing."""
    missing = [
        program
        for program in ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")
        if shutil.which(program) is None and not Path("/usr/sbin", program).exists()
    ]
    if missing:
        return (
            f"the MIT Kerberos programs {', '.join(missing)} are missing: install the Debian "
            f"packages {' '.join(PACKAGES)}"
        )
    return None


def _program(name: str) -> str:
    found = shutil.which(name)
    if found is not None:
        return found
    candidate = Path("/usr/sbin", name)
    if candidate.exists():
        return str(candidate)
    raise KdcUnavailableError(kdc_available() or f"{name} not found")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class KerberosRealm:
    """An MIT KDC for realm :data:`REALM` in ``directory`` (a new temporary folder when
    None), started on entering and stopped on leaving.

    Args:
        ticket_lifetime: the longest ticket the KDC issues (``max_life``), e.g. ``"1h"`` or
            ``"20s"``: short lifetimes show ticket renewal in a test.
    """

    def __init__(self, directory: Path | None = None, *, ticket_lifetime: str = "1h") -> None:
        self._temporary = directory is None
        self.directory = (
            Path(tempfile.mkdtemp(prefix="aioproducer-kdc-")) if directory is None else directory
        )
        self.realm = REALM
        self.port = 0
        self._ticket_lifetime = ticket_lifetime
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def krb5_conf(self) -> Path:
        """The clients' ``krb5.conf`` (``KRB5_CONFIG``, ``java.security.krb5.conf``)."""
        return self.directory / "krb5.conf"

    @property
    def log_path(self) -> Path:
        return self.directory / "kdc.log"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KRB5_CONFIG"] = str(self.krb5_conf)
        env["KRB5_KDC_PROFILE"] = str(self.directory / "kdc.conf")
        return env

    def start(self) -> KerberosRealm:
        reason = kdc_available()
        if reason is not None:
            raise KdcUnavailableError(reason)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        data = self.directory / "db"
        data.mkdir(exist_ok=True)
        (self.directory / "kdc.conf").write_text(
            "[kdcdefaults]\n"
            f" kdc_ports = {self.port}\n"
            f" kdc_tcp_ports = {self.port}\n"
            "[realms]\n"
            f" {REALM} = {{\n"
            f"  database_name = {data / 'principal'}\n"
            f"  key_stash_file = {data / 'stash'}\n"
            f"  acl_file = {data / 'kadm5.acl'}\n"
            f"  max_life = {self._ticket_lifetime}\n"
            "  max_renewable_life = 1d\n"
            "  supported_enctypes = aes256-cts-hmac-sha1-96:normal "
            "aes128-cts-hmac-sha1-96:normal\n"
            " }\n"
            "[logging]\n"
            f" kdc = FILE:{self.log_path}\n"
        )
        (data / "kadm5.acl").write_text("")
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f" default_realm = {REALM}\n"
            " dns_lookup_kdc = false\n"
            " dns_lookup_realm = false\n"
            " dns_canonicalize_hostname = false\n"
            " rdns = false\n"
            " udp_preference_limit = 1\n"
            " ignore_acceptor_hostname = false\n"
            "[realms]\n"
            f" {REALM} = {{\n"
            f"  kdc = 127.0.0.1:{self.port}\n"
            " }\n"
            "[domain_realm]\n"
            f" localhost = {REALM}\n"
            f" 127.0.0.1 = {REALM}\n"
        )
        subprocess.run(
            [_program("kdb5_util"), "-r", REALM, "create", "-s", "-P", "throwaway-master-key"],
            env=self._env(),
            check=True,
            capture_output=True,
            timeout=60,
        )
        log = open(self.directory / "krb5kdc.out", "wb")  # noqa: SIM115 (the KDC holds it)
        self._process = subprocess.Popen(
            [_program("krb5kdc"), "-n", "-r", REALM],
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 30.0
        while True:
            if self._process.poll() is not None:
                raise KdcUnavailableError(
                    f"krb5kdc exited with code {self._process.returncode}: "
                    f"{(self.directory / 'krb5kdc.out').read_text()[-2000:]}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise KdcUnavailableError("krb5kdc did not listen within 30 s") from None
                time.sleep(0.1)

    def kadmin(self, query: str) -> str:
        """Run one ``kadmin.local`` command on the realm's database; its output."""
        result = subprocess.run(
            [_program("kadmin.local"), "-r", REALM, "-q", query],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0 or "error" in result.stderr.lower():
            raise RuntimeError(f"kadmin.local -q {query!r} failed: {result.stderr}{result.stdout}")
        return result.stdout

    def add_principal(self, name: str, *, keytab: bool = True) -> Path:
        """Create ``name@REALM`` with a random key, and export it into ``<name>.keytab``
        (``/`` becomes ``_``); returns that keytab's path."""
        self.kadmin(f"addprinc -randkey {name}@{REALM}")
        path = self.directory / (name.replace("/", "_") + ".keytab")
        if keytab:
            self.kadmin(f"ktadd -k {path} {name}@{REALM}")
        return path

    def principal(self, name: str) -> str:
        """``name@REALM``."""
        return f"{name}@{REALM}"

    def kinit(
        self,
        name: str,
        keytab: Path,
        cache: Path,
        *,
        lifetime: str | None = None,
        renewable: str | None = None,
    ) -> None:
        """Get ``name``'s ticket from ``keytab`` into the credential cache ``cache``; with
        ``lifetime`` (``kinit -l``) and ``renewable`` (``kinit -r``, a renewable ticket)."""
        options = [
            *(["-l", lifetime] if lifetime else []),
            *(["-r", renewable] if renewable else []),
        ]
        subprocess.run(
            [
                _program("kinit"),
                *options,
                "-k",
                "-t",
                str(keytab),
                "-c",
                f"FILE:{cache}",
                self.principal(name),
            ],
            env=self._env(),
            check=True,
            capture_output=True,
            timeout=60,
        )

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._temporary:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> KerberosRealm:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
