"""What an instruction's semantics see: typed reads and writes of access patterns on one core.

Every access is bounds-checked and becomes a strided view of its memory (``memory.Region``); a read of
never-written bytes faults on a strict device. Reads return exact float64 values (``read``) or fp32 engine
inputs (``read32``); writes round to the destination dtype with the program's rounding mode and seeded
generator; a matmul's product goes into its PSUM accumulator through ``accumulate_product``.

Every access is located by ``region`` and every write marked by ``_mark_written``: those two keep the
invariants of the fast paths (``fastpath``), so the semantics need not know about them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from trnsim.isa.ap import AccessPattern
from trnsim.sim.fastpath import DeferredMatmuls, OperandCache, Scratch, copy_view, overlap, span, well_formed
from trnsim.sim.memory import RAW, DenseMemory, Fault, Memory, Region, SparseMemory
from trnsim.sim.values import bf16_round_into, can_decode_into, decode_into, decode_raw, decode_raw32, encode_values


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
        fast_paths: bool = True,
    ) -> None:
        self.memories: dict[str, Memory] = {"hbm": hbm, "sbuf": sbuf, "psum": psum}
        self.tensors = tensors  # name → (base address, bytes)
        self.strict_reads = strict_reads
        self.rounding = rounding
        self.rng = rng
        self.bank_bytes = bank_bytes  # PSUM bank size: a matmul's output may not cross a bank
        self.scratch = Scratch()
        self.operands = OperandCache() if fast_paths else None
        self.deferred = DeferredMatmuls(self.scratch) if fast_paths else None

    def region(self, ap: AccessPattern) -> tuple[Memory, Region]:
        """Bounds- and alignment-checked location of ``ap`` (raises ``Fault``). Pending matmuls into PSUM
        bytes of ``ap`` are applied first (``fastpath.DeferredMatmuls``): every access comes here."""
        if self.deferred is not None and ap.memory == "psum":
            self.deferred.flush_overlapping(ap)
        if ap.offset % ap.itemsize:
            raise Fault(f"misaligned {ap.dtype} access at byte offset {ap.offset} of {ap.memory}",
                        f"align offsets to {ap.itemsize} bytes")
        mem = self.memories[ap.memory]
        if isinstance(mem, DenseMemory):
            return mem, mem.region(ap)
        if ap.tensor is None:
            return mem, mem.region(ap, 0, mem.size)
        if ap.tensor not in self.tensors:
            raise Fault(f"HBM tensor {ap.tensor!r} is not declared", "declare it in the program")
        base, extent = self.tensors[ap.tensor]
        return mem, mem.region(ap, base, extent)

    def read_raw(self, ap: AccessPattern) -> NDArray[Any]:
        """Element codes, shape ``ap.shape``."""
        return self._readable(ap).astype(RAW[ap.itemsize])

    def _readable(self, ap: AccessPattern) -> NDArray[Any]:
        """``ap``'s codes as a view of memory, checked for a read (raises ``Fault``)."""
        mem, reg = self.region(ap)
        if self.strict_reads:
            unwritten = ~reg.written_view(ap).all(axis=-1)
            if unwritten.any():
                first = reg.address(tuple(int(i) for i in np.argwhere(unwritten)[0]))
                raise Fault(f"read of never-written {mem.name} at {mem.describe(first)}",
                            "write (or DMA) the data before reading it, or run without strict_reads")
        return reg.view(ap)

    def copy_raw(self, dst: AccessPattern, src: AccessPattern) -> None:
        """``write_raw(dst, read_raw(src))``: codes copied bit for bit (the patterns have equal sizes). The fast
        path copies view to view in one pass (``fastpath.copy_view``)."""
        if self.operands is None:
            self.write_raw(dst, self.read_raw(src))
            return
        raw = self._readable(src)
        _, reg = self.region(dst)
        copy_view(reg.view(dst), raw if raw.shape == dst.shape else raw.reshape(dst.shape))
        self._mark_written(dst, reg)

    def copy_values(self, dst: AccessPattern, src: AccessPattern) -> None:
        """``write(dst, read32(src))``. The fast path rounds an fp32 source to bf16 view to view with RNE
        (``values.bf16_round_into``), without the fp32 copy, the codes array and the second copy; a bf16 or
        fp32 copy to its own dtype is a copy of the codes (decoding widens exactly and encoding gives the code
        back, NaN payloads included)."""
        fast = self.operands is not None and self.rounding == "rne"  # stochastic rounding draws from the generator
        if fast and src.dtype == dst.dtype in ("bf16", "fp32") and src.size == dst.size:
            self.copy_raw(dst, src)
            return
        if not (fast and src.dtype == "fp32" and dst.dtype == "bf16" and src.shape == dst.shape
                and src.on_chip and dst.on_chip) or (src.memory == dst.memory and overlap(span(src), span(dst))):
            self.write(dst, self.read32(src))  # (the last: a cast onto its own bytes)
            return
        raw = self._readable(src)
        _, reg = self.region(dst)
        view = reg.view(dst)
        bf16_round_into(raw.view(np.float32), view)
        self._mark_written(dst, reg)

    def read(self, ap: AccessPattern) -> NDArray[np.float64]:
        return decode_raw(self.read_raw(ap), ap.dtype)

    def read32(self, ap: AccessPattern) -> NDArray[np.float32]:
        """Values as an engine sees them: fp32, flattened to ``[partitions, free_size]``."""
        return decode_raw32(self._readable(ap), ap.dtype).reshape(ap.partitions, ap.free_size)  # a new array

    def peek32(self, ap: AccessPattern) -> NDArray[np.float32]:
        """``read32(ap)`` for an input that is only read: on the fast path an fp32 pattern's codes viewed as
        fp32, without the copy (read-only; valid until the next store, so the caller computes its result from
        it before writing). Any other dtype, or the plain path, is ``read32``'s new array."""
        if self.operands is None or ap.dtype != "fp32":
            return self.read32(ap)
        view = self._readable(ap).view(np.float32).reshape(ap.partitions, ap.free_size)
        view.flags.writeable = False
        return view

    def operand32(self, ap: AccessPattern) -> NDArray[np.float32]:
        """``read32`` of an operand that is typically read again unchanged (TensorE's: a stationary across
        moving tiles, a resident moving panel across row blocks). Read-only: SBUF operands may come from the
        ``OperandCache``."""
        if self.operands is not None and ap.memory == "sbuf":
            return self.operands.get(ap, lambda: self._decode32(ap))
        return self.read32(ap)

    def _decode32(self, ap: AccessPattern) -> NDArray[np.float32]:
        """``read32(ap)``, widened straight from memory into scratch (``fastpath.Scratch``) for the dtypes
        ``values.decode_into`` takes (the others as ``read32``)."""
        if not can_decode_into(ap.dtype):
            return self.read32(ap)
        raw = self._readable(ap)
        if raw.ndim == 2:  # [partitions, free]: placed for in-place stacking (``Scratch.place``)
            out = self.scratch.place(ap.partitions, ap.free_size)
            decode_into(raw, ap.dtype, out)
            return out
        out = self.scratch.take((ap.partitions, ap.free_size))
        decode_into(raw, ap.dtype, out.reshape(ap.shape))
        return out

    def accumulate32(self, ap: AccessPattern, values: NDArray[np.float32], *, add: bool) -> None:
        """PSUM-style fp32 store, in place: ``dst = values`` or ``dst += values`` (one fp32 rounding per
        element, as the accumulator does). ``ap`` must be fp32; ``values`` has ``ap.size`` elements."""
        vals = np.asarray(values, dtype=np.float32).reshape(ap.shape)
        view = self._accumulator(ap, add=add)
        if add:
            np.add(view, vals, out=view)
        else:
            view[...] = vals

    def accumulate_product(self, ap: AccessPattern, s: NDArray[np.float32], v: NDArray[np.float32], *,
                           add: bool) -> None:
        """``dst = sᵀ @ v`` or ``dst += sᵀ @ v`` for fp32 values ``s [K, M]``, ``v [K, N]``: TensorE's side of
        the accumulator. The products of consecutive accumulations into one PSUM pattern may be deferred and
        computed as one (``fastpath.DeferredMatmuls``), so ``s`` and ``v`` must not be modified afterwards."""
        pending = self.deferred
        if pending is None or ap.memory != "psum" or not well_formed(ap, s, v):
            with np.errstate(all="ignore"):
                self.accumulate32(ap, s.T @ v, add=add)
        elif not (add and pending.extend(ap, s, v)):  # extending: the group's first matmul checked ap
            pending.start(ap, self._accumulator(ap, add=add), s, v, add=add)

    def _accumulator(self, ap: AccessPattern, *, add: bool) -> NDArray[np.float32]:
        """The fp32 view of ``ap`` about to be stored to (``add``: read too), checked and marked written."""
        mem, reg = self.region(ap)
        if add and self.strict_reads and not reg.written_view(ap).all():
            raise Fault(f"accumulate into never-written {mem.name}", "write the accumulator first (accumulate=False)")
        self._mark_written(ap, reg)
        return reg.view(ap).view(np.float32)

    def write_raw(self, ap: AccessPattern, raw: NDArray[Any]) -> None:
        _, reg = self.region(ap)
        reg.view(ap)[...] = np.asarray(raw).reshape(ap.shape)
        self._mark_written(ap, reg)

    def _mark_written(self, ap: AccessPattern, reg: Region) -> None:
        """Every store ends here: the bytes count as written (kept only for strict reads, the flags' one
        reader) and cached decodes of them become stale (``fastpath.OperandCache``)."""
        if self.strict_reads:
            reg.mark_written(ap)
        if self.operands is not None and ap.memory == "sbuf":
            self.operands.wrote(ap)

    def finish(self) -> None:
        """Apply what is pending: memory then holds what the plain path leaves (call when a run ends). The fast
        paths' caches are emptied and their scratch returned to the pool."""
        if self.deferred is not None:
            self.deferred.flush_all()
        if self.operands is not None:
            self.operands.clear()
        self.scratch.release()  # nothing refers to scratch any more

    def between(self) -> None:
        """Call between two instructions: when the scratch arena is spent, ``finish`` (applying a pending
        group early is always allowed, and no instruction holds scratch arrays now), so the arena starts over."""
        if self.scratch.full:
            self.finish()

    def write(self, ap: AccessPattern, values: NDArray[Any]) -> None:
        """Round ``values`` (any shape with ``ap.size`` elements) to ``ap.dtype`` and store them. The fast path
        rounds fp32 values into a bf16 pattern's memory with RNE (``values.bf16_round_into``) or stores them
        into an fp32 one as they are (their bits are the codes), without the codes array and its copy."""
        values = np.asarray(values)
        if self.operands is not None and self.rounding == "rne" and values.dtype == np.float32 and \
                ap.dtype in ("bf16", "fp32") and values.size == ap.size:
            _, reg = self.region(ap)
            view = reg.view(ap)
            if not np.may_share_memory(view, values):
                if ap.dtype == "bf16":
                    bf16_round_into(values.reshape(ap.shape), view)
                else:
                    view.view(np.float32)[...] = values.reshape(ap.shape)
                self._mark_written(ap, reg)
                return
        rng = self.rng if self.rounding == "stochastic" else None
        self.write_raw(ap, encode_values(values.reshape(ap.shape), ap.dtype, self.rounding, rng))
