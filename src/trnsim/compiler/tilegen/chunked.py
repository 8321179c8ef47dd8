"""Rows longer than ``MAX_ROW`` (a softmax or cross-entropy over a large vocabulary): the row layout in column
chunks. A tile of 128 rows does not hold whole rows, so a reduction along them runs chunk by chunk into a
``[rows, 1]`` column (a running sum or max) and whatever reads that column runs in a later *pass* over the
tile's chunks:

    for each tile of 128 rows:
        for pass s = 0, 1, …:
            the column steps of pass s (they read columns finished in earlier passes), once
            for each chunk of up to MAX_ROW columns:
                the full steps of pass s, and the full steps of earlier passes they read (made again:
                recomputing a subtract or an exp is cheaper than keeping it), on [rows, chunk] tiles;
                each reduction of pass s: running = op(running, reduce(chunk)); the outputs of pass s stored
        the column outputs stored

A step's pass is the latest pass in which one of its operands is ready: a reduction's column is ready in the pass
after its own, everything else in its own. A log-softmax takes three passes (max; exp and sum; the result). A
reduction over a middle axis (rows ``[R · inner]``, a global average pooling's) is one such reduction: its chunks
hold whole ``inner`` slices (``build.lowered``), each is reduced over its middle axis (``emit._middle``) and folded
into a running ``[rows, inner]`` tile instead of a column. A leading-axis reduction (``leading``) adds each chunk
into its accumulator at the chunk's columns (or a column once per tile); its result and the ops after it run after
the tile loop. The input chunks read in more than one pass stay in SBUF for the tile when they fit in
``KEEP_ROW_BYTES`` per partition, else they are loaded again in each pass. The source of a per-tensor scaled
quantize-dequantize (phase ``late``) keeps each of its chunks, made in its pass, for the whole kernel, with a
running amax column; after the tile loop a second pass scales, rounds and stores them, as the row layout does with
its tiles. Loads run ``PREFETCH`` items ahead, each chunk's DMAs in up to 4 pieces of partitions (``recipe.pieces``)
so that about ``QUEUES`` are in flight (GPT step vocab 8192 with fp8 qdq: the cross-entropy gradient 345 -> 274 us).
"""

from __future__ import annotations

from typing import Any

from trnsim.compiler.tilegen.leading import Leading, finish
from trnsim.compiler.tilegen.recipe import (
    KEEP_ROW_BYTES,
    PARTITIONS,
    PREFETCH,
    QUEUES,
    Recipe,
    Ref,
    output_shapes,
    pieces,
    space,
)

_ELEMENTWISE = ("alu", "act", "copy", "select", "wrap", "bitcast")
_FOLDED = ("reduce", "middle")   # a tile's chunks folded into one value per tile: a column, or [rows, inner]


def passes(recipe: Recipe) -> tuple[list[int], list[bool]]:
    """Per step: the pass it runs in, and whether its result is made once per tile (a ``[rows, 1]`` column, a
    middle-axis reduction's ``[rows, inner]``, a leading-axis reduction of a column) rather than per chunk."""
    stage: list[int] = []
    column: list[bool] = []

    def is_column(r: Ref) -> bool:
        if r[0] == "in":
            return recipe.inputs[r[1]][1] in ("row", "scalar", "mid")
        return r[0] == "imm" or column[r[1]]

    def ready(r: Ref) -> int:
        if r[0] != "tmp":
            return 0
        return stage[r[1]] + (recipe.steps[r[1]][0] in _FOLDED)

    for kind, op, operands, _ in recipe.steps:
        refs = [r for r in operands if r[0] != "imm"]
        stage.append(max((ready(r) for r in refs), default=0))
        column.append(kind in _FOLDED or (kind, op) == ("const", "col") or
                      (kind in (*_ELEMENTWISE, "lead") and all(is_column(r) for r in refs)))
    return stage, column


