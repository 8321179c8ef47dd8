"""Bad input to the runtime: swapped cache entries, odd write targets, cache URLs and objects, malformed
artifacts with a valid hash, bad `cache warm` scripts. Each gets a clear TrnsimError (or is rebuilt), never a
traceback from deep inside or a wrong answer."""

from __future__ import annotations

import json
import os
import shutil
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trnsim
from trnsim.errors import ArtifactError, CacheError, CompileError, TrnsimError
from trnsim.fileio import write_atomic
from trnsim.frontend.mlir import is_path, read_source
from trnsim.runtime.artifact import pack_artifact, unpack_artifact
from trnsim.runtime.cache import SUFFIX, CacheWarning, CompileCache, cache_key
from trnsim.runtime.program import from_bytes
from trnsim.runtime.warm import script_programs


def module(op: str) -> str:
    return ("module @m { func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> { "
            f"%0 = stablehlo.{op} %a : tensor<4xf32>\n return %0 : tensor<4xf32> }} }}")


X = np.array([0.5, 1, 2, 3], np.float32)


# ---- 1. a cache entry stored under another key is never served


def test_swapped_cache_entry_is_rebuilt(tmp_path: Path) -> None:
    url = str(tmp_path / "cache")
    trnsim.compile(module("tanh"), cache=url)
    (tanh_entry,) = (tmp_path / "cache").glob(f"*{SUFFIX}")
    trnsim.compile(module("exponential"), cache=url)
    (exp_entry,) = [e for e in (tmp_path / "cache").glob(f"*{SUFFIX}") if e != tanh_entry]
    shutil.copy(exp_entry, tanh_entry)
    with pytest.warns(CacheWarning, match="stored under another key"):
        program = trnsim.compile(module("tanh"), cache=url)
    assert not program.cache_hit
    np.testing.assert_allclose(program.run(X)[0], np.tanh(X), rtol=1e-6)
    again = trnsim.compile(module("tanh"), cache=url)     # the rebuilt entry is a hit now
    assert again.cache_hit


def test_cache_get_checks_the_key(tmp_path: Path) -> None:
    cache = CompileCache(str(tmp_path))
    a, b = cache_key({"module": "a"}), cache_key({"module": "b"})
    cache.put(a, b"A")
    shutil.copy(tmp_path / f"{a}{SUFFIX}", tmp_path / f"{b}{SUFFIX}")
    (entry,) = [e for e in cache.entries() if e.key == b]
    assert entry.problem is not None and "another key" in entry.problem
    with pytest.warns(CacheWarning, match="another key"):
        assert cache.get(b) is None
    assert not (tmp_path / f"{b}{SUFFIX}").exists() and cache.get(a) == b"A"


# ---- 2. write_atomic on directories, missing parents, symlinks, fifos


def test_write_atomic_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="is a directory"):
        write_atomic(tmp_path, b"x", error=ArtifactError)
    assert tmp_path.is_dir()


def test_write_atomic_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("keep")
    with pytest.raises(TrnsimError, match="a folder on its path is a file"):
        write_atomic(tmp_path / "afile" / "x.neff", b"x")
    with pytest.raises(TrnsimError, match="a folder on its path is a file"):
        write_atomic(tmp_path / "afile" / "sub" / "x.neff", b"x")
    assert (tmp_path / "afile").read_text() == "keep"


def test_write_atomic_creates_missing_parents(tmp_path: Path) -> None:
    assert write_atomic(tmp_path / "a" / "b" / "x.bin", b"x").read_bytes() == b"x"


def test_write_atomic_writes_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "target.txt").write_text("old")
    link = tmp_path / "link.neff"
    link.symlink_to("target.txt")
    assert write_atomic(link, b"new") == link
    assert link.is_symlink() and (tmp_path / "target.txt").read_bytes() == b"new"
    dangling = tmp_path / "dangling"
    dangling.symlink_to("sub/made.bin")
    write_atomic(dangling, b"d")
    assert dangling.is_symlink() and (tmp_path / "sub" / "made.bin").read_bytes() == b"d"


