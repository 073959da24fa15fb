"""Benchmarks for aioproducer: a side-by-side harness against other Python Kafka producers.

``python -m bench.harness`` runs every client in its own process against the same broker,
in interleaved rounds, and writes ``bench/results/*.json``; ``python -m bench.chart`` turns
those into a PNG chart and a markdown table. ``bench/micro/`` holds micro-benchmarks of
aioproducer's hot functions. See ``bench/README.md``.
"""
