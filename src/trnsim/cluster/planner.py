"""The parallel-layout planner: the fastest training setups of a model on a cluster that fit in memory.

    >>> from trnsim import hw
    >>> from trnsim.cluster import models, planner
    >>> found = planner.search(models.get("gpt3-1.3b"), hw.get("trn3"), 16, space=planner.Space(tp=(2,), zero=(1,)))
    >>> found.best.plan.tp, found.best.fits, found.best.tokens_per_s == max(s.tokens_per_s for s in found.ranked)
    (2, True, True)

The search space (:class:`Space`; an option the caller fixes is a one-value range) is every combination of

=============  ==========================================================================================
TP             divisors of the chips, at most one node (TP's all-reduces want the fastest links), that
               split the heads and the MLP (``config.tp_ok``)
PP             divisors of the layers, at most the chips
CP             1, 2, 4, 8, 16 with the sequence divisible by 2·CP
EP             divisors of the experts (mixture of experts), else 1
SP             on and off where TP > 1
interleave V   1, and with PP > 1 every divisor of the layers per stage
ZeRO           0, 1, 2, 3
recompute      none, selective, full
micro-batch    1, 2, 4, 8
=============  ==========================================================================================

DP is what is left, chips / (TP·PP·CP). Everything else (precision, optimizer, sequence, fine-tuning,
attention kernel) comes from the caller's :class:`TrainingConfig`, and the global batch is the same for every
candidate: the config's, or ≈ 4 Mi tokens (``config.TOKENS_PER_BATCH``), so that throughputs compare one job.

Stages, cheapest first; each rejection is counted under a reason of :data:`REASONS`, in configurations:

1. *layout* (TP, PP, CP, EP) × ZeRO, in this process: TP·PP·CP divides the chips; DP divides the global
   batch; ``resolve`` accepts the least constrained setup (micro-batch 1, no interleaving, SP off); and the
   model states (weights, gradients, optimizer; a static check) fit in HBM — none of the options below
   changes them, so a layout that fails rejects all its configurations at once;
2. *rules* of each configuration (SP, V, recompute, micro-batch): the batch and interleaving divisibility,
   SP's token split, then ``resolve``;
3. *estimate*: :func:`estimate_plan`, rejected when its memory (activations on top of the states) does not
   fit.

Stages 2 and 3 run in chunks on a process pool (``concurrent.futures``; fork on Linux, else the platform's
default start method; each worker receives the model and target once), or in this process for small searches,
on one core, or when no worker can be started. Results do not depend on which: candidates are enumerated in a
fixed order, chunks are merged in that order, and plans are ranked by throughput with ties broken by
:func:`tie_key` (the simpler setup first). ``SearchResult.top`` holds the best plan of each of the best
``top`` parallel layouts (TP, PP, CP, DP, EP), so that the list shows alternatives rather than one layout's
micro-batch and ZeRO variants; ``SearchResult.ranked`` has every evaluated configuration.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, fields, replace
from multiprocessing.context import BaseContext
from typing import NamedTuple

from trnsim.cluster.config import (
    PRECISIONS,
    RECOMPUTE,
    TOKENS_PER_BATCH,
    ClusterConfigError,
    Plan,
    TrainingConfig,
    resolve,
    tp_ok,
)
from trnsim.cluster.estimate import Estimate, estimate_plan
from trnsim.cluster.memory import memory
from trnsim.cluster.models import ModelSpec
from trnsim.fabric import MAX_CHIPS, FabricError
from trnsim.hw.spec import ChipSpec

# Why a configuration was rejected, and what to change (in the order the summary lists them).
REASONS: dict[str, str] = {
    "chips": "TP·PP·CP must divide the chips (DP · TP · PP · CP = chips): fix --tp/--pp/--cp to divisors of "
             "the chip count, or change --chips",
    "global batch": "the global batch must be a multiple of DP × micro-batch: raise --global-batch, or fix a "
                    "larger TP·PP·CP",
    "interleave": "the interleaved schedule needs the micro-batches per replica divisible by PP: raise "
                  "--global-batch or lower --interleave",
    "sequence parallel": "SP needs the micro-batch's tokens divisible by TP: use --no-sp or another --micro-batch",
    "rules": "a setup rule (see the example): change the option it names",
    "topology": "the plan's communication groups cannot be laid out on the cluster's fabric: fix EP or CP lower",
    "memory: model states": "weights, gradients and optimizer states alone exceed usable HBM: raise --zero, TP "
                            "or PP, or use more chips",
    "memory: activations": "activations exceed the HBM left: recompute more, lower the micro-batch, or raise TP, "
                           "PP or CP",
}
CP_RANGE = (1, 2, 4, 8, 16)
MICRO_BATCH_RANGE = (1, 2, 4, 8)
ZERO_RANGE = (0, 1, 2, 3)
POOL_MIN = 4096  # automatic worker count: fewer configurations than this run in this process
CHUNK = 256  # configurations per pool task (at most; smaller when that gives too few chunks per worker)


@dataclass(frozen=True, kw_only=True)
class Space:
    """Values to try for each searched option; ``None`` = the default range (module docstring)."""

    dp: tuple[int, ...] | None = None
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    sp: tuple[bool, ...] | None = None
    interleave: tuple[int, ...] | None = None
    zero: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    micro_batch: tuple[int, ...] | None = None

    def fixed(self) -> dict[str, object]:
        """The options fixed to one value."""
        return {f.name: v[0] for f in fields(self) if (v := getattr(self, f.name)) is not None and len(v) == 1}


SEARCHED: tuple[str, ...] = tuple(f.name for f in fields(Space))


class Candidate(NamedTuple):
    """One point of the search space (DP derived)."""

    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    sp: bool
    interleave: int
    zero: int
    recompute: str
    micro_batch: int

    def layout(self) -> str:
        text = f"TP {self.tp} × PP {self.pp}" + (f" × CP {self.cp}" if self.cp > 1 else "")
        return f"{text} × DP {self.dp}" + (f", EP {self.ep}" if self.ep > 1 else "") + f", ZeRO-{self.zero}"

    def describe(self) -> str:
        extra = (", SP" if self.sp else "") + (f", V={self.interleave}" if self.interleave > 1 else "")
        return f"{self.layout()}{extra}, recompute {self.recompute}, micro-batch {self.micro_batch}"


class Scored(NamedTuple):
    """An evaluated candidate: enough to rank it; :attr:`SearchResult.top` holds the full estimates."""

    candidate: Candidate
    step_time_s: float
    tokens_per_s: float
    mfu: float
    memory_per_chip_bytes: float


@dataclass(frozen=True, slots=True)
class Rejection:
    """How many configurations one reason rejected, the first of them as an example, and what to change."""

    reason: str
    count: int
    example: str

    @property
    def advice(self) -> str:
        return REASONS[self.reason]


@dataclass(frozen=True)
class SearchResult:
    """A finished search: the full estimates of the best plan of the best ``top`` layouts (best first), every
    evaluated configuration ranked, and the rejections by reason."""

    model: str
    target: str
    chips: int
    global_batch: int
    seq_len: int
    requested: Space
    space: Space
    considered: int
    ranked: tuple[Scored, ...]
    top: tuple[Estimate, ...]
    rejections: tuple[Rejection, ...]
    workers: int
    seconds: float

    @property
    def best(self) -> Estimate:
        return self.top[0]

    @property
    def evaluated(self) -> int:
        return len(self.ranked)

    @property
    def rejected(self) -> int:
        return sum(r.count for r in self.rejections)

    def to_dict(self) -> dict[str, object]:
        return {"model": self.model, "target": self.target, "chips": self.chips, "global_batch": self.global_batch,
                "seq_len": self.seq_len, "considered": self.considered, "evaluated": self.evaluated,
                "rejected": self.rejected, "workers": self.workers, "seconds": self.seconds,
                "fixed": self.requested.fixed(),
                "space": {f.name: (list(v) if (v := getattr(self.space, f.name)) is not None else "auto")
                          for f in fields(self.space)},
                "rejections": [{"reason": r.reason, "count": r.count, "example": r.example, "advice": r.advice}
                               for r in self.rejections],
                "plans": [{"rank": i + 1} | e.to_dict() for i, e in enumerate(self.top)]}


class PlanSearchError(ClusterConfigError):
    """No configuration in the search space is feasible; ``problems`` gives each reason with an example."""

    def __init__(self, problems: list[str], *, where: str) -> None:
        super().__init__(problems, where=where)
        self.hint = "change or unfix the options named above (see `trnsim plan --help`)"


_RECOMPUTE_ORDER = {name: i for i, name in enumerate(RECOMPUTE)}


def tie_key(c: Candidate) -> tuple[int, int, int, int, int, int, int, int, bool]:
    """Among equally fast plans, the simpler first: less model parallelism, no interleaving, lower ZeRO, less
    recomputation, smaller micro-batches, SP on."""
    return (c.pp, c.tp, c.cp, c.ep, c.interleave, c.zero, _RECOMPUTE_ORDER.get(c.recompute, len(RECOMPUTE)),
            c.micro_batch, not c.sp)


def rank_key(s: Scored) -> tuple[float, tuple[int, int, int, int, int, int, int, int, bool]]:
    return (-s.tokens_per_s, tie_key(s.candidate))


# --- the search space ---------------------------------------------------------------------------------------

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# Default range of each option that does not depend on another option's value.
DEFAULT_RANGES: dict[str, Callable[[ModelSpec, ChipSpec, int, int], tuple[object, ...]]] = {
    "tp": lambda m, spec, chips, seq: tuple(t for t in _divisors(min(chips, spec.topology.chips_per_node))
                                            if chips % t == 0 and tp_ok(m, t)),
    "pp": lambda m, spec, chips, seq: tuple(p for p in _divisors(m.layers) if p <= chips),
    "cp": lambda m, spec, chips, seq: tuple(c for c in CP_RANGE if c == 1 or (c <= chips and seq % (2 * c) == 0)),
    "ep": lambda m, spec, chips, seq: tuple(_divisors(m.experts)) if m.moe else (1,),
    "zero": lambda m, spec, chips, seq: ZERO_RANGE,
    "recompute": lambda m, spec, chips, seq: tuple(RECOMPUTE),
    "micro_batch": lambda m, spec, chips, seq: MICRO_BATCH_RANGE,
}


def _sp_range(space: Space, tp: int) -> tuple[bool, ...]:
    """SP values for one TP (SP is a no-op without TP, so TP 1 has only "off")."""
    values = space.sp if space.sp is not None else (True, False)
    return tuple(dict.fromkeys(v and tp > 1 for v in values))


def _interleave_range(space: Space, layers: int, pp: int) -> tuple[int, ...]:
    if space.interleave is not None:
        return space.interleave
    return (1,) + (tuple(v for v in _divisors(layers // pp) if v > 1) if pp > 1 and layers % pp == 0 else ())


@dataclass(frozen=True, slots=True)
class _Job:
    """What every worker needs: the model, the target and the options shared by all candidates."""

    model: ModelSpec
    spec: ChipSpec
    chips: int
    base: TrainingConfig
    global_batch: int
    seq_len: int

    def config(self, c: Candidate) -> TrainingConfig:
        return replace(self.base, dp=c.dp, tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep, sp=c.sp, interleave=c.interleave,
                       zero=c.zero, recompute=c.recompute, micro_batch=c.micro_batch,
                       global_batch=self.global_batch, seq_len=self.seq_len)

    def plan(self, c: Candidate) -> Plan:
        return resolve(self.model, self.spec, self.chips, self.config(c))


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


class _Tally:
    """Rejections by reason: counts and the first example, merged in candidate order."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, str] = {}

    def add(self, reason: str, count: int, example: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + count
        self.examples.setdefault(reason, example)

    def merge(self, other: dict[str, tuple[int, str]]) -> None:
        for reason, (count, example) in other.items():
            self.add(reason, count, example)

    def frozen(self) -> dict[str, tuple[int, str]]:
        return {r: (n, self.examples[r]) for r, n in self.counts.items()}

    def rejections(self) -> tuple[Rejection, ...]:
        return tuple(Rejection(r, self.counts[r], self.examples[r]) for r in REASONS if r in self.counts)


def _layouts(job: _Job, space: Space, tally: _Tally) -> Iterator[Candidate]:
    """Stage 1: every configuration of every layout (× ZeRO) that passes the layout checks, in a fixed order;
    rejected layouts are tallied with the number of configurations they stood for."""
    m, chips, gb = job.model, job.chips, job.global_batch
    recomputes, micros = space.recompute or (), space.micro_batch or ()
    for pp in space.pp or ():
        vs = _interleave_range(space, m.layers, pp)
        for tp in space.tp or ():
            sps = _sp_range(space, tp)
            per_layout = len(sps) * len(vs) * len(recomputes) * len(micros)
            for cp in space.cp or ():
                mp = tp * pp * cp
                for dp in space.dp or (max(1, chips // mp),):
                    for ep in space.ep or ():
                        for zero in space.zero or ():
                            c = Candidate(tp, pp, cp, ep, dp, False, 1, zero, "selective", 1)
                            if dp * mp != chips:
                                tally.add("chips", per_layout, f"{c.layout()}: {dp} × {mp} ≠ {chips} chips")
                            elif gb % dp:
                                tally.add("global batch", per_layout, f"{c.layout()}: global batch {gb} is not "
                                          f"a multiple of DP {dp}")
                            elif (problem := _layout_problem(job, c)) is not None:
                                tally.add(problem[0], per_layout, problem[1])
                            else:
                                for sp in sps:
                                    for v in vs:
                                        for rec in recomputes:
                                            for micro in micros:
                                                yield Candidate(tp, pp, cp, ep, dp, sp, v, zero, rec, micro)


def _layout_problem(job: _Job, c: Candidate) -> tuple[str, str] | None:
    """``resolve`` on the least constrained configuration of a layout, and the model states' memory."""
    try:
        plan = job.plan(c)
    except ClusterConfigError as exc:
        return "rules", f"{c.layout()}: {exc.problems[0]}"
    mb = memory(job.model, job.spec, plan)
    # NOTE: weights, gradients and optimizer states do not depend on SP, interleaving, recomputation or the
    # micro-batch, and the total only adds to them: a layout whose states exceed HBM fits in no configuration.
    states = mb.weights + mb.gradients + mb.optimizer
    if states > mb.usable:
        return "memory: model states", f"{c.layout()}: {_gb(states)} of states, {_gb(mb.usable)} usable"
    return None


# Stage 2: per-configuration rules, each returning what is wrong (or None), checked in order.
def _batch(job: _Job, c: Candidate) -> str | None:
    replica = c.dp * c.micro_batch
    if job.global_batch % replica:
        return f"global batch {job.global_batch} is not a multiple of DP {c.dp} × micro-batch {c.micro_batch}"
    return None


def _interleave(job: _Job, c: Candidate) -> str | None:
    m = job.global_batch // (c.dp * c.micro_batch)
    if c.interleave > 1 and m % c.pp:
        return f"{m} micro-batches per replica are not divisible by PP {c.pp}"
    return None


def _sequence_parallel(job: _Job, c: Candidate) -> str | None:
    tokens = c.micro_batch * job.seq_len // c.cp
    if c.sp and tokens % c.tp:
        return f"{tokens} tokens per micro-batch are not divisible by TP {c.tp}"
    return None


RULES: tuple[tuple[str, Callable[[_Job, Candidate], str | None]], ...] = (
    ("global batch", _batch), ("interleave", _interleave), ("sequence parallel", _sequence_parallel))


ChunkResult = tuple[list[Scored], dict[str, tuple[int, str]]]


def _evaluate(job: _Job, chunk: Sequence[Candidate]) -> ChunkResult:
    """Stages 2 and 3 for a chunk of candidates."""
    scored: list[Scored] = []
    tally = _Tally()
    for c in chunk:
        problem = next(((reason, text) for reason, rule in RULES if (text := rule(job, c)) is not None), None)
        if problem is not None:
            tally.add(problem[0], 1, f"{c.describe()}: {problem[1]}")
            continue
        try:
            plan = job.plan(c)
        except ClusterConfigError as exc:
            tally.add("rules", 1, f"{c.describe()}: {exc.problems[0]}")
            continue
        try:
            est = estimate_plan(job.model, job.spec, plan)
        except FabricError as exc:
            tally.add("topology", 1, f"{c.describe()}: {exc.message}")
            continue
        if not est.fits:  # NOTE: the estimate's memory model is most of its cost: checking it first is slower
            mb = est.memory
            tally.add("memory: activations", 1, f"{c.describe()}: needs {_gb(mb.total)} ({_gb(mb.activations)} "
                      f"activations), {_gb(mb.usable)} usable")
            continue
        scored.append(Scored(c, est.step_time_s, est.tokens_per_s, est.mfu, est.memory_per_chip_bytes))
    return scored, tally.frozen()


# --- workers ------------------------------------------------------------------------------------------------

_worker_job: _Job | None = None


def _init_worker(job: _Job) -> None:
    global _worker_job
    _worker_job = job


def _run_chunk(chunk: Sequence[Candidate]) -> ChunkResult:
    assert _worker_job is not None, "worker not initialised"
    return _evaluate(_worker_job, chunk)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _context() -> BaseContext:
    # NOTE: on Linux, fork starts workers in milliseconds and they inherit warm caches; the pool forks all its
    # workers at the first submit, before the progress bar starts its thread, so no lock is held across the
    # fork. Elsewhere (macOS system libraries are not fork-safe) the platform's default start method is used:
    # workers then receive the job by pickle through the initializer; nothing else is inherited.
    return multiprocessing.get_context("fork" if sys.platform == "linux" else None)


class _Progress:
    """A rich progress bar on stderr when it is a terminal; nothing otherwise."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("planning"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("plan", total=total)
            self.bar.start()

    def advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _run(job: _Job, chunks: list[list[Candidate]], workers: int, show: bool) -> tuple[list[ChunkResult], int]:
    """Every chunk's result, in chunk order, and the number of processes that computed them."""
    results: list[ChunkResult | None] = [None] * len(chunks)
    used = 1
    progress: _Progress | None = None
    if workers > 1 and len(chunks) > 1:
        try:
            pool = ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=_init_worker,
                                       initargs=(job,))
            try:
                futures: list[Future[ChunkResult]] = [pool.submit(_run_chunk, ch) for ch in chunks]
                progress = _Progress(sum(map(len, chunks)), show)
                for i, fut in enumerate(futures):
                    results[i] = fut.result()
                    progress.advance(len(chunks[i]))
                used = workers
            finally:  # on an error or Ctrl-C, do not wait for the queued chunks
                pool.shutdown(cancel_futures=True)
        except (OSError, BrokenProcessPool, NotImplementedError, PermissionError):
            used = 1  # no workers here (sandbox, no semaphores): finish in this process
    progress = progress or _Progress(sum(map(len, chunks)), show)
    try:
        for i, ch in enumerate(chunks):
            if results[i] is None:
                results[i] = _evaluate(job, ch)
                progress.advance(len(ch))
    finally:
        progress.close()
    return [r for r in results if r is not None], used


# --- the search ---------------------------------------------------------------------------------------------

def search(model: ModelSpec, spec: ChipSpec, chips: int, config: TrainingConfig | None = None,
           space: Space | None = None, *, top: int = 10, workers: int | None = None,
           progress: bool | None = None) -> SearchResult:
    """The fastest setups of ``model`` on ``chips`` × ``spec`` that fit in memory (module docstring).

    ``config`` gives the options that are not searched; fix a searched option through ``space`` (for example
    ``Space(tp=(8,))``). ``workers``: processes for stages 2 and 3 (default: one per core, in this process for
    fewer than ``POOL_MIN`` configurations; 1 = in this process). ``progress``: a bar on stderr (default:
    when stderr is a terminal). Raises :class:`PlanSearchError` listing every reason when nothing fits."""
    start = time.perf_counter()
    base = config or TrainingConfig()
    where = f"plan for {model.name} on {chips} × {spec.name}"
    seq = base.seq_len or model.seq_len
    gb = base.global_batch or max(1, TOKENS_PER_BATCH // seq)
    requested = space or Space()
    problems = _request_problems(model, spec, chips, base, requested, seq)
    if problems:
        raise PlanSearchError(problems, where=where)
    space = _resolved(requested, model, spec, chips, seq)
    job = _Job(model, spec, chips, base, gb, seq)

    tally = _Tally()
    candidates = list(_layouts(job, space, tally))
    cores = available_cores()
    n_workers = workers if workers is not None else (cores if len(candidates) >= POOL_MIN else 1)
    n_workers = max(1, min(n_workers, -(-len(candidates) // 16) or 1))
    size = max(16, min(CHUNK, -(-len(candidates) // (4 * n_workers)) or 1))
    chunks = [candidates[i:i + size] for i in range(0, len(candidates), size)]
    results, used = _run(job, chunks, n_workers, sys.stderr.isatty() if progress is None else progress)

    scored: list[Scored] = []
    for part, rejected in results:
        scored += part
        tally.merge(rejected)
    scored.sort(key=rank_key)
    rejections = tally.rejections()
    considered = len(scored) + sum(r.count for r in rejections)
    if not scored:
        raise PlanSearchError([f"{r.reason}: {r.count:,} configurations, e.g. {r.example}\n      → {r.advice}"
                               for r in rejections] or ["the search space is empty"], where=where)
    best = tuple(estimate_plan(model, spec, job.plan(s.candidate)) for s in _best_layouts(scored, max(1, top)))
    return SearchResult(model=model.name, target=spec.name, chips=chips, global_batch=gb, seq_len=seq,
                        requested=requested, space=space, considered=considered, ranked=tuple(scored), top=best,
                        rejections=rejections, workers=used, seconds=time.perf_counter() - start)


def _best_layouts(ranked: list[Scored], n: int) -> list[Scored]:
    """The first (best) configuration of each of the first ``n`` parallel layouts in ``ranked``."""
    seen: dict[tuple[int, ...], Scored] = {}
    for s in ranked:
        c = s.candidate
        seen.setdefault((c.tp, c.pp, c.cp, c.dp, c.ep), s)
        if len(seen) == n:
            break
    return list(seen.values())


def _request_problems(model: ModelSpec, spec: ChipSpec, chips: int, base: TrainingConfig, space: Space,
                      seq: int) -> list[str]:
    """Problems no layout can fix, all at once (to fail before searching)."""
    problems: list[str] = []
    default = TrainingConfig()
    for name in SEARCHED:
        value = getattr(base, name)
        if value != getattr(default, name):
            problems.append(f"config.{name} = {value!r} is a searched option: fix it with "
                            f"Space({name}=({value!r},)) (command line: --{name.replace('_', '-')})")
    if chips < 1:
        problems.append(f"chips = {chips}: must be at least 1")
    elif chips > MAX_CHIPS:
        problems.append(f"chips = {chips:,}: trnsim models clusters of at most {MAX_CHIPS:,} chips")
    per_node = spec.topology.chips_per_node
    if chips > per_node and chips % per_node:
        problems.append(f"{chips} chips is not a whole number of {per_node}-chip {spec.name} nodes: use a "
                        f"multiple of {per_node}")
    dtype = PRECISIONS.get(base.precision)
    if dtype is None or not spec.supports(dtype):
        have = [p for p, d in PRECISIONS.items() if spec.supports(d)]
        problems.append(f"{spec.name} cannot run precision {base.precision!r}: use one of {', '.join(have)}")
    return problems + _fixed_problems(model, chips, seq, space)


def _fixed_tp(m: ModelSpec, seq: int, tp: int) -> str | None:
    if tp_ok(m, tp):
        return None
    good = [t for t in _divisors(m.heads) if tp_ok(m, t)]
    return (f"TP {tp} must divide heads {m.heads} and ffn {m.f}, and divide (or be a multiple of) kv_heads {m.g}: "
            f"use tp in {{{', '.join(map(str, good))}}}")


def _fixed_pp(m: ModelSpec, seq: int, pp: int) -> str | None:
    if m.layers % pp:
        return f"PP {pp} does not divide {m.layers} layers: use pp in {{{', '.join(map(str, _divisors(m.layers)))}}}"
    return None


def _fixed_cp(m: ModelSpec, seq: int, cp: int) -> str | None:
    if cp > 1 and seq % (2 * cp):
        return f"CP {cp} needs seq_len {seq} divisible by 2·CP = {2 * cp} (load-balanced causal chunks)"
    return None


def _fixed_ep(m: ModelSpec, seq: int, ep: int) -> str | None:
    if ep > 1 and not m.moe:
        return f"EP {ep} needs a mixture-of-experts model; {m.name} is dense: use ep = 1"
    return f"EP {ep} does not divide the {m.experts} experts" if m.experts % ep else None


# Rules on one fixed value that no other option can repair (all checked; sizes must also divide the chips).
FIXED_RULES: dict[str, Callable[[ModelSpec, int, int], str | None]] = {
    "tp": _fixed_tp, "pp": _fixed_pp, "cp": _fixed_cp, "ep": _fixed_ep}


def _fixed_problems(model: ModelSpec, chips: int, seq: int, space: Space) -> list[str]:
    """What is wrong with the options fixed to one value (values of a wider range are rejected as searched)."""
    problems: list[str] = []
    for name in ("dp", "tp", "pp", "cp", "ep", "interleave", "micro_batch"):
        values: tuple[int, ...] = getattr(space, name) or ()
        if any(v < 1 for v in values):
            problems.append(f"{name} = {min(values)}: must be a positive integer")
        elif len(values) == 1:
            v = values[0]
            if name in ("dp", "tp", "pp", "cp") and chips % v:
                problems.append(f"{name.upper()} {v} does not divide {chips} chips")
            if name in FIXED_RULES and (text := FIXED_RULES[name](model, seq, v)) is not None:
                problems.append(text)
    return problems


def _resolved(space: Space, model: ModelSpec, spec: ChipSpec, chips: int, seq: int) -> Space:
    """``space`` with every option that has a fixed default range filled in (SP and V depend on TP and PP)."""
    filled = {name: rng(model, spec, chips, seq) for name, rng in DEFAULT_RANGES.items()
              if getattr(space, name) is None}
    return replace(space, **filled)  # pyright: ignore[reportArgumentType]