def test_write_atomic_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.neff"
    os.mkfifo(fifo)
    link = tmp_path / "to-fifo"
    link.symlink_to(fifo.name)
    for target in (fifo, link):
        with pytest.raises(TrnsimError, match="not a regular file"):
            write_atomic(target, b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_program_save_to_bad_paths(tmp_path: Path) -> None:
    program = trnsim.compile(module("sine"), cache=False)
    with pytest.raises(ArtifactError, match="is a directory"):
        program.save(tmp_path)
    os.mkfifo(tmp_path / "f.neff")
    with pytest.raises(ArtifactError, match="not a regular file"):
        program.save(tmp_path / "f.neff")


# ---- 3. path or text


def test_is_path_by_existence_not_extension(tmp_path: Path) -> None:
    for name in ("model.txt", "model", "module.mlir"):
        (tmp_path / name).write_text(module("sine"))
        assert is_path(str(tmp_path / name))
        assert read_source(str(tmp_path / name)) == module("sine")
    assert not is_path(module("sine")) and not is_path("module @m {}") and not is_path("")
    assert not is_path('"func.func"() ({}) : () -> ()') and not is_path("x" * 5000)
    assert is_path("missing.mlir") and is_path(tmp_path / "nope")


def test_compile_text_file_and_directory(tmp_path: Path) -> None:
    (tmp_path / "model.txt").write_text(module("sine"))
    program = trnsim.compile(str(tmp_path / "model.txt"), cache=False)
    np.testing.assert_allclose(program.run(X)[0], np.sin(X), rtol=1e-6)
    with pytest.raises(CompileError, match="it is a directory"):
        trnsim.compile(str(tmp_path), cache=False)
    with pytest.raises(CompileError, match="No such file"):
        trnsim.compile(str(tmp_path / "missing.txt"), cache=False)


# ---- 5. cache URLs and objects


def test_empty_cache_url_means_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRNSIM_CACHE_URL", "")
    monkeypatch.chdir(tmp_path)
    assert CompileCache().url == "file://" + str(tmp_path / "xdg" / "trnsim")
    assert CompileCache("  ").url == CompileCache().url


def test_file_localhost_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cache = CompileCache(f"file://localhost{tmp_path}/c")
    cache.put(cache_key({"m": "1"}), b"x")
    assert len(list((tmp_path / "c").glob(f"*{SUFFIX}"))) == 1 and not (tmp_path / "localhost").exists()
    with pytest.raises(CacheError, match="another host"):
        CompileCache("file://elsewhere/x")


@pytest.mark.parametrize("bad", [5, object(), 1.5, b"/tmp/x"])
def test_bad_cache_object(bad: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CacheError, match="is not a cache"):
        trnsim.compile(module("sine"), cache=bad)
    assert not list(tmp_path.iterdir())


def test_cache_at_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    cache = CompileCache(str(tmp_path / "afile"))
    for call in (cache.entries, cache.stat, cache.clear):
        with pytest.raises(CacheError, match="is a file, not a folder"):
            call()
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize(("body", "match"), [
    ("return None", "returned a NoneType"), ("return 5", "returned a int"),
    ("return 'abc'", "returned a str"),
    ("return [('e', 'module @m {}', 'notadict')]", r"item 0 \(e\): its options are a str"),
    ("return [('e', 'module @m {}', {1: 2})]", "not a dict with str keys")])
def test_warm_script_bad_returns(tmp_path: Path, body: str, match: str) -> None:
    script = tmp_path / "s.py"
    script.write_text(f"def trnsim_programs():\n    {body}\n")
    with pytest.raises(CompileError, match=match):
        script_programs(script)


# ---- 6. a valid hash over malformed content


@pytest.fixture(scope="module")
def artifact() -> Any:
    program = trnsim.compile(module("tanh"), cache=False)
    return unpack_artifact(program.to_bytes(), where="x")


def _repack(art: Any, meta: dict[str, Any] | None = None, plan: Any = None) -> bytes:
    sections = dict(art.sections)
    if plan is not None:
        sections["plan.json"] = json.dumps(plan).encode()
    return pack_artifact(meta if meta is not None else art.meta, sections, target=art.target)


def test_valid_artifact_passes_the_checks(artifact: Any) -> None:
    program = from_bytes(_repack(artifact), where="x")
    np.testing.assert_allclose(program.run(X)[0], np.tanh(X), rtol=1e-6)


@pytest.mark.parametrize(("field", "value"), [
    ("flops", {}), ("nodes", True), ("deps", True), ("deps", [99]), ("busy", []), ("busy", {"act": "x"}),
    ("ops", 3), ("seconds", None), ("sub", 5), ("sub", [{}]), ("kernel", 1)])
def test_malformed_plan_step(artifact: Any, field: str, value: object) -> None:
    plan = json.loads(artifact.sections["plan.json"])
    plan["steps"][0][field] = value
    with pytest.raises(ArtifactError, match="plan is malformed"):
        from_bytes(_repack(artifact, plan=plan), where="bad.neff")


@pytest.mark.parametrize("edit", [lambda p: p.pop("steps"), lambda p: p.__setitem__("steps", 5),
                                  lambda p: p.__setitem__("total_seconds", "1"),
                                  lambda p: p["steps"][0].__setitem__("bogus", 1)])
def test_malformed_plan(artifact: Any, edit: Any) -> None:
    plan = json.loads(artifact.sections["plan.json"])
    edit(plan)
    with pytest.raises(ArtifactError, match=r"bad\.neff: the artifact's plan is malformed"):
        from_bytes(_repack(artifact, plan=plan), where="bad.neff")


@pytest.mark.parametrize("shardings", [[1], "x", {"a": 1}])
def test_malformed_shardings(artifact: Any, shardings: object) -> None:
    with pytest.raises(ArtifactError, match="shardings"):
        from_bytes(_repack(artifact, meta={**artifact.meta, "shardings": shardings}), where="bad.neff")


def test_malformed_graph_tables(artifact: Any) -> None:
    sections = dict(artifact.sections)
    sections["program.json"] = json.dumps({"ops": 5}).encode()
    with pytest.raises(ArtifactError, match=r"bad\.neff"), warnings.catch_warnings():
        from_bytes(pack_artifact(artifact.meta, sections, target=artifact.target), where="bad.neff")


def test_the_artifact_plan_check_covers_every_plan_and_step_field() -> None:
    """``runtime.program`` checks a loaded plan's fields from a table: a field added to ``Plan`` or ``Step``
    must be added there too (else it goes unchecked), and the table must name no field that is gone."""
    import dataclasses

    from trnsim.compiler.lowering import Plan, Step
    from trnsim.runtime import program

    assert {f.name for f in dataclasses.fields(Plan)} == set(program._PLAN_FIELDS)  # pyright: ignore[reportPrivateUsage]
    assert {f.name for f in dataclasses.fields(Step)} == set(program._STEP_FIELDS)  # pyright: ignore[reportPrivateUsage]


def test_graph_missing_an_op_attribute_fails_at_its_op_with_a_hint() -> None:
    """A hash-valid artifact whose graph lost an op's attribute (edited and re-hashed) loads, and running it
    raises a SimError naming the op, its location and the attribute, not a KeyError from the op's rule."""
    text = ("module @m { func.func public @main(%a: tensor<4x8xf32>) -> tensor<4xf32> { "
            "%z = stablehlo.constant dense<0.0> : tensor<f32>\n"
            "%0 = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [1] "
            ": (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>\n return %0 : tensor<4xf32> } }")
    art = unpack_artifact(trnsim.compile(text, cache=False).to_bytes(), where="x")
    tables = json.loads(art.sections["program.json"])
    attrs = json.loads(tables["attrs"])
    assert any("dimensions" in a for a in attrs)
    tables["attrs"] = json.dumps([{k: v for k, v in a.items() if k != "dimensions"} for a in attrs])
    sections = {**art.sections, "program.json": json.dumps(tables).encode()}
    program = from_bytes(pack_artifact(art.meta, sections, target=art.target), where="bad.neff")
    with pytest.raises(TrnsimError, match="`reduce` has no `dimensions` attribute") as err:
        program.run(np.ones((4, 8), np.float32))
    assert "compile it again" in (err.value.hint or "") and "reduce" in str(err.value.where)
