"""Control flow and the ops with no data semantics of their own: while, case, if, custom_call, collectives
on a single device, rng_bit_generator."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trnsim.errors import SimError, UnsupportedError
from trnsim.ir.graph import Node
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import semantics

Arrays = list[np.ndarray]

MAX_TRIPS = 10_000_000


@semantics("while", kind="control")
def _while(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """while cond(values): values = body(values)"""
    cond, body = node.regions
    values = list(args)
    for _ in range(MAX_TRIPS):
        if not bool(interp.call(cond, values)[0]):
            return values
        values = interp.call(body, values)
    raise SimError(f"while loop ran {MAX_TRIPS:,} iterations without ending", where=node.loc,
                   hint="check the loop condition; trnsim stops runaway loops")


@semantics("case", kind="control")
def _case(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """results = branches[index](), an out-of-range index runs the last branch"""
    index = int(args[0])
    branches = node.regions
    if not 0 <= index < len(branches):
        index = len(branches) - 1
    return interp.call(branches[index], [])


@semantics("if", kind="control")
def _if(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """results = pred ? true_branch() : false_branch()"""
    return interp.call(node.regions[0] if bool(args[0]) else node.regions[1], [])


@semantics("tuple", kind="data")
def _tuple(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """(flattened by the frontend) results = operands"""
    return list(args)


def _identity(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand (a single device: every collective of one participant is the identity)"""
    return list(args[: len(node.outputs)])


for _name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
              "collective_broadcast", "cross-replica-sum"):
    semantics(_name, kind="data")(_identity)


@semantics("replica_id", "partition_id", kind="source")
def _device_id(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = 0 (a single device)"""
    return [np.zeros((), node.out.type.np_dtype)]


# custom_call targets JAX emits for training programs, by name → semantics
CustomCall = Callable[[Node, Arrays, Interpreter], Arrays]
CUSTOM_CALLS: dict[str, CustomCall] = {
    "Sharding": _identity,
    "SPMDFullToShardShape": _identity,
    "SPMDShardToFullShape": _identity,
    "annotate_device_placement": _identity,
    "MoveToHost": _identity,
    "MoveToDevice": _identity,
    "X64Combine": _identity,
}


@semantics("custom_call", kind="data")
def _custom_call(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """results = the target's semantics (sharding annotations and placement hints are the identity)"""
    target = node.attrs.get("call_target_name", "")
    fn = CUSTOM_CALLS.get(target)
    if fn is None:
        raise UnsupportedError(
            f"custom_call target `{target}` is not supported", where=node.loc,
            hint=f"trnsim runs these custom_calls: {', '.join(sorted(CUSTOM_CALLS))}; a library call (LAPACK, "
                 "cuDNN) needs the plain-JAX form of the computation (for example jnp ops instead of "
                 "jnp.linalg)")
    return fn(node, args, interp)


# ---- rng_bit_generator: XLA's Philox-4x32-10 and Threefry-2x32-20 bit streams, bit for bit ----------------

_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_PHILOX_W = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))
_MASK = np.uint64(0xFFFFFFFF)


