"""``aioproducer topics``: create, describe and delete topics, as ``kafka-topics`` does, over
a producer's connections (:class:`~aioproducer.TopicAdmin`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from aioproducer.admin import NewTopic, TopicAdmin, TopicDescription
from aioproducer.cli.common import (
    _EXIT_DELIVERY,
    _EXIT_OK,
    PROG,
    DeliveryError,
    UsageError,
    _bootstrap_of,
    _check_config,
    _check_topic,
    _close_quietly,
    _describe,
    _make_producer,
    _parse_pairs,
    _producer_props,
    _run,
    _start_failure,
)
from aioproducer.errors import (
    AuthorizationError,
    InvalidTopicError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from aioproducer.producer import Producer

__all__ = ["describe_lines"]


def describe_lines(description: TopicDescription) -> list[str]:
    """A described topic as ``kafka-topics --describe`` prints it: a line for the topic,
    then one per partition (an offline leader is ``none``)."""

    def ids(brokers: Sequence[int]) -> str:
        return ",".join(str(b) for b in brokers)

    topic_id = description.topic_id if description.topic_id is not None else "none"
    lines = [
        f"Topic: {description.name}\tTopicId: {topic_id}\t"
        f"PartitionCount: {description.num_partitions}\t"
        f"ReplicationFactor: {description.replication_factor}"
    ]
    for p in description.partitions:
        leader = "none" if p.leader is None else str(p.leader)
        lines.append(
            f"\tTopic: {description.name}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {ids(p.replicas)}\tIsr: {ids(p.isr)}"
        )
    return lines


def _new_topics(args: argparse.Namespace) -> list[NewTopic]:
    configs = dict(_parse_pairs(args.config, "--config"))
    try:
        return [
            NewTopic(name, args.partitions, args.replication_factor, configs) for name in args.topic
        ]
    except KafkaError as exc:
        raise UsageError(str(exc)) from None


def _cmd_topics(args: argparse.Namespace) -> int:
    # Everything is checked before a broker is reached.
    for name in args.topic:
        _check_topic(name)
    if len(set(args.topic)) != len(args.topic):
        raise UsageError("--topic: a topic is named more than once")
    creating = args.action == "create"
    for option, given in (
        ("--partitions", args.partitions is not None),
        ("--replication-factor", args.replication_factor is not None),
        ("--config", bool(args.config)),
        ("--if-not-exists", args.if_not_exists),
        ("--validate-only", args.validate_only),
    ):
        if given and not creating:
            raise UsageError(f"{option} goes with --create")
    if args.if_not_exists and args.validate_only:
        raise UsageError("--if-not-exists and --validate-only do not go together")
    if args.include_configs and args.action != "describe":
        raise UsageError("--include-configs goes with --describe")
    new_topics = _new_topics(args) if creating else []
    props = _producer_props(args)
    _check_config(props)
    bootstrap = _bootstrap_of(props)
    if bootstrap is None:
        raise UsageError(
            "topics needs a cluster: give --bootstrap-server (or bootstrap.servers in the "
            "producer configs)"
        )
    producer = _make_producer(props, bootstrap)
    lines, failed = _run(lambda: _topics(producer, args, new_topics), not args.no_uvloop)
    for line in lines:
        print(line, flush=True)
    for message in failed:
        print(f"{PROG} topics: error: {message}", flush=True, file=sys.stderr)
    return _EXIT_DELIVERY if failed else _EXIT_OK


async def _topics(
    producer: Producer, args: argparse.Namespace, new_topics: list[NewTopic]
) -> tuple[list[str], list[str]]:
    """What to print, and the topics' errors."""
    try:
        await producer.start()
    except KafkaError as exc:
        raise DeliveryError(_start_failure(producer, exc)) from None
    try:
        return await _act(producer.admin, args, new_topics)
    except KafkaError as exc:  # the whole call failed (a timeout, a refused login)
        raise DeliveryError(_describe(exc)) from None
    finally:
        await _close_quietly(producer, timeout=None)


async def _act(
    admin: TopicAdmin, args: argparse.Namespace, new_topics: list[NewTopic]
) -> tuple[list[str], list[str]]:
    lines: list[str] = []
    failed: list[str] = []
    if args.action == "create" and args.if_not_exists:
        for name, result in (await admin.ensure_topics(new_topics)).items():
            if result.created:
                lines.append(f"Created topic {name}.")
            else:
                lines.append(f"Topic {name} exists already.")
    elif args.action == "create":
        results = await admin.create_topics(
            new_topics, validate_only=args.validate_only, raise_errors=False
        )
        for name, result in results.items():
            if result.error is not None:
                failed.append(f"topic {name}: {_describe(result.error)}")
            elif args.validate_only:
                lines.append(f"Topic {name} can be created (validated only).")
            else:
                lines.append(f"Created topic {name}.")
    elif args.action == "delete":
        for name, error in (await admin.delete_topics(args.topic, raise_errors=False)).items():
            if error is not None:
                failed.append(f"topic {name}: {_describe(error)}")
            else:
                lines.append(f"Deleted topic {name}.")
    else:
        for name in args.topic:
            try:
                found = await admin.describe_topics([name], include_configs=args.include_configs)
            except (UnknownTopicOrPartitionError, AuthorizationError, InvalidTopicError) as exc:
                failed.append(f"topic {name}: {_describe(exc)}")
                continue
            description = found[name]
            lines += describe_lines(description)
            if args.include_configs:
                lines += [
                    f"\t{key}={'(sensitive)' if value is None else value}"
                    for key, value in sorted(description.configs.items())
                ]
    return lines, failed
