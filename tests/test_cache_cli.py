"""`trnsim cache ls | stat | clear`, text and --json, on memory:// and a local folder."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from cli_util import run
from trnsim.runtime.cache import SUFFIX, CompileCache, cache_key

KEYS = [cache_key({"module": str(i)}) for i in range(3)]


@pytest.fixture
def url() -> Iterator[str]:
    url = f"memory://trnsim-cli-{uuid.uuid4().hex}"
    cache = CompileCache(url)
    for i, key in enumerate(KEYS):
        cache.put(key, b"x" * (1000 * (i + 1)), meta={"name": f"step{i}", "target": "trn3", "build_s": 1.5})
    yield url
    fsspec.filesystem("memory").rm(url, recursive=True)


def test_ls(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, _ = run(capsys, "cache", "ls", "--url", url)
    assert code == 0
    for i, key in enumerate(KEYS):
        assert key[:16] in out and key not in out and f"name=step{i} target=trn3" in out
    assert "3 entries" in out and "1.5 s" in out
    code, out, _ = run(capsys, "cache", "ls", "--url", url, "--full")
    assert all(key in out for key in KEYS)


def test_ls_json(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, _ = run(capsys, "cache", "ls", "--url", url, "--json")
    data = json.loads(out)
    assert code == 0 and sorted(e["key"] for e in data) == sorted(KEYS)
    assert set(data[0]) == {"key", "size", "mtime", "meta", "problem"}
    assert all(e["meta"]["target"] == "trn3" and e["problem"] is None for e in data)


def test_stat_and_clear(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, _ = run(capsys, "cache", "stat", "--url", url, "--json")
    summary = json.loads(out)
    assert code == 0 and summary["entries"] == 3 and summary["bytes"] > 6000 and summary["url"] == url
    code, out, _ = run(capsys, "cache", "stat", "--url", url)
    assert code == 0 and "entries" in out and url in out
    code, out, _ = run(capsys, "cache", "clear", "--url", url)
    assert code == 0 and out.startswith("removed 3 entries (") and url in out
    code, out, _ = run(capsys, "cache", "ls", "--url", url, "--json")
    assert json.loads(out) == []
    code, out, _ = run(capsys, "cache", "clear", "--url", url, "--json")
    assert json.loads(out)["removed"] == 0


def test_default_url_is_the_setting(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    CompileCache(str(tmp_path)).put(KEYS[0], b"payload")
    (tmp_path / (KEYS[1] + SUFFIX)).write_bytes(b"not an entry")
    monkeypatch.setenv("TRNSIM_CACHE_URL", "file://" + str(tmp_path))
    code, out, _ = run(capsys, "cache", "ls", "--json")
    data = {e["key"]: e for e in json.loads(out)}
    assert code == 0 and set(data) == {KEYS[0], KEYS[1]}
    assert data[KEYS[0]]["problem"] is None and "truncated" in data[KEYS[1]]["problem"]
    code, out, _ = run(capsys, "cache", "ls")
    assert "CORRUPT: truncated" in out
    code, out, _ = run(capsys, "cache", "stat", "--json")
    assert json.loads(out)["corrupt"] == 1


def test_help_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "cache")
    assert code == 0 and "ls" in out and "stat" in out and "clear" in out and "TRNSIM_CACHE_URL" in out
    code, _, err = run(capsys, "cache", "ls", "--url", "nosuchproto://bucket")
    assert code == 2 and "cannot open the cache URL" in err and "hint:" in err