def philox4x32(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Philox-4x32-10 (Salmon et al., SC'11) over counters (n, 4) uint32 with a key (2,) uint32."""
    c = [counter[:, i].astype(np.uint64) for i in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for _ in range(10):
        p0 = _PHILOX_M[0] * c[0]
        p1 = _PHILOX_M[1] * c[2]
        c = [((p1 >> np.uint64(32)) ^ c[1] ^ k0) & _MASK, p1 & _MASK, ((p0 >> np.uint64(32)) ^ c[3] ^ k1) & _MASK,
             p0 & _MASK]
        k0 = (k0 + np.uint64(_PHILOX_W[0])) & _MASK
        k1 = (k1 + np.uint64(_PHILOX_W[1])) & _MASK
    return np.stack(c, axis=1).astype(np.uint32)


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Threefry-2x32 with 20 rounds (Salmon et al., SC'11; the form JAX and XLA use) over counters (n, 2)."""
    ks = [np.uint64(key[0]), np.uint64(key[1]), np.uint64(int(key[0]) ^ int(key[1]) ^ 0x1BD11BDA)]
    x0 = (counter[:, 0].astype(np.uint64) + ks[0]) & _MASK
    x1 = (counter[:, 1].astype(np.uint64) + ks[1]) & _MASK
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            x0 = (x0 + x1) & _MASK
            x1 = (((x1 << np.uint64(r)) | (x1 >> np.uint64(32 - r))) & _MASK) ^ x0
        x0 = (x0 + ks[(i + 1) % 3]) & _MASK
        x1 = (x1 + ks[(i + 2) % 3] + np.uint64(i + 1)) & _MASK
    return np.stack([x0, x1], axis=1).astype(np.uint32)


def _split64(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (values & _MASK).astype(np.uint32), (values >> np.uint64(32)).astype(np.uint32)


@semantics("rng_bit_generator", kind="random")
def _rng_bit_generator(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """(new_state, bits) as XLA computes them. The state's 32-bit words are [key lo, key hi, counter ...].
    THREE_FRY: one Threefry-2x32 call per 64 output bits, on the 64-bit counter (words 2, 3) plus i; the
    counter advances by the calls made. PHILOX (and DEFAULT): one Philox-4x32 block per 128 output bits, on
    the 128-bit counter (words 2–5; a two-word state's high half is its key), its low 64 bits plus i; the
    counter advances by the blocks made. Output words fill the result in order, little-endian."""
    state = np.ascontiguousarray(args[0])
    words = state.view(np.uint32).ravel()
    if words.size < 4:
        raise SimError(f"rng_bit_generator state of {words.size * 4} bytes; XLA's generators need at least 16",
                       where=node.loc, hint="use a u32[4] or u64[2] state (jax.random with the rbg implementation)")
    key = words[:2]
    counter = int(words[2]) | (int(words[3]) << 32)
    out_t = node.outputs[1].type
    itemsize = out_t.np_dtype.itemsize
    # one 32-bit word per element (narrower types keep its low bits), two for 64-bit types (low word first)
    shape = (*out_t.shape, 2) if itemsize == 8 else out_t.shape
    count = int(np.prod(shape, dtype=np.int64))
    algorithm = str(node.attrs.get("rng_algorithm", "DEFAULT"))
    new_words = words.copy()
    if algorithm == "THREE_FRY":
        # NOTE: XLA pairs the two words of each call along one dimension: the first even one, else the largest,
        # padded by one; calls run row-major over the shape with that dimension halved
        padded = list(shape) or [1]
        even = [i for i, n in enumerate(padded) if n % 2 == 0]
        dim = even[0] if even else int(np.argmax(padded))
        padded[dim] += padded[dim] % 2
        halved = list(padded)
        halved[dim] //= 2
        calls = int(np.prod(halved, dtype=np.int64))
        lo, hi = _split64(np.arange(calls, dtype=np.uint64) + np.uint64(counter))
        pair = threefry2x32(np.stack([lo, hi], axis=1), key)              # (calls, 2)
        x0, x1 = pair[:, 0].reshape(halved), pair[:, 1].reshape(halved)
        stream = np.stack([x0, x1], axis=dim + 1).reshape(padded)
        stream = stream[tuple(slice(0, n) for n in (shape or (1,)))].ravel()[:count]
        advance = calls
    else:
        blocks = -(-count // 4)
        seq = np.arange(blocks, dtype=np.uint64) + np.uint64(counter)
        high = words[4:6] if words.size >= 6 else words[0:2]
        lo, hi = _split64(seq)
        counters = np.stack([lo, hi, np.full(blocks, high[0], np.uint32), np.full(blocks, high[1], np.uint32)],
                            axis=1)
        stream = philox4x32(counters, key).ravel()[:count]
        advance = blocks
    nxt = (counter + advance) & 0xFFFFFFFFFFFFFFFF
    new_words[2], new_words[3] = nxt & 0xFFFFFFFF, nxt >> 32
    new_state = new_words.view(state.dtype).reshape(state.shape)
    if itemsize == 8:
        pairs = stream.reshape(-1, 2).astype(np.uint64)
        values = pairs[:, 0] | (pairs[:, 1] << np.uint64(32))
    else:
        values = stream
    return [new_state, values.astype(np.dtype(f"u{itemsize}")).view(out_t.np_dtype).reshape(out_t.shape)]


@semantics("rng", kind="random")
def _rng(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = random numbers of the result shape: UNIFORM in [a, b) (integers too), NORMAL with mean a and
    standard deviation b; deterministic (seeded by the op's location), as the spec leaves the stream open"""
    import zlib

    a, b = (np.asarray(x).astype(np.float64) for x in args[:2])
    t = node.out.type
    rng = np.random.Generator(np.random.Philox(zlib.crc32(f"{node.loc}|{t}".encode())))
    if str(node.attrs.get("rng_distribution", "UNIFORM")).endswith("NORMAL"):
        return [rng.normal(a, b, t.shape).astype(np.float32).astype(t.np_dtype)]
    if t.dt.is_float:
        values = (a + (b - a) * rng.random(t.shape)).astype(np.float32).astype(t.np_dtype)
        # NOTE: rounding to the result type may reach b, which [a, b) excludes
        return [np.where(values.astype(np.float64) >= b, np.asarray(a).astype(t.np_dtype), values)]
    lo, hi = int(a), int(b)
    values = rng.integers(lo, hi, t.shape) if hi > lo else np.full(t.shape, lo)
    return [values.astype(t.np_dtype)]
