"""The tracing context: what a kernel's DSL calls append to while its Python runs.

A ``Trace`` holds the program under construction (HBM tensor declarations, one instruction stream per
engine), the SBUF and PSUM allocators and the dependency tracker. ``emit`` is the one way instructions
enter a program: it computes the instruction's waits from the buffers it reads and writes (``deps``), has
the instruction signal its sync domain, checks it with the ISA verifier's rules for the target (so an
illegal tile size or dtype fails at the kernel line that asked for it) and remembers that line.

DMAs are issued from the ``sync`` engine (the sequencer-only engine, so compute streams never wait to
issue them), round-robin over the core's DMA queues; each queue is its own sync domain ``dma<q>``.

    >>> from trnsim import hw
    >>> with Trace(hw.get("trn3")) as tr:
    ...     t = tr.allocate("sbuf", (128, 64), "fp32")
    >>> str(t.ap()), tr.allocators["sbuf"].free_bytes
    ('sbuf:fp32[0:128,+0,64x1]', 261888)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import NoReturn

from trnsim.dsl.alloc import Allocator
from trnsim.dsl.deps import DependencyTracker, ReadAccess, Wait, WriteAccess
from trnsim.dsl.errors import Location, fail, user_location
from trnsim.dsl.tensor import Buffer, Memory, Tensor
from trnsim.hw import ChipSpec
from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import ENGINES, Engine, Instruction
from trnsim.isa.dtypes import DTYPES, get_dtype
from trnsim.isa.program import Program, Role, TensorDecl
from trnsim.isa.verify import Issue, check_instruction

SBUF_ALIGN = 64  # bytes; NKI's sbuf_min_align
MAX_LIVE_LISTED = 5  # live tiles an out-of-memory error lists

_ACTIVE: list[Trace] = []


def current() -> Trace:
    """The trace of the kernel being traced; a DSL call outside one is an error."""
    if not _ACTIVE:
        fail("kernel-language call outside a kernel", "decorate the function with @trnsim.kernel and run it "
             "with trnsim.run_kernel(kernel, *arrays)")
    return _ACTIVE[-1]


@dataclass(frozen=True)
class TileSize:
    """The target's tile limits, by NKI's ``nl.tile_size`` names (``dsl.tile_size()`` inside a kernel)."""

    pmax: int  # partitions of SBUF/PSUM (and TensorE contraction rows)
    psum_fmax: int  # fp32 elements per partition of one PSUM bank
    gemm_stationary_fmax: int  # TensorE columns: the stationary free size
    gemm_moving_fmax: int  # moving free size: one PSUM bank of fp32
    psum_num_banks: int
    sbuf_bytes_per_partition: int


def tile_size() -> TileSize:
    """The tile limits of the target being traced."""
    core = current().core
    bank = core.psum.fp32_per_bank
    return TileSize(core.sbuf.partitions, bank, core.tensor.cols, bank, core.psum.banks,
                    core.sbuf.bytes_per_partition)


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        fail(f"unknown dtype {dtype!r}", f"use one of: {', '.join(DTYPES)}")
    return dtype


def check_shape(shape: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(int(n) for n in shape)
    if not dims or any(n < 1 for n in dims):
        fail(f"shape {dims}", "a tensor has at least one dimension, each ≥ 1")
    return dims


class Trace:
    """A program under construction for ``spec``; a context manager that makes itself ``current()``."""

    def __init__(self, spec: ChipSpec) -> None:
        core = spec.core
        if core is None:
            fail(f"{spec.name} has no NeuronCore", "trace kernels for a Trainium target, e.g. trn3")
        self.spec, self.core = spec, core
        self.decls: dict[str, TensorDecl] = {}
        self.streams: dict[Engine, list[Instruction]] = {e: [] for e in ENGINES}
        self.locations: dict[tuple[str, int], Location] = {}
        self.tracker = DependencyTracker()
        self.allocators = {
            "sbuf": Allocator("sbuf", core.sbuf.partitions, core.sbuf.bytes_per_partition, SBUF_ALIGN),
            "psum": Allocator("psum", core.psum.partitions, core.psum.banks * core.psum.bank_bytes,
                              core.psum.bank_bytes),
        }
        self.live: weakref.WeakValueDictionary[int, Buffer] = weakref.WeakValueDictionary()
        # NOTE: a dropped tile's memory returns at the next allocation, never in the middle of one (a
        # garbage-collector pass may free a tile at any bytecode)
        self.pending: list[tuple[Memory, int, int, dict[str, int]]] = []
        self.queue = 0
        self._stub = Program()  # the declared tensors, for the verifier's HBM bounds checks
        self._passed: set[tuple[AccessPattern, bool]] = set()  # patterns the verifier found legal
        self._serial = 0

    def __enter__(self) -> Trace:
        _ACTIVE.append(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        _ACTIVE.remove(self)
        for buf in list(self.live.values()):
            buf.on_free = None  # tiles that outlive the trace free nothing
        self.live.clear()

    # -- HBM tensors and tiles -------------------------------------------------------------------------

    def declare(self, name: str | None, shape: Sequence[int], dtype: str, role: Role) -> Tensor:
        dims = check_shape(shape)
        if name is None:
            name = next(n for k in range(len(self.decls) + 1) if (n := f"out{k or ''}") not in self.decls)
        if name in self.decls:
            fail(f"HBM tensor {name!r} is declared twice", "give every HBM tensor its own name")
        decl = TensorDecl(name, dims, check_dtype(dtype), role)
        self.decls[name] = decl
        self._stub = Program(tuple(self.decls.values()))
        return Tensor.whole(Buffer("hbm", name, dims, dtype))

    def allocate(self, memory: Memory, shape: Sequence[int], dtype: str, name: str | None = None) -> Tensor:
        """A new tile ``[P, *free]``: partitions 0..P-1, one byte range of each (see ``alloc``)."""
        dims = check_shape(shape)
        check_dtype(dtype)
        alloc = self.allocators[memory]
        if dims[0] > alloc.partitions:
            fail(f"{memory} tile {list(dims)}: partition dimension {dims[0]} > {alloc.partitions}",
                 f"tile dimension 0 by {alloc.partitions} (e.g. a loop over row blocks)")
        nbytes = get_dtype(dtype).itemsize
        for n in dims[1:]:
            nbytes *= n
        self._release_pending()
        got = alloc.allocate(nbytes)
        if got is None:
            self._out_of_memory(memory, dims, dtype, nbytes)
        offset, fence = got
        self._serial += 1
        buf = Buffer(memory, name or f"{memory}{self._serial}", dims, dtype, offset=offset, nbytes=nbytes,
                     location=user_location())
        tile = Tensor.whole(buf)
        if fence:
            self.tracker.inherit(buf.hazards, tile.box, fence)
        buf.on_free = self._dropped
        self.live[id(buf)] = buf
        return tile

    def _dropped(self, buf: Buffer) -> None:
        self.pending.append((buf.memory, buf.offset, buf.nbytes, buf.hazards.fence()))

    def _release_pending(self) -> None:
        for memory, offset, nbytes, fence in self.pending:
            self.allocators[memory].release(offset, nbytes, fence)
        self.pending.clear()

    def release(self, buf: Buffer) -> None:
        """Free a tile now; later use of any of its views is an error."""
        if buf.memory == "hbm":
            fail("dsl.release frees SBUF/PSUM tiles, not HBM tensors", "release tiles only")
        if buf.dead:
            fail(f"tile {buf.name} is released twice", "release a tile once")
        buf.dead = True
        self.live.pop(id(buf), None)
        self.allocators[buf.memory].release(buf.offset, buf.nbytes, buf.hazards.fence())

    def _out_of_memory(self, memory: Memory, dims: tuple[int, ...], dtype: str, nbytes: int) -> NoReturn:
        alloc = self.allocators[memory]
        live = sorted((b for b in self.live.values() if b.memory == memory and not b.dead),
                      key=lambda b: -b.nbytes)
        listed = "; ".join(f"{list(b.shape)} {b.dtype} ({b.nbytes} B) from {b.location}"
                           for b in live[:MAX_LIVE_LISTED])
        fail(f"out of {memory}: tile {list(dims)} {dtype} needs {alloc.rounded(nbytes)} bytes per partition, "
             f"{alloc.free_bytes} of {alloc.row_bytes} are free (largest free range {alloc.largest_free}); "
             f"{len(live)} live {memory} tiles, largest: {listed or 'none'}",
             "drop references to tiles you no longer need (or dsl.release them), tile the free axis smaller, "
             "or use a narrower dtype")

    # -- instructions -----------------------------------------------------------------------------------

    def next_queue(self) -> int:
        q = self.queue
        self.queue = (q + 1) % self.core.dma.queues
        return q

    def emit(
        self,
        engine: Engine,
        make: Callable[[tuple[Wait, ...], tuple[str, ...]], Instruction],
        reads: Sequence[Tensor],
        writes: Sequence[Tensor],
        *,
        domain: str | None = None,
    ) -> Instruction:
        """Append the instruction ``make(wait, signal)`` to ``engine``'s stream, synchronised with the
        earlier instructions touching what it ``reads`` and ``writes``."""
        for t in (*reads, *writes):
            if t.buffer.dead:
                fail(f"tile {t.buffer.name} is used after dsl.release", "release a tile after its last use")
        dom = domain or engine
        rd: list[ReadAccess] = [(t.buffer.hazards, t.box) for t in reads]
        wr: list[WriteAccess] = [(t.buffer.hazards, t.box, t.dense) for t in writes]
        wait = self.tracker.waits(dom, rd, wr)
        ins = make(wait, (dom,))
        try:
            check_instruction(engine, ins, self._stub, self.spec, self._passed)
        except Issue as e:
            fail(f"{e.message} (in {engine} {ins.mnemonic})", e.hint)
        stream = self.streams[engine]
        self.locations[(engine, len(stream))] = user_location()
        stream.append(ins)
        self.tracker.record(dom, rd, wr, wait)
        return ins

    def program(self, outputs: Sequence[str], rounding: str, seed: int) -> Program:
        """The traced program: returned tensors are outputs, other kernel-declared ones scratch."""
        decls = tuple(d if d.role == "input" else replace(d, role="output" if d.name in outputs else "scratch")
                      for d in self.decls.values())
        return Program(decls, {e: tuple(s) for e, s in self.streams.items()}, rounding, seed)
