from collections.abc import Iterator
from typing import Any

# A column: (validity bitmap or None, offsets, data or None, the array's offset into them,
# whether the offsets are 64-bit); the buffers are anything with the buffer protocol.
_Column = tuple[Any, Any, Any, int, bool]

class BinaryPairs:
    def __new__(cls, length: int, keys: _Column | None, values: _Column, /) -> BinaryPairs: ...
    def keyless(self) -> bool: ...
    def value_bytes(self, start: int, stop: int, /) -> int: ...
    def __len__(self) -> int: ...
    def __getitem__(self, row: int, /) -> tuple[bytes | None, bytes | None]: ...
    def __iter__(self) -> Iterator[tuple[bytes | None, bytes | None]]: ...
    def murmur2(self, row: int, /) -> int | None: ...
    def group(
        self, start: int, size: int, count: int, partition: int, /
    ) -> tuple[dict[int, list[int]], int, int]: ...
    def encode(
        self,
        head: bytes,
        count: int,
        base: int,
        places: list[int] | None,
        start: int,
        stop: int,
        room: int,
        write: bool,
        sizes: bytearray | None = None,
        /,
    ) -> tuple[bytes | None, int, int]: ...
