"""Dense bit packing of small codes: fp4/int4 two per byte, fp6 four per three bytes, sparsity indices."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim.errors import NumericsError


def pack_codes(codes: ArrayLike, bits: int) -> bytes:
    """Pack the low ``bits`` of each code, first code in the lowest bits (little-endian within a byte)."""
    if not 1 <= bits <= 8:
        raise NumericsError(f"can pack codes of 1..8 bits, not {bits}")
    flat = np.ascontiguousarray(codes).astype(np.uint8).reshape(-1, 1)
    bitplanes = np.unpackbits(flat, axis=1, bitorder="little")[:, :bits]
    return np.packbits(bitplanes.reshape(-1), bitorder="little").tobytes()


def unpack_codes(data: bytes | NDArray[np.uint8], bits: int, count: int) -> NDArray[np.uint8]:
    """Inverse of ``pack_codes``: ``count`` codes of ``bits`` bits each."""
    raw = np.frombuffer(bytes(data), dtype=np.uint8)
    if raw.size * 8 < count * bits:
        raise NumericsError(
            f"packed buffer too short: {raw.size} bytes hold fewer than {count} codes of {bits} bits",
            hint="pass the buffer exactly as pack_codes returned it",
        )
    bitstream = np.unpackbits(raw, bitorder="little")[: count * bits]
    planes = np.zeros((count, 8), dtype=np.uint8)
    planes[:, :bits] = bitstream.reshape(count, bits)
    return np.packbits(planes, axis=1, bitorder="little").reshape(-1)


def packed_size(count: int, bits: int) -> int:
    """Bytes ``pack_codes`` uses for ``count`` codes of ``bits`` bits."""
    return -(-count * bits // 8)
