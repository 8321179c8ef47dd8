"""`trnsim tco`, `trnsim claims` and `trnsim report` (the report rendered in headless Chromium)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_util import run
from trnsim.cluster import claims, prices, tco

TARGETS = "trn3,trn2,h200,h100,b200,tpu-v5p,mi300x"


def test_tco_deadline_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tco", "--model", "llama3-70b", "--tokens", "15e12", "--targets", TARGETS,
                       "--deadline", "60d")
    assert code == 0
    for target in TARGETS.split(","):
        assert re.search(rf"│ {re.escape(target)} +│", out)
    assert "cost by purchase option" in out and "goodput" in out and "MWh" in out
    assert "* trn3: p5en.48xlarge on-demand" in out and "board power 500 W" in out
    assert "mi300x on-demand: no on-demand price" in out


def test_tco_json_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "cost.png"
    code, out, _ = run(capsys, "tco", "--model", "llama3-8b", "--tokens", "1T", "--targets", "trn3,h200",
                       "--chips", "256", "--purchase", "spot", "--plot", str(png), "--json")
    assert code == 0
    data = json.loads(out)
    rows = {r["target"]: r for r in data["targets"]}
    assert set(rows) == {"trn3", "h200"} and rows["trn3"]["chips"] == 256
    spot = rows["h200"]["costs"]["spot"]
    assert spot["price"]["basis"] == "list" and spot["goodput"] == rows["h200"]["reliability"]["goodput"]
    assert rows["trn3"]["costs"]["on-demand"]["price"]["basis"] == "assumption"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tco_price_override_scales_cost(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("tco", "--model", "llama3-8b", "--tokens", "1T", "--targets", "trn3", "--chips", "64", "--json")
    cost = []
    for price in ("1.0", "2.0"):
        code, out, _ = run(capsys, *args, "--price", f"trn3={price}")
        assert code == 0
        cost.append(json.loads(out)["targets"][0]["costs"]["on-demand"]["usd"])
    assert cost[1] == pytest.approx(2 * cost[0])


@pytest.mark.parametrize(("args", "match"), [
    (("--region", "mars-1"), "unknown region 'mars-1'"),
    (("--price", "trn3=cheap"), "cannot read --price"),
    (("--deadline", "soon"), "cannot read --deadline"),
    (("--tokens", "many"), "cannot read --tokens"),
])
def test_tco_errors(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], match: str) -> None:
    base = {"--model": "llama3-8b", "--tokens": "1T", "--chips": "64"}
    if "--deadline" in args:
        base.pop("--chips")
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    code, _, err = run(capsys, "tco", *[x for kv in base.items() for x in kv])
    assert code == 2 and match in err and "hint:" in err


def test_tco_bad_price_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('[instances.mine]\ntarget = "h200"\n')
    code, _, err = run(capsys, "tco", "--model", "llama3-8b", "--tokens", "1T", "--chips", "64", "--prices", str(f))
    assert code == 2 and f"{f}: instances.mine.chips" in err and "missing required key 'chips'" in err


def test_claims_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "claims")
    assert code == 0
    for key in claims.CLAIMS:
        assert claims.evaluate(only=[key]).results[0].claim in out
    assert "holds (by construction)" in out and "break-even" in out
    code, out, _ = run(capsys, "claims", "--json", "--price", "trn3=6.0")
    data = {c["key"]: c for c in json.loads(out)["claims"]}
    assert set(data) == set(claims.CLAIMS)
    assert data["price"]["by_construction"] is False  # an override is a real price, not the claim
    assert data["price"]["value"] == pytest.approx(1 - 6.0 * 16 / 63.296)


def test_claims_values() -> None:
    rep = claims.evaluate()
    res = {r.key: r for r in rep.results}
    assert all(row.estimate.fits for row in rep.runs.rows.values())
    t = res["throughput"]
    per = [v for _, v in t.per_workload]
    assert t.value == pytest.approx(math.exp(sum(math.log(v) for v in per if v) / len(per)))
    assert res["price"].by_construction and res["price"].value == pytest.approx(0.35)
    # at the break-even price the TCO claim sits at its threshold
    tco_claim = res["tco"]
    assert tco_claim.break_even is not None
    even = float(re.findall(r"\$([0-9.]+)/chip-h", tco_claim.break_even)[0])
    a = tco.Assumptions(prices=prices.catalogue().with_overrides({("trn3", "on-demand"): even}))
    again = claims.evaluate(assumptions=a, only=["tco"]).results[0]
    assert again.value == pytest.approx(tco_claim.threshold, abs=2e-3)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


CHECK = ('<script>window.addEventListener("load", () => { const im = [...document.images]; '
         'const d = document.createElement("div"); d.id = "trnsim-check"; '
         'd.textContent = `images=${im.length} loaded=${im.filter(i => i.complete && i.naturalWidth > 0).length} '
         'tables=${document.querySelectorAll("table").length} cells=${document.querySelectorAll("td").length} '
         'width=${Math.round(document.querySelector("table").getBoundingClientRect().width)}`; '
         'document.body.appendChild(d); });</script></body>')


def test_report_renders_in_chromium(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "report.html"
    code, out, _ = run(capsys, "report", "--model", "llama3-8b", "--chips", "64", "--tokens", "1T",
                       "--targets", "trn3,h200,mi300x", "--top", "3", "-o", str(out_file))
    assert code == 0 and "wrote" in out
    text = out_file.read_text()
    assert "<script" not in text and "http" not in text.replace("http-equiv", "")  # self-contained, offline
    assert text.count("data:image/png;base64,") == 3 and text.count("<table>") >= 8
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (make test installs it when run as root: apt-get install chromium)")
    checked = tmp_path / "checked.html"
    checked.write_text(text.replace("</body>", CHECK))
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                          "--dump-dom", checked.as_uri()], capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'id="trnsim-check">images=(\d+) loaded=(\d+) tables=(\d+) cells=(\d+) width=(\d+)', dom)
    assert found, dom[-2000:]
    images, loaded, tables, cells, width = map(int, found.groups())
    assert images == loaded == 3 and tables == text.count("<table>") and cells > 50 and width > 0
