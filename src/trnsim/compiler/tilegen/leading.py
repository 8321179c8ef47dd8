"""Leading-axis reductions of a generated kernel (``lead`` steps: ``[rows, W] → [P, W]``, tile row ``r`` of the
space adding to result row ``r mod P``): their accumulators across the tile loop, and after it the results,
the ops that read them (phase ``post``) and their stores.

Sums run on TensorE (``build._Builder.reduce`` says why): each tile ``x[rows, W]`` is the moving operand of
matmuls against the 0/1 selection ``S[rows, P]``, ``acc[P, W] += S.T @ x`` in PSUM, one bank of ``PSUM_COLS``
columns per matmul. PSUM is 128 partitions of 8 such banks (neuron.md §0: 2 MiB, 16 KiB per partition), and
``acc`` fills only ``P`` of the partitions (one for a bias or norm-scale gradient). When a kernel's sums need
more banks than there are (a 70B model's ``[B·T, 8192] → [8192]``: 16), each sum gets its share of the banks
and its columns *fold* onto partitions (``recipe.lead_strips``): strip ``c`` of ``strip`` columns accumulates
into partitions ``c·P … c·P + P - 1`` of the same banks, through the stationary ``S_c[rows, P·k]`` that is
``S`` in its columns ``c·P …`` and zero elsewhere. The result leaves PSUM as one ``[P·k, strip]`` tile, the ops
after the loop work on that layout (inputs of the result's shape are loaded into it), and each strip is one
DMA from or to HBM.

NOTE: folding is what a NeuronCore kernel author would write, because it makes the wide sum cost what a
narrow one does. TensorE's time is the moving operand's columns (``sim.timing.costs.tensor_cost``: a matmul
takes ``max(N, 64)`` cycles whatever the stationary's width ``M ≤ 128``, whose LoadStationary is ``max(M, 64) /
4``), so the strips' matmuls take what one 8192-wide accumulator would; each row tile is still loaded once,
whole rows (or ``MAX_ROW`` chunks: 8 KiB of bf16, efficient DMA, neuron.md §1.2) per partition. The
alternatives cost more. Strips as separate passes over the row tiles read the same bytes but need the tile
loop once per strip, which a group that also works along whole rows (a norm's backward) cannot take. A sum
drained from PSUM into an SBUF accumulator after every tile adds a VectorE pass over ``[P, W]`` per tile on
``P`` of its 128 lanes: for ``P = 1`` and ``W = 8192`` about 3.5 us (2 fp32 elements per lane and cycle at
1.2 GHz, §1.4), as long as the tile's 2 MiB load takes (4 us at 528 GB/s, §1.3), with TensorE waiting on it.

Maxima and minima keep a running ``[128, W]`` tile on VectorE instead, reduced across partitions after the
loop (``across``).
"""

from __future__ import annotations

from typing import Any

from trnsim.compiler.tilegen.recipe import PARTITIONS, PSUM_COLS, QUEUES, Recipe, input_shapes, output_shapes, space


def selection(dsl: Any, period: int, dt: str, base: int, k: int) -> Any:
    """``S[p, j] = ((base + p) mod period == j)``: which leading-axis result row each tile row adds to."""
    if period == 1:
        return dsl.full((k, 1), 1.0, dt)
    index = dsl.iota((k, period), "int32", base=base, channel_multiplier=1, steps=[-1])
    phase = dsl.binary("mod", index, float(period), dtype="fp32")
    return dsl.binary("eq", phase, 0.0, dtype=dt)


