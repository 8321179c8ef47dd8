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


# ---- rng_bit_generator: Philox-4x32-10 (the NeuronCore's hardware RNG family), counter in the state -----

_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_PHILOX_W = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))


def philox4x32(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Philox-4x32-10 (Salmon et al., SC'11) over counters (n, 4) uint32 with a key (2,) uint32."""
    c = [counter[:, i].astype(np.uint64) for i in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0 = _PHILOX_M[0] * c[0]
        p1 = _PHILOX_M[1] * c[2]
        c = [((p1 >> np.uint64(32)) ^ c[1] ^ k0) & mask, p1 & mask, ((p0 >> np.uint64(32)) ^ c[3] ^ k1) & mask,
             p0 & mask]
        k0 = (k0 + np.uint64(_PHILOX_W[0])) & mask
        k1 = (k1 + np.uint64(_PHILOX_W[1])) & mask
    return np.stack(c, axis=1).astype(np.uint32)


@semantics("rng_bit_generator", kind="random")
def _rng_bit_generator(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """(new_state, bits) = Philox-4x32-10 stream keyed by the state; the state's counter advances by the
    number of 128-bit blocks used (THREE_FRY requests also use Philox: the bits differ from XLA's, the
    distribution does not)"""
    state = np.ascontiguousarray(args[0])
    words = state.view(np.uint32).ravel()
    key = words[:2] if words.size >= 2 else np.array([words[0], 0], np.uint32)
    counter0 = int(words[2]) | (int(words[3]) << 32) if words.size >= 4 else 0
    out_t = node.outputs[1].type
    nbytes = out_t.size * out_t.np_dtype.itemsize
    blocks = -(-nbytes // 16)
    counters = np.zeros((blocks, 4), np.uint32)
    seq = np.arange(blocks, dtype=np.uint64) + np.uint64(counter0)
    counters[:, 0] = (seq & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    counters[:, 1] = (seq >> np.uint64(32)).astype(np.uint32)
    bits = philox4x32(counters, key).view(np.uint8).ravel()[:nbytes]
    new_words = words.copy()
    if new_words.size >= 4:
        nxt = counter0 + blocks
        new_words[2] = nxt & 0xFFFFFFFF
        new_words[3] = (nxt >> 32) & 0xFFFFFFFF
    else:
        new_words[-1] = new_words[-1] + np.uint32(blocks)
    new_state = new_words.view(state.dtype).reshape(state.shape)
    return [new_state, bits.view(out_t.np_dtype).reshape(out_t.shape)]


@semantics("rng", kind="random")
def _rng(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = random numbers of the result shape: UNIFORM in [a, b) (integers too), NORMAL with mean a and
    standard deviation b; deterministic (seeded by the op's location), as the spec leaves the stream open"""
    import zlib

    a, b = (np.asarray(x).astype(np.float64) for x in args[:2])
    t = node.out.type
    rng = np.random.Generator(np.random.Philox(zlib.crc32(f"{node.loc}|{t}".encode())))
    if str(node.attrs.get("rng_distribution", "UNIFORM")).endswith("NORMAL"):
        values = rng.normal(a, b, t.shape)
    elif t.dt.is_float:
        values = a + (b - a) * rng.random(t.shape)
        values = np.where(values >= b, a, values)       # rounding must not reach b
    else:
        lo, hi = int(a), int(b)
        values = rng.integers(lo, hi, t.shape) if hi > lo else np.full(t.shape, lo)
    return [values.astype(np.float32).astype(t.np_dtype) if t.dt.is_float else values.astype(t.np_dtype)]
