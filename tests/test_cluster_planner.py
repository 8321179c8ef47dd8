"""The parallel-layout planner (trnsim.cluster.planner) and `trnsim plan`, on small models and chip counts."""

from __future__ import annotations

import doctest
import json
import shlex
from typing import Any

import pytest

from cli_util import run
from trnsim import hw
from trnsim.cluster import TrainingConfig, estimate_plan, models, planner, resolve
from trnsim.cluster.planner import REASONS, PlanSearchError, SearchResult, Space, search

TRN3 = hw.get("trn3")
SMALL = models.get("gpt3-1.3b")
# A narrowed space keeps each search to a few hundred configurations.
NARROW = Space(zero=(1, 3), recompute=("selective", "full"), micro_batch=(1, 2), cp=(1, 2))




@pytest.fixture(scope="module")
def small() -> SearchResult:
    return search(SMALL, TRN3, 16, space=NARROW, workers=1, progress=False)


def test_best_is_fastest_and_fits(small: SearchResult) -> None:
    best = small.best
    assert best.fits and all(e.fits for e in small.top)
    assert all(best.tokens_per_s >= s.tokens_per_s for s in small.ranked)
    assert list(small.ranked) == sorted(small.ranked, key=planner.rank_key)
    assert small.ranked[0].tokens_per_s == best.tokens_per_s
    assert small.evaluated + small.rejected == small.considered > small.evaluated > len(small.top) > 1
    layouts = [(e.plan.tp, e.plan.pp, e.plan.cp, e.plan.dp) for e in small.top]
    assert len(set(layouts)) == len(layouts)  # one plan per parallel layout
    assert [e.tokens_per_s for e in small.top] == sorted((e.tokens_per_s for e in small.top), reverse=True)


def test_scores_match_estimate_plan(small: SearchResult) -> None:
    for s in small.ranked[::97]:
        c = s.candidate
        cfg = TrainingConfig(tp=c.tp, pp=c.pp, cp=c.cp, dp=c.dp, ep=c.ep, sp=c.sp, interleave=c.interleave,
                             zero=c.zero, recompute=c.recompute, micro_batch=c.micro_batch,
                             global_batch=small.global_batch)
        est = estimate_plan(SMALL, TRN3, resolve(SMALL, TRN3, 16, cfg))
        assert (est.tokens_per_s, est.step_time_s, est.fits) == (s.tokens_per_s, s.step_time_s, True)


def test_docstring_example() -> None:
    result = doctest.testmod(planner)
    assert result.attempted > 0 and result.failed == 0


def test_fixed_options_are_respected() -> None:
    res = search(SMALL, TRN3, 16, space=Space(tp=(4,), recompute=("full",), zero=(1,)), workers=1, progress=False)
    assert {(s.candidate.tp, s.candidate.recompute, s.candidate.zero) for s in res.ranked} == {(4, "full", 1)}
    assert all(e.plan.tp == 4 and e.plan.recompute == "full" for e in res.top)
    assert res.requested.fixed() == {"tp": 4, "recompute": "full", "zero": 1}
    assert res.global_batch == 2048 and all(e.plan.global_batch == 2048 for e in res.top)  # same job for all


def test_rejections_are_explained() -> None:
    # 70B on 16 chips: ZeRO-0 states cannot fit, TP 1 without recomputation overflows with activations, PP 5
    # leaves DP fractional, a global batch of 32 does not split into micro-batches of 4 over DP 16.
    space = Space(tp=(1, 4), pp=(1, 5), cp=(1,), zero=(0, 3), recompute=("none", "full"), micro_batch=(1, 4),
                  interleave=(1,), sp=(True,))
    res = search(models.get("llama3-70b"), TRN3, 16, TrainingConfig(global_batch=32), space, workers=1,
                 progress=False)
    found = {r.reason: r for r in res.rejections}
    assert set(found) >= {"chips", "global batch", "memory: model states", "memory: activations"}
    assert "≠ 16 chips" in found["chips"].example
    assert "not a multiple of DP 16" in found["global batch"].example
    assert "ZeRO-0" in found["memory: model states"].example and "usable" in found["memory: model states"].example
    assert "recompute none" in found["memory: activations"].example
    assert [r.reason for r in res.rejections] == [r for r in REASONS if r in found]  # a fixed order
    assert all(r.advice for r in res.rejections)
    assert res.evaluated + res.rejected == res.considered


def test_pool_gives_the_same_result(small: SearchResult) -> None:
    pooled = search(SMALL, TRN3, 16, space=NARROW, workers=2, progress=False)
    assert pooled.workers == 2
    assert pooled.ranked == small.ranked
    assert pooled.rejections == small.rejections
    assert [e.to_dict() for e in pooled.top] == [e.to_dict() for e in small.top]


