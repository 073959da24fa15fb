"""``python -m aioproducer``: the ``aioproducer`` command."""

from __future__ import annotations

from aioproducer.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