def emit(dsl: Any, ins: list[Any], recipe: Recipe) -> tuple[Any, ...]:
    """The kernel body for a chunked recipe (module docstring)."""
    from trnsim.compiler.tilegen.emit import (
        _middle,  # pyright: ignore[reportPrivateUsage]
        broadcast_inputs,
        compute,
        dma_pieces,
        fold_peak,
        scaled_value,
        tensor_scales,
    )
    from trnsim.isa.dtypes import DTYPES

    rows, cols = space(recipe)
    lanes = min(PARTITIONS, rows)
    phases = recipe.phases or ("block",) * len(recipe.steps)
    kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
    outs = [dsl.hbm_tensor(shape, dt, name=f"out{i}")
            for i, ((_, dt), shape) in enumerate(zip(recipe.outputs, output_shapes(recipe), strict=True))]
    stage, column = passes(recipe)
    last = max([s + (k in _FOLDED) for s, (k, *_) in zip(stage, recipe.steps, strict=True)], default=0)

    # per pass: the full steps made on each chunk (with those of earlier passes they read), in program order
    work: list[list[int]] = [[] for _ in range(last + 1)]
    for s in range(last + 1):
        needed: set[int] = set()
        todo = [j for j in range(len(recipe.steps)) if stage[j] == s and phases[j] not in ("pre", "late", "post")
                and (not column[j] or recipe.steps[j][0] in _FOLDED)]
        while todo:
            j = todo.pop()
            if j in needed:
                continue
            needed.add(j)
            todo.extend(r[1] for r in recipe.steps[j][2]
                        if r[0] == "tmp" and not column[r[1]] and phases[r[1]] != "pre")
        work[s] = sorted(needed)
    once = [[j for j in range(len(recipe.steps)) if stage[j] == s and column[j] and
             recipe.steps[j][0] not in _FOLDED and phases[j] != "post"] for s in range(last + 1)]
    stored_in = [stage[ref[1]] if ref[0] == "tmp" else 0 for ref, _ in recipe.outputs]
    # per-tensor scaled steps (phase ``late``): their sources' chunks are kept for a second pass after the loop
    late = {j for j, ph in enumerate(phases) if ph == "late"}
    sources = {recipe.steps[j][2][0]: stage[j] for j in sorted(late)}     # source → the pass that makes it
    retained: dict[Ref, list[tuple[Any, int, int, int, int]]] = {r: [] for r in sources}
    peaks = {r: dsl.full((PARTITIONS, 1), 0.0, "fp32") for r in sources}
    kept: set[int] = set()                                  # ids of the kept chunks (an input's may be read on)
    # per pass: step → the chunk tiles read there for the last time (the working set stays small)
    stored = {ref[1] for ref, _ in recipe.outputs if ref[0] == "tmp"} | {r[1] for r in sources if r[0] == "tmp"}
    dying: list[dict[int, list[int]]] = []
    for s in range(last + 1):
        reader = {r[1]: j for j in work[s] for r in recipe.steps[j][2] if r[0] == "tmp" and r[1] in work[s]}
        dying.append({})
        for x, j in reader.items():
            if x not in stored:
                dying[s].setdefault(j, []).append(x)

    # the full inputs each pass reads; those read in more than one are kept for the tile if they fit
    reads: list[set[int]] = [{r[1] for j in work[s] for r in recipe.steps[j][2]
                              if r[0] == "in" and recipe.inputs[r[1]][1] == "full"} for s in range(last + 1)]
    for (ref, _), k, s in zip(recipe.outputs, kinds, stored_in, strict=True):
        if ref[0] == "in" and k == "full":
            reads[s].add(ref[1])
    for r, s in sources.items():
        if r[0] == "in":
            reads[s].add(r[1])
    multi = [i for i in range(len(ins)) if sum(i in r for r in reads) > 1]
    keep = sum(cols * DTYPES[recipe.inputs[i][0]].itemsize for i in multi) <= KEEP_ROW_BYTES
    final = {i: max(s for s in range(last + 1) if i in reads[s]) for r in reads for i in r}

    columns = broadcast_inputs(dsl, ins, recipe, cols)
    pre: dict[int, Any] = {}
    for j, (kind, op, operands, dt) in enumerate(recipe.steps):
        if phases[j] == "pre":
            args = [pre[r[1]] if r[0] == "tmp" else columns[r[1]] if r[0] == "in" else r[1] for r in operands]
            pre[j] = compute(dsl, kind, op, args, dt, (lanes, cols), 0, cols, recipe.elements)

    tiles = [(r0, min(PARTITIONS, rows - r0)) for r0 in range(0, rows, PARTITIONS)]
    chunks = [(c0, min(recipe.chunk, cols - c0)) for c0 in range(0, cols, recipe.chunk)]
    chunked = [s for s in range(last + 1) if work[s] or s in sources.values() or
               any(w == s and k == "full" for w, k in zip(stored_in, kinds, strict=True))]
    items = [(t, s, c) for t in range(len(tiles)) for s in chunked for c in range(len(chunks))]
    row_inputs = [i for i, (_, kind) in enumerate(recipe.inputs) if kind in ("row", "mid")]
    loaded: dict[tuple[int, int, int, int], Any] = {}     # (tile, chunk or -1, input, pass or -1) → SBUF tile
    queue = issued = 0
    per_item = max(1, max(len(r) for r in reads))
    split = max(1, min(PARTITIONS // 32, -(-QUEUES // (PREFETCH * per_item))))

    def key(t: int, c: int, i: int, s: int) -> tuple[int, int, int, int]:
        return (t, c, i, -1 if keep and i in multi else s)

    def issue(upto: int) -> None:
        """The loads of the items before ``upto``: software pipelining, as the row layout's ``PREFETCH``."""
        nonlocal queue, issued
        while issued < min(upto, len(items)):
            t, s, c = items[issued]
            (r0, rw), (c0, cw) = tiles[t], chunks[c]
            wanted = [(ins[i][r0:r0 + rw, c0:c0 + cw], key(t, c, i, s)) for i in sorted(reads[s])]
            if issued == 0 or items[issued - 1][0] != t:           # the tile's first item: its row columns
                wanted += [(ins[i][r0:r0 + rw, :], (t, -1, i, -1)) for i in row_inputs]
            for region, k in wanted:
                if k not in loaded:
                    loaded[k] = move(None, region)
            issued += 1

    def move(dst: Any, src: Any) -> Any:
        """A load (``dst`` None: into a new tile) or store in pieces of partitions, as ``recipe.pipeline``
        splits the row layout's: about ``QUEUES`` DMAs in flight."""
        nonlocal queue
        target = dsl.sbuf(src.shape, src.dtype) if dst is None else dst
        queue = dma_pieces(dsl, target, src, dst is None, pieces(src.size * DTYPES[src.dtype].itemsize, split), queue)
        return target

    def fold(j: int, kind: str, op: str, x: Any, count: int, running: dict[int, Any]) -> None:
        """Fold chunk ``x`` into step ``j``'s running value (fp32): ``op`` along its rows (``reduce``: a column)
        or over the middle axis of its rows (``middle``, of ``count`` slices per row: whole slices per chunk)."""
        if kind == "reduce":
            part = dsl.reduce(op, x, axis=-1, dtype="fp32")
        else:
            slices = x.shape[1] * count // cols
            part = dsl.copy(x, dtype="fp32") if slices == 1 else _middle(dsl, op, x, slices, "fp32")
        if j in running:
            dsl.binary(op, running[j], part, out=running[j])
            dsl.release(part)
        else:
            running[j] = part

    leading = Leading(dsl, recipe)
    done = 0
    for t, (r0, rw) in enumerate(tiles):
        issue(done + PREFETCH)
        values: dict[int, Any] = {}           # the tile's columns, by step

        def get(r: Ref, s: int, c: int, made: dict[int, Any], t: int = t, rw: int = rw,
                values: dict[int, Any] = values) -> Any:
            """An operand: a column of the tile, or the tile's chunk ``c`` in pass ``s``."""
            kind, value = r
            if kind == "imm":
                return value
            c0, cw = chunks[c]
            if kind == "in":
                form = recipe.inputs[value][1]
                if form == "scalar":
                    return columns[value][:rw]
                if form == "vec":
                    return columns[value][:rw, c0:c0 + cw]
                return loaded[(t, -1, value, -1) if form in ("row", "mid") else key(t, c, value, s)]
            if phases[value] == "pre":
                made_once = pre[value]
                return made_once[:rw] if column[value] else made_once[:rw, c0:c0 + cw]
            return values[value] if column[value] else made[value]

        for s in range(last + 1):
            for j in once[s]:
                kind, op, operands, dt = recipe.steps[j]
                if kind == "lead":                  # a leading-axis reduction of a column
                    leading.add(j, get(operands[0], s, 0, {}), r0, 0, 1, t == 0)
                    continue
                values[j] = compute(dsl, kind, op, [get(r, s, 0, {}) for r in operands], dt, (rw, 1), 0, cols,
                                    recipe.elements)
            if s not in chunked:
                continue
            running: dict[int, Any] = {}
            for c, (c0, cw) in enumerate(chunks):
                done += 1
                issue(done + PREFETCH)
                made: dict[int, Any] = {}
                for j in work[s]:
                    kind, op, operands, dt = recipe.steps[j]
                    args = [get(r, s, c, made) for r in operands]
                    if kind == "lead":
                        leading.add(j, args[0], r0, c0, cols, t == 0)
                    elif kind not in _FOLDED:
                        made[j] = compute(dsl, kind, op, args, dt, (rw, cw), r0 * cols + c0, cols, recipe.elements)
                    else:
                        fold(j, kind, op, args[0], int(args[1]) if kind == "middle" else 0, running)
                    dead = [made.pop(x) for x in dying[s].get(j, ())]
                    if dead:
                        dsl.release(*dead)
                for out, (ref, _), k, when in zip(outs, recipe.outputs, kinds, stored_in, strict=True):
                    if k == "full" and when == s and not (ref[0] == "tmp" and ref[1] in late):
                        move(out[r0:r0 + rw, c0:c0 + cw], get(ref, s, c, made))
                for r, when in sources.items():
                    if when == s:
                        chunk = get(r, s, c, made)
                        fold_peak(dsl, chunk, peaks[r])
                        retained[r].append((chunk, r0, rw, c0, cw))
                        kept.add(id(chunk))
                finished = [loaded.pop(key(t, c, i, s)) for i in sorted(reads[s])
                            if not (keep and i in multi) or final[i] == s]
                dsl.release(*(x for x in (*made.values(), *finished) if id(x) not in kept))
            for j, total in running.items():
                dt = recipe.steps[j][3]
                values[j] = total if dt == "fp32" else dsl.copy(total, dtype=dt)
                if dt != "fp32":
                    dsl.release(total)
        for out, (ref, _), k in zip(outs, recipe.outputs, kinds, strict=True):
            if k in ("row", "mid"):
                dsl.store(out[r0:r0 + rw, :], get(ref, last, 0, {}), queue=queue % QUEUES)
                queue += 1
            elif k == "sc" and t == 0:
                dsl.store(out, get(ref, last, 0, {})[0:out.shape[0]], queue=queue % QUEUES)
                queue += 1
        dsl.release(*values.values(), *(loaded.pop((t, -1, i, -1)) for i in row_inputs))
    queue = finish(dsl, recipe, ins, outs, leading, columns, queue, pre)
    # per-tensor scaling: the amax over the partitions, then a second pass over the kept chunks
    scales = tensor_scales(dsl, recipe, peaks)
    items_kept = len(next(iter(retained.values()), []))
    for i in range(items_kept):
        for out, (ref, _) in zip(outs, recipe.outputs, strict=True):
            if ref[0] == "tmp" and ref[1] in late:
                _, element, (r,), dt = recipe.steps[ref[1]]
                chunk, r0, rw, c0, cw = retained[r][i]
                value = scaled_value(dsl, chunk, scales[r, element], element, dt)
                move(out[r0:r0 + rw, c0:c0 + cw], value)
                dsl.release(value)
        dsl.release(*{id(retained[r][i][0]): retained[r][i][0] for r in sources}.values())
    return tuple(outs)
