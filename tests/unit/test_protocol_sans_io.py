"""The protocol package is sans-I/O: none of its modules imports asyncio, nor deals with the
cyclic garbage collector (aioproducer._core.gc)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import aioproducer.protocol


def test_no_protocol_module_imports_asyncio() -> None:
    package_dir = Path(aioproducer.protocol.__file__).parent
    modules = [
        f"aioproducer.protocol.{info.name}" for info in pkgutil.iter_modules([str(package_dir)])
    ]
    assert "aioproducer.protocol.messages" in modules
    assert "aioproducer.protocol.session" in modules  # the connection's state, without its I/O
    # The parent package is stubbed so that only the protocol modules (and what they import)
    # are loaded, whatever aioproducer/__init__.py pulls in.
    script = (
        "import importlib, sys, types\n"
        f"root = types.ModuleType('aioproducer'); root.__path__ = [{str(package_dir.parent)!r}]\n"
        "sys.modules['aioproducer'] = root\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m in ('asyncio', 'aioproducer._core.gc') or m.startswith('asyncio.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
