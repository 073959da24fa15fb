"""The ``aioproducer`` command: produce lines of text, measure throughput, run the demo,
create, describe and delete topics.

Every subcommand talks to the cluster named by ``--bootstrap-servers`` (or
``bootstrap.servers`` in ``--producer-props`` / ``--producer.config``). When none is given,
``produce``, ``perf`` and ``demo`` start a throwaway Tansu broker
(:class:`aioproducer.embedded.EmbeddedBroker`), create the topic on it, and stop the broker
on exit, so they work on a fresh machine; ``topics`` needs a cluster.

Exit codes: 0 on success, 1 when a record was not delivered (or the broker could not be
reached), 2 for usage errors, 130 on Ctrl+C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Sequence

from aioproducer.cli.common import (
    _EXIT_BROKEN_PIPE,
    _EXIT_DELIVERY,
    _EXIT_INTERRUPTED,
    _EXIT_USAGE,
    PROG,
    DeliveryError,
    UsageError,
    _describe,
)
from aioproducer.cli.parser import build_parser, version_text
from aioproducer.cli.perf import PerfStats
from aioproducer.cli.verify import count_records
from aioproducer.errors import KafkaError

__all__ = [
    "DeliveryError",
    "PerfStats",
    "UsageError",
    "build_parser",
    "count_records",
    "main",
    "version_text",
]

# ---- entry point ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``aioproducer`` command; return its exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else _EXIT_USAGE
    command = f"{PROG} {args.command}"

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    # SIGTERM becomes SystemExit so that `finally` blocks stop the embedded broker.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, terminate)
    try:
        code: int = args.handler(args)
        return code
    except UsageError as exc:
        print(f"{command}: error: {exc}", file=sys.stderr)
        return _EXIT_USAGE
    except DeliveryError as exc:
        print(f"{command}: error: {exc}", file=sys.stderr)
        return _EXIT_DELIVERY
    except KafkaError as exc:
        print(f"{command}: error: {_describe(exc)}", file=sys.stderr)
        return _EXIT_DELIVERY
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return _EXIT_INTERRUPTED
    except BrokenPipeError:
        # Whatever read the output went away (`| head`): stop quietly, as Unix tools do.
        _discard_stdout()
        return _EXIT_BROKEN_PIPE
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        with contextlib.suppress(Exception):
            sys.stdout.flush()


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit raises no second error."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
