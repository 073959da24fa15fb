"""Micro-benchmarks of aioproducer's hot functions, printing nanoseconds per operation.

``python -m bench.micro`` runs them all; ``python -m bench.micro.record_batch`` (or
``crc``, ``produce_request``, ``send_path``) runs one file. Each measurement is the best of
several ``timeit`` repeats, so it shows what the code costs on an idle core, not under
load. They are written against the code as it is: a benchmark whose target moved or
changed its signature reports "skipped" with the reason instead of failing the others.
"""
