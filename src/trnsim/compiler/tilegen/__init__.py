"""Generated tile code for fused elementwise and reduction steps, timed by the instruction-level model.

A fused group whose ops all have a NeuronCore instruction (ALU ops on VectorE, activation functions on
ScalarE, casts, compares, selects, iotas) becomes a kernel in the kernel language. The iteration space is
the group's largest tensor, laid out either *flat* (``[128 partitions, N / 128]`` in column tiles of up to
``TILE_COLS``, for pure elementwise groups) or in *rows* (``[N / cols, cols]`` in tiles of 128 rows, whole
rows in the free dimension, for groups that reduce or broadcast). Each tile is loaded, every op applied in
SBUF (scalar constants as instruction immediates, ``tensor_scalar``) and the group's outputs stored —
intermediates never leave SBUF. Identities (``x * 1``, ``max(x, -inf)``, …) take no instruction, and a
ScalarE activation absorbs a column subtracted before it (its bias) and a sum of its result along the rows
(its accumulate). Loads run ahead of the compute, in pieces, to keep about 16 DMAs in flight
(``recipe.pipeline``). The kernel is traced once per *recipe* (op sequence, sizes, dtypes) and timed in
timing-only mode; the compiler uses that time for the step.

Values that are not the iteration space's size are *materialised* where they are broadcast into it:

- a scalar (computed, or a scalar input) is a ``[rows, 1]`` column, the per-partition scalar of
  ``tensor_scalar``; a value per row (a last-axis ``tensor_reduce``) is such a column too;
- a tensor broadcast along the leading axes (a bias ``[C]``, a position table ``[T, C]`` over the batch) is
  loaded once as a ``[128, cols]`` tile (``128 / T`` DMAs) when its period divides a tile, else per tile;
- a tensor broadcast along *middle* axes (an attention mask over heads ``[B, S] → [B, H, S]``, a GQA head repeat
  ``[B, T, kv, d] → [B, T, kv, rep, d]``, a per-channel table over space ``[N, C] → [N, H, W, C]``), viewed
  ``[outer, inner]`` with each row repeated ``R`` times, is loaded per tile by DMAs whose source repeats its rows
  through a stride-0 dimension (``recipe.repeat_runs``: one per table row a tile holds, or per run of repeats);
  a tile whose DMAs would be the last one's (a mask row over 128 rows or more) is reused. With the last axis
  broadcast too (``[B, S] → [B, H, S, D]``) it is a column per tile the same way. Alone, such a broadcast is a
  kernel of DMAs only;
- an ``iota`` is GpSimd's ``iota`` of the flat element index, turned into the index along its axis by
  ``mod`` / ``sub`` / ``div`` (exact integers in fp32 below 2**24), and a compare/select of it a mask:
  causal and one-hot masks;
- a constant operand of ``select`` is a constant tile (``memset``).

Steps whose operands are all block-invariant (constants, broadcast tables, masks whose period divides a tile) run once
before the tile loop (phase ``pre``). Reductions over the *leading* axes (bias and norm-scale gradients ``[B·T, C] →
[C]``, the mean of a loss) accumulate on TensorE: each row tile ``x[rows, C]`` is the moving operand of a matmul
against a 0/1 selection matrix ``S[rows, P]`` (a ones column when everything reduces to ``P = 1``), ``acc[P, C] += S.T
@ x`` in PSUM across all tiles; sums wider than PSUM's 8 banks of 512 fp32 (a 70B model's 8192 columns) fold their
columns onto PSUM partitions in strips, each strip's matmuls through a stationary that puts it on partitions of its
own (``leading``). The result and the ops that follow it (phase ``post``) run once after the loop, with group inputs
of the result's shape loaded then, and scalars made of immediates and scalar inputs alone before it (a while loop's
``i < n and any(x)``); an op of immediates alone is folded by the reference interpreter. A leading-axis max, min or
float product keeps a running ``[128, C]`` tile instead (VectorE), reduced across partitions after the loop: by GpSimd
when everything reduces to one row, else (rows ``p mod P`` of a tile, ``P`` dividing 128) by a TensorE transpose and a
reduce over the middle free axis. A reduction over *middle* axes (the gradient of a GQA key/value head repeat, ``[B,
T, kv, rep, d] → [B, T, kv, d]``) makes the rows: ``[outer, R · inner]``, each tile reduced to ``[rows, inner]`` on
VectorE (``R - 1`` tensor_tensor ops over its slices, or for narrow ``inner`` one tensor_reduce over the middle axis
of a ``[rows, R, inner]`` copy); the ops after it, and inputs of its size, work on those narrower tiles. A group that
reads nothing (a constant broadcast and converted) stores a constant tile. The MX ``qdq`` autocast puts before a
matmul is an ``mx`` step in the row layout: block amax by one free-axis ``tensor_reduce`` of the tile viewed ``[rows,
cols / 32, 32]``, the E8M0 scale from its exponent bits (an integer ``and``), the element rounding a dtype-converting
copy; blocks down 32 rows run the same on the TensorE transpose of the tile. An int4 ``qdq`` (a ``group`` step) is the
same with an fp32 scale per 32 elements: ``amax / 7``, the division by it rounded to nearest even by writing int4
codes, dequantized by a multiply. A per-tensor scaled (fp8) ``qdq`` needs the whole tensor's amax first: each tile of
its source stays in SBUF, ScalarE's ``abs`` with a fused max keeps a running column, and after the loop (phase
``late``) GpSimd reduces it across partitions and a second pass scales, rounds (a dtype-converting copy) and stores
the kept tiles (with rows in chunks, the kept chunks); a source larger than ``KEEP_BYTES`` falls back. Rows longer
than ``MAX_ROW`` (a softmax over a large vocabulary) run in column chunks (``chunked``): a reduction along them
accumulates chunk by chunk into a column (a middle-axis one, in chunks of whole ``inner`` slices, into a ``[rows,
inner]`` tile: a global average pooling), and the ops that read it run in a later pass over the tile's chunks,
remaking the elementwise values they need; a leading-axis reduction takes the chunks as they come. Groups that fit
none of this (reductions over two separate blocks of axes, broadcasts along two separate blocks of middle axes or of a
value made in the group, tables broadcast along middle axes with rows in chunks, a middle-axis reduction next to other
ops along rows or with ``inner`` over ``MAX_ROW``, leading-axis reductions with a period over 128 rows (a PSUM
partition per result row) or sums that would fold onto more than 128 partitions, leading-axis maxima whose period does
not divide 128 or over more than ``MAX_ROW`` columns, iotas of a flat layout of 2**24 elements or more, MX blocks or
int4 groups that do not tile the quantized axis, ops without an instruction, integer products along rows (the
``int_reduce`` kernel's), 32-bit integer sums and maxima of values beyond 2**24; with rows in chunks also iotas) keep
the analytic cost of ``costs.fused_cost``; so do kernels whose working set does not fit in SBUF.

Integers: VectorE computes in fp32, exact up to 2**24. Every integer value of a group has an interval
(``ranges``: from input types, constants and iota sizes, op by op), and an op whose operands and unwrapped result lie
within ±2**24 (index arithmetic, 8- and 16-bit sums) is one ALU instruction, its result wrapped into a narrow type by
an integer ``and``; 32-bit add, subtract, multiply, divide, remainder, max, min, clamp, abs, compare and select of
values beyond that, and 16-bit products, are ``word`` steps: ``compiler.intmath``'s exact forms (16-bit halves, byte
limbs, fp32 quotient estimates corrected exactly, selects by bits). A 64-bit integer value whose interval is exact in
fp32 (``jax.random``'s u64 counter iotas) is computed as int32; other 64-bit values keep the analytic cost. Bitwise
ops and shifts act on the exact integers, and 32-bit bitcasts copy bits by an integer ``or 0``.
"""

from __future__ import annotations

from trnsim.compiler.tilegen.build import lowered, recipe_for
from trnsim.compiler.tilegen.emit import kernel
from trnsim.compiler.tilegen.onehot import index_recipe
from trnsim.compiler.tilegen.recipe import PARTITIONS, TILE_COLS, Recipe, Ref, Step, input_shapes, output_shapes
from trnsim.compiler.tilegen.timing import TileTime, clear_memo, fused_time, kernel_program

__all__ = ["PARTITIONS", "TILE_COLS", "Recipe", "Ref", "Step", "TileTime", "clear_memo", "fused_time", "index_recipe",
           "input_shapes", "kernel", "kernel_program", "lowered", "output_shapes", "recipe_for"]
