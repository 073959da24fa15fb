"""The C helpers, internal: CRC-32C combination (``crcutil``), record futures out of the
cyclic GC (``gcutil``) and socket writes on a native thread (``sockwriter``).

Each is built beside the compiled modules where a C compiler is at hand, and each has a
pure-Python fallback in the module that imports it; the ``.pyi`` files type them.
"""
