"""DMA instructions: copies between any two memories, with casts, and indirect gather / scatter / scatter-add.

DMAs are *triggered* from an engine's instruction stream: any engine may issue one (``engines`` is all of
them); by convention a program issues them from ``sync``, the sequencer-only engine, so compute streams are
not held up. ``queue`` picks one of the core's DMA queues (``spec.core.dma.queues``), for the timing model.

The indirect forms address whole rows of a table through a ``[P, 1]`` index tile: each transfer is a
scatter-gather list of DMA buffers (``reference/neuron.md`` §1.2), whose descriptors the software DGE writes
from the index (§1.3: the hardware DGE "does not support indirect gather/scatter"; §1.4: Trainium3 has
indirect gather/scatter addressing).
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Instruction


@dataclass(frozen=True)
class DmaCopy(Instruction):
    """Copy ``src`` to ``dst`` element by element in index order, casting when the dtypes differ.

        for idx in ndindex(dst.shape):           # src has the same number of elements
            dst[idx] = cast(src[flat(idx)], dst.dtype)    # same dtype: the bytes, bit for bit
    A transposing copy is a copy through a transposed access pattern (``ap.transposed``).
    """

    mnemonic = "dma_copy"

    dst: AccessPattern
    src: AccessPattern
    queue: int = 0


@dataclass(frozen=True)
class DmaGather(Instruction):
    """Indirect copy: row ``index[p]`` of the table ``src`` goes to partition ``p`` of ``dst``.

        for p in range(dst.partitions):
            r = index[p, 0]                      # an integer; out of [0, src.partitions) is a fault
            dst[p, ...] = cast(src[r, ...], dst.dtype)
    ``src`` describes the whole table (its partitions are the table's rows), ``index`` is ``[P, 1]``
    int32/uint32 in SBUF. This is how an embedding lookup reads its rows.
    """

    mnemonic = "dma_gather"

    dst: AccessPattern
    src: AccessPattern
    index: AccessPattern
    queue: int = 0


@dataclass(frozen=True)
class DmaScatter(Instruction):
    """Indirect write: partition ``p`` of ``src`` goes to row ``index[p]`` of the table ``dst``.

        for p in range(src.partitions):          # in order: of repeated indices, the last partition wins
            r = index[p, 0]                      # an integer; out of [0, dst.partitions) is a fault
            dst[r, ...] = cast(src[p, ...], dst.dtype)    # same dtype: the bytes, bit for bit
    The mirror of ``DmaGather``: ``dst`` describes the whole table, ``index`` is ``[P, 1]`` int32/uint32 in
    SBUF. Rows the index does not name keep their contents. This is how a ``dynamic_update_slice`` at
    offsets that are data writes its rows (``compiler.dmaindex.ScatterPlan``).
    """

    mnemonic = "dma_scatter"

    dst: AccessPattern
    src: AccessPattern
    index: AccessPattern
    queue: int = 0


@dataclass(frozen=True)
class DmaScatterAdd(Instruction):
    """Indirect accumulate: partition ``p`` of ``src`` is added to row ``index[p]`` of the table ``dst``.

        for p in range(src.partitions):          # in order: repeated indices accumulate
            r = index[p, 0]
            dst[r, ...] = round(dst[r, ...] + src[p, ...], dst.dtype)     # computed in fp32
    The gradient of an embedding lookup (read-add-write DMA, full speed on NeuronCore-v4).
    """

    mnemonic = "dma_scatter_add"

    dst: AccessPattern
    src: AccessPattern
    index: AccessPattern
    queue: int = 0

    def reads(self) -> tuple[AccessPattern, ...]:
        return (self.dst, self.src, self.index)  # read-modify-write of the table
