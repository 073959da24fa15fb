"""Release tooling: building and checking the distributions (``python -m tools.wheel``)."""
