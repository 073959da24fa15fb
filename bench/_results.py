"""Where the stand-alone benchmarks (``bench.offload``, ``bench.memory``) write their results."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def save(kind: str, rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``bench/results/<UTC time>-<kind>.json`` with the command line and ``rows``."""
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{stamp}-{kind}.json"
    path.write_text(json.dumps({"command": " ".join(sys.argv), "rows": list(rows)}, indent=1))
    print(f"wrote {path}")
    return path
