"""One module per producer under test; each runs as ``python -m bench.runners.<client>``,
produces records as its spec says, and prints one JSON line (see ``_common``)."""
