"""What an instruction's semantics see: typed reads and writes of access patterns on one core.

Every access is bounds-checked (``memory.byte_addresses``); a read of never-written bytes faults on a
strict device. Reads return exact float64 values (``read``) or fp32 engine inputs (``read32``); writes
round to the destination dtype with the program's rounding mode and seeded generator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from trnsim.isa.ap import AccessPattern
from trnsim.sim.memory import DenseMemory, Fault, Memory, SparseMemory, byte_addresses
from trnsim.sim.values import bytes_from_raw, decode_raw, encode_values, raw_from_bytes


class Context:
    """The memories of one core (and its chip's HBM) plus the run's numerics settings."""

    def __init__(
        self,
        hbm: SparseMemory,
        sbuf: DenseMemory,
        psum: DenseMemory,
        tensors: dict[str, tuple[int, int]],
        *,
        strict_reads: bool,
        rounding: str,
        rng: np.random.Generator,
        bank_bytes: int,
    ) -> None:
        self.memories: dict[str, Memory] = {"hbm": hbm, "sbuf": sbuf, "psum": psum}
        self.tensors = tensors  # name → (base address, bytes)
        self.strict_reads = strict_reads
        self.rounding = rounding
        self.rng = rng
        self.bank_bytes = bank_bytes  # PSUM bank size: a matmul's output may not cross a bank

    def addresses(self, ap: AccessPattern) -> tuple[Memory, NDArray[np.int64]]:
        mem = self.memories[ap.memory]
        base, extent = 0, 0
        if isinstance(mem, SparseMemory):
            if ap.tensor is None:
                extent = mem.size
            elif ap.tensor in self.tensors:
                base, extent = self.tensors[ap.tensor]
            else:
                raise Fault(f"HBM tensor {ap.tensor!r} is not declared", "declare it in the program")
        return mem, byte_addresses(ap, mem, base, extent)

    def read_raw(self, ap: AccessPattern) -> NDArray[Any]:
        """Element codes, shape ``ap.shape``."""
        mem, addr = self.addresses(ap)
        data, written = mem.read(addr)
        if self.strict_reads and not written.all():
            first = int(addr[~written][0])
            raise Fault(f"read of never-written {mem.name} at {self._describe(mem, first)}",
                        "write (or DMA) the data before reading it, or run without strict_reads")
        return raw_from_bytes(data, ap.itemsize)

    def read(self, ap: AccessPattern) -> NDArray[np.float64]:
        return decode_raw(self.read_raw(ap), ap.dtype)

    def read32(self, ap: AccessPattern) -> NDArray[np.float32]:
        """Values as an engine sees them: fp32, flattened to ``[partitions, free_size]``."""
        return self.read(ap).astype(np.float32).reshape(ap.partitions, ap.free_size)

    def write_raw(self, ap: AccessPattern, raw: NDArray[Any]) -> None:
        mem, addr = self.addresses(ap)
        mem.write(addr, bytes_from_raw(np.asarray(raw).reshape(ap.shape), ap.itemsize))

    def write(self, ap: AccessPattern, values: NDArray[Any]) -> None:
        """Round ``values`` (any shape with ``ap.size`` elements) to ``ap.dtype`` and store them."""
        rng = self.rng if self.rounding == "stochastic" else None
        self.write_raw(ap, encode_values(np.asarray(values).reshape(ap.shape), ap.dtype, self.rounding, rng))

    @staticmethod
    def _describe(mem: Memory, addr: int) -> str:
        if isinstance(mem, DenseMemory):
            return f"partition {addr // mem.row_bytes}, byte {addr % mem.row_bytes}"
        return f"address {addr:#x}"