class Leading:
    """The accumulators of a kernel's ``lead`` steps (module docstring)."""

    def __init__(self, dsl: Any, recipe: Recipe) -> None:
        self.dsl, self.recipe = dsl, recipe
        self.banks: dict[int, list[Any]] = {}                  # a sum's PSUM banks, by step
        self.running: dict[int, Any] = {}                      # a max's or min's running tile, by step
        self.shape: dict[int, tuple[int, int]] = {}            # (P, W) of each step's result
        self.selections: dict[tuple[int, str, int, int], Any] = {}

    def add(self, index: int, x: Any, base: int, col0: int, width: int, first: bool) -> None:
        """Add tile ``x`` (rows ``base …`` of the space; columns ``col0 …`` of the step's ``width``) into step
        ``index``'s accumulator; ``first``: the kernel's first tile, whose matmuls start the sums."""
        dsl = self.dsl
        _, op, operands, _ = self.recipe.steps[index]
        period = int(operands[1][1])
        self.shape[index] = (period, width)
        if op != "add":
            # a running max/min per tile row: the result rows modulo ``period`` (build.reduce)
            running = self.running.get(index)
            if running is None:
                self.running[index] = dsl.copy(x)
            else:
                part = running[:x.shape[0]]
                dsl.binary(op, part, x, out=part)
            return
        strip = int(operands[2][1]) if len(operands) > 2 else width
        count = -(-width // strip)
        banks = self.banks.setdefault(index, [])
        temporary: list[Any] = []
        end = col0 + x.shape[1]
        g = col0
        while g < end:
            c, offset = divmod(g, strip)
            b, at = divmod(offset, PSUM_COLS)
            n = min(PSUM_COLS - at, strip - offset, end - g)
            while len(banks) <= b:
                banks.append(dsl.psum((period * count, min(PSUM_COLS, min(strip, width) - len(banks) * PSUM_COLS))))
            s = self._selection(period, x.dtype, base, x.shape[0], c, count, temporary)
            bank = banks[b] if (at, n) == (0, banks[b].shape[1]) else banks[b][:, at:at + n]
            # NOTE: strip 0 covers every bank column the later strips use, and comes first in the first tile:
            # its matmuls write all P·k partitions (zeros outside its own), so the rest may accumulate
            dsl.matmul(bank, s, x[:, g - col0:g - col0 + n], accumulate=not (first and c == 0))
            g += n
        if temporary:
            dsl.release(*temporary)

    def _selection(self, period: int, dt: str, base: int, k: int, strip: int, count: int,
                   temporary: list[Any]) -> Any:
        """The stationary of strip ``strip`` of ``count`` for ``k`` tile rows from row ``base``: made once when
        ``period`` divides a tile, else per tile (``temporary``, released after its matmuls)."""
        dsl = self.dsl
        if PARTITIONS % period == 0:
            key = (period, dt, strip, count)
            if key not in self.selections:
                whole = self.selections.get((period, dt, 0, 1))
                if whole is None:
                    whole = self.selections[period, dt, 0, 1] = selection(dsl, period, dt, 0, PARTITIONS)
                self.selections[key] = _folded(dsl, whole, period, strip, count)
            return self.selections[key][:k]
        s = selection(dsl, period, dt, base, k)
        if count == 1:
            return s
        folded = _folded(dsl, s, period, strip, count)
        temporary.extend((s, folded))
        return folded

    def result(self, index: int, dt: str) -> Any:
        """Step ``index``'s result in SBUF, after the loop: ``[P, W]``, or ``[P·k, strip]`` for a folded sum."""
        dsl = self.dsl
        _, op, operands, _ = self.recipe.steps[index]
        period = int(operands[1][1])
        if op != "add":
            return across(dsl, op, self.running[index], period, dt)
        banks = self.banks[index]
        result = dsl.sbuf((banks[0].shape[0], sum(a.shape[1] for a in banks)), dt)
        for c, a in enumerate(banks):
            dsl.copy(a, out=result[:, c * PSUM_COLS:c * PSUM_COLS + a.shape[1]])
        return result


def _folded(dsl: Any, s: Any, period: int, strip: int, count: int) -> Any:
    """``S_strip[rows, period · count]``: ``s`` in columns ``strip · period …``, zero elsewhere (``s`` itself
    when there is one strip)."""
    if count == 1:
        return s
    folded = dsl.full((s.shape[0], period * count), 0.0, s.dtype)
    dsl.copy(s, out=folded[:, strip * period:(strip + 1) * period])
    return folded


def finish(dsl: Any, recipe: Recipe, ins: list[Any], outs: list[Any], leading: Leading, columns: dict[int, Any],
           queue: int, pre: dict[int, Any] | None = None) -> int:
    """After the tile loop: the ``lead`` steps' results, the ``post`` steps on them (on their layout, folded
    or not; inputs of their shape loaded now; scalar columns made before the loop, ``pre``, cut to their
    partitions) and the stores of the ``red`` outputs. Returns the next queue."""
    from trnsim.compiler.tilegen.emit import compute

    phases = recipe.phases or ("block",) * len(recipe.steps)
    shapes = input_shapes(recipe)
    strips: dict[tuple[int, int], int] = {}                # (P, W) of a folded result → its strip
    post: dict[int, Any] = {}
    for index, (kind, op, operands, dt) in enumerate(recipe.steps):
        if kind == "lead":
            post[index] = leading.result(index, dt)
            if op == "add" and len(operands) > 2:
                strips[leading.shape[index]] = int(operands[2][1])
        elif phases[index] == "post":
            for r in operands:
                if r[0] == "in" and r[1] not in columns:        # an input of the result's shape
                    columns[r[1]], queue = _move(dsl, None, ins[r[1]], strips.get(shapes[r[1]]), queue)
            args = [(post[r[1]] if r[1] in post else (pre or {})[r[1]]) if r[0] == "tmp" else
                    columns[r[1]] if r[0] == "in" else r[1] for r in operands]
            lanes = min(a.shape[0] for a in args if not isinstance(a, float))   # a [128, 1] scalar column's
            args = [a if isinstance(a, float) else a[:lanes] for a in args]
            post[index] = compute(dsl, kind, op, args, dt, (1, 1), 0, space(recipe)[1], recipe.elements)
    kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
    for out, (ref, _), k, shape in zip(outs, recipe.outputs, kinds, output_shapes(recipe), strict=True):
        if k == "red":
            _, queue = _move(dsl, out, post[ref[1]], strips.get(shape), queue)
    return queue


def _move(dsl: Any, out: Any, src: Any, strip: int | None, queue: int) -> tuple[Any, int]:
    """A load of HBM ``src[P, W]`` (``out`` None: into a new tile) or a store of tile ``src`` into HBM ``out``,
    one DMA, or one per strip for a folded layout ``[P·k, strip]``; (the tile, the next queue)."""
    if strip is None:
        if out is None:
            return dsl.load(src, queue=queue % QUEUES), queue + 1
        dsl.store(out, src, queue=queue % QUEUES)
        return src, queue + 1
    period, width = (src if out is None else out).shape
    count = -(-width // strip)
    tile = src
    if out is None:
        tile = dsl.sbuf((period * count, strip), src.dtype)
        if width % strip:
            dsl.memset(tile, 0.0)        # the last strip's tail: the ops after the loop read whole tiles
    for c in range(count):
        w = min(strip, width - c * strip)
        lanes, cols = tile[c * period:(c + 1) * period, :w], (src if out is None else out)[:, c * strip:c * strip + w]
        if out is None:
            dsl.load(lanes, cols, queue=(queue + c) % QUEUES)
        else:
            dsl.store(cols, lanes, queue=(queue + c) % QUEUES)
    return tile, queue + count


def across(dsl: Any, op: str, running: Any, period: int, dt: str) -> Any:
    """``op`` across the partitions of a running ``[lanes, width]`` tile whose row ``p`` belongs to result
    row ``p mod period``: the ``[period, width]`` result of a leading-axis max or min.

    NOTE: everything to one row (``period`` 1) is GpSimd's partition reduce, as the per-tensor amax. Rows
    ``p mod period`` are not a partition range (partitions cannot be strided), so for ``period > 1`` TensorE
    transposes up to 128 columns at a time (bit-exact), the copy out of PSUM writes them as
    ``[columns, lanes / period, period]``, one tensor_reduce over the middle free axis leaves ``[columns,
    period]`` and a transpose brings it back."""
    if period == 1:
        return dsl.partition_reduce(running, op, dtype=dt)
    lanes, width = running.shape
    result = dsl.sbuf((period, width), dt)
    for c0 in range(0, width, PARTITIONS):
        c1 = min(width, c0 + PARTITIONS)
        flipped = dsl.transpose(running[:, c0:c1])
        grouped = dsl.sbuf((c1 - c0, lanes // period, period), "fp32")
        dsl.copy(flipped, out=grouped)
        folded = dsl.sbuf((c1 - c0, period), "fp32")
        dsl.reduce(op, grouped, axis=1, out=folded)
        back = dsl.transpose(folded)
        dsl.copy(back, out=result[:, c0:c1])
        dsl.release(flipped, grouped, folded, back)
    return result