def test_small_searches_run_in_process(small: SearchResult, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(small.ranked) < planner.POOL_MIN
    assert search(SMALL, TRN3, 16, space=NARROW, progress=False).workers == 1  # automatic: too small for a pool

    def no_pool(*args: object, **kwargs: object) -> None:
        raise OSError("no semaphores here")

    monkeypatch.setattr(planner, "ProcessPoolExecutor", no_pool)
    fallback = search(SMALL, TRN3, 16, space=NARROW, workers=2, progress=False)
    assert fallback.workers == 1 and fallback.ranked == small.ranked


def test_impossible_requests_list_what_to_change() -> None:
    with pytest.raises(PlanSearchError) as err:
        search(SMALL, TRN3, 12 * 16 + 8, TrainingConfig(tp=2), Space(tp=(5,), pp=(7,)), workers=1)
    text = str(err.value)
    for part in ("Space(tp=(2,))", "not a whole number of 16-chip trn3 nodes", "TP 5 must divide heads 24",
                 "PP 7 does not divide 24 layers", "trnsim plan --help"):
        assert part in text, part
    assert len(err.value.problems) >= 4

    with pytest.raises(PlanSearchError) as err:  # everything is searched, nothing fits
        search(models.get("llama3-405b"), TRN3, 16, space=Space(zero=(0,), micro_batch=(1,)), workers=1)
    assert "memory: model states" in str(err.value) and "raise --zero" in str(err.value)




PLAN = ("plan", "--model", "gpt3-1.3b", "--target", "trn3", "--chips", "16", "--zero", "1", "--cp", "1",
        "--micro-batch", "2")


def test_plan_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *PLAN, "--top", "3")
    assert code == 0
    for text in ("gpt3-1.3b", "16 × trn3", "global batch 2048 × 2048", "fixed: cp = 1, zero = 1, micro_batch = 2",
                 "best plans, one per parallel layout (3 of", "tokens/s", "MFU", "rejected:", "what to change",
                 "best: DP", "details: trnsim estimate"):
        assert text in out, text
    # the suggested `trnsim estimate` line reproduces the best plan
    details = next(line for line in out.splitlines() if line.startswith("details: "))
    code, est_out, _ = run(capsys, *shlex.split(details.removeprefix("details: trnsim ")), "--json")
    code_json, plan_out, _ = run(capsys, *PLAN, "--top", "1", "--json")
    assert code == code_json == 0
    assert json.loads(est_out)["tokens_per_s"] == json.loads(plan_out)["plans"][0]["tokens_per_s"]


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *PLAN, "--top", "2", "--json", "--workers", "1")
    data = json.loads(out)
    assert code == 0
    assert [p["rank"] for p in data["plans"]] == [1, 2]
    assert data["plans"][0]["tokens_per_s"] >= data["plans"][1]["tokens_per_s"]
    assert data["plans"][0]["plan"]["zero"] == 1 and data["plans"][0]["plan"]["micro_batch"] == 2
    assert data["fixed"] == {"cp": 1, "zero": 1, "micro_batch": 2} and data["workers"] == 1
    assert data["evaluated"] + data["rejected"] == data["considered"]
    assert {"reason", "count", "example", "advice"} <= set(data["rejections"][0])


@pytest.mark.parametrize(("args", "expected"), [
    (("--tp", "5"), "TP 5 must divide heads 24"),
    (("--top", "0"), "--top 0: must be at least 1"),
    (("--chips", "20"), "not a whole number of 16-chip trn3 nodes"),
])
def test_plan_errors(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], expected: str) -> None:
    code, _, err = run(capsys, *PLAN, *args)
    assert code == 2 and expected in err and "hint:" in err


def test_help_examples_run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import trnsim.cli.plan as plan_cli

    def narrowed(model: models.ModelSpec, spec: hw.ChipSpec, chips: int, config: TrainingConfig, space: Space,
                 **options: Any) -> SearchResult:
        # NOTE: each example's whole search space takes seconds; a slice of it keeps the test fast.
        slice_ = {"zero": (1,), "micro_batch": (1,), "cp": (1,), "interleave": (1,)}
        space = Space(**{k: getattr(space, k) or slice_.get(k) for k in planner.SEARCHED})
        return search(model, spec, chips, config, space, **options)

    monkeypatch.setattr(plan_cli, "search", narrowed)
    examples = [line.split()[1:] for line in plan_cli.EPILOG.splitlines() if line.strip().startswith("trnsim plan")]
    assert len(examples) >= 3
    for argv in examples:
        code, out, _ = run(capsys, *argv)
        assert code == 0 and ("best plans" in out or '"plans"' in out), argv


def test_plan_and_estimate_share_the_job_options(capsys: pytest.CaptureFixture[str]) -> None:
    """The job options come from one definition, so `plan` takes every one `estimate` does (e.g. --fp32-grads)
    and passes it on in its details line."""
    code, out, _ = run(capsys, "plan", "--model", "llama3-8b", "--target", "trn3", "--chips", "8", "--tp", "8",
                       "--pp", "1", "--no-fp32-grads", "--global-batch", "8")
    assert code == 0 and "--no-fp32-grads" in out.splitlines()[-1]
