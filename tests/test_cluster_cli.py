"""`trnsim estimate` and `trnsim validate`, text and --json, through trnsim.cli.main."""

from __future__ import annotations

import json

import pytest

import trnsim.cli as cli
from cli_util import run
from trnsim.cli.cluster import parse_tokens
from trnsim.cluster import models
from trnsim.cluster.validate import paper_flops, table, validate
from trnsim.errors import ConfigError


def test_estimate_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", "--model", "llama3-70b", "--target", "trn3", "--chips", "1024",
                       "--tokens", "15T")
    assert code == 0
    for text in ("llama3-70b", "1024 × trn3", "DP ", "step time", "compute", "memory per chip", "activations",
                 "MFU", "HFU", "bf16, dense, 629 TFLOP/s", "MAMF", "time to train", "days"):
        assert text in out, text


def test_estimate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", "--model", "gpt3-175b", "--target", "h100", "--chips", "512",
                       "--tp", "8", "--pp", "8", "--recompute", "full", "--no-sp", "--zero", "0", "--json",
                       "--tokens", "3e11")
    data = json.loads(out)
    assert code == 0
    for key in ("step_time_s", "tokens_per_s", "mfu", "hfu", "model_tflops_per_chip", "memory_per_chip_bytes",
                "fits", "breakdown", "memory", "plan", "peak", "time_to_train_s"):
        assert key in data, key
    assert data["plan"]["tp"] == 8 and data["plan"]["sp"] is False and data["plan"]["recompute"] == "full"
    assert data["peak"] == {"flops": 989e12, "dtype": "bf16", "sparse": False}
    assert sum(data["breakdown"].values()) == pytest.approx(data["step_time_s"])


def test_estimate_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "estimate", "--model", "llama3-70b", "--target", "h100", "--chips", "64",
                       "--tp", "3", "--pp", "3")
    assert code == 2 and "problems with the training setup" in err and "TP 3" in err and "PP 3" in err
    code, _, err = run(capsys, "estimate", "--model", "llama3-70", "--target", "h100", "--chips", "64")
    assert code == 2 and "did you mean 'llama3-70b'" in err


def test_estimate_help_lists_models_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["estimate", "--help"])
    out = capsys.readouterr().out
    assert "trnsim estimate --model llama3-70b --target trn3 --chips 1024" in out
    assert all(name in out for name in models.names())


def test_parse_tokens() -> None:
    assert parse_tokens("15T") == 15e12 and parse_tokens("2e12") == 2e12 and parse_tokens("300b") == 3e11
    with pytest.raises(ConfigError):
        parse_tokens("lots")


def test_paper_flops_reproduce_implied_iteration_times() -> None:
    """calibration_megatron.md's derived iteration times: F / (TFLOP/s × GPUs)."""
    implied = {"megatron-1.7b": 3.5, "megatron-18.4b": 9.4, "megatron-1t": 102.6}
    for row in table()["rows"]:
        if row["model"] in implied:
            seconds = paper_flops(models.get(row["model"]), row["batch"]) / (row["tflops"] * 1e12 * row["gpus"])
            assert seconds == pytest.approx(implied[row["model"]], abs=0.05)


def test_validate(capsys: pytest.CaptureFixture[str]) -> None:
    result = validate()
    assert [r.model for r in result.rows] == [r["model"] for r in table()["rows"]]
    for row in result.rows:
        assert row.estimate.fits and row.estimate.plan.recompute == "full"
        assert row.estimate.plan.micro_batch * row.estimate.plan.dp * row.estimate.plan.micro_batches == row.batch
        # NOTE: a regression guard, not the goal: see the report of `trnsim validate`.
        assert abs(row.error) < 0.25, (row.model, row.error)
    assert [r.gpus for r in result.secondary] == [r["gpus"] for r in table()["ptdp"]]
    for row in result.secondary:  # Table 2 PTD-P: micro-batch 1 as published
        assert row.estimate.fits and row.micro_batch == 1 and abs(row.error) < 0.25, (row.model, row.error)
    code, out, _ = run(capsys, "validate")
    assert code == 0 and "mean absolute error" in out and "megatron-1t" in out and "Table 2, PTD-P" in out
    code, out, _ = run(capsys, "validate", "--json")
    data = json.loads(out)
    assert data["mean_abs_error"] == pytest.approx(result.mean_abs_error)
    assert len(data["rows"]) == 10 and {"published_tflops", "predicted_tflops", "micro_batch"} <= set(data["rows"][0])
    assert len(data["table2_ptdp"]["rows"]) == 6


def test_help_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    from trnsim.cli.cluster import ESTIMATE_EPILOG

    text = ESTIMATE_EPILOG.replace("\\\n", " ")
    examples = [line.split()[1:] for line in text.splitlines() if line.strip().startswith("trnsim estimate")]
    assert len(examples) >= 4
    for argv in examples:
        code, _, err = run(capsys, *argv)
        assert code == 0, (argv, err)
