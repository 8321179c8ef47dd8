"""The compile cache: keys, memory:// and file:// stores, corruption, read-only and full caches, locks, and
real processes racing on one key."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from trnsim.config import settings
from trnsim.errors import CacheError
from trnsim.runtime.cache import SUFFIX, CacheWarning, CompileCache, cache_key

KEY = cache_key({"module": "func.func @f()", "target": "trn3"})
OTHER = cache_key({"module": "func.func @g()", "target": "trn3"})


@pytest.fixture
def memory_url() -> Iterator[str]:
    url = f"memory://trnsim-test-{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def file_url(path: Path) -> str:
    return "file://" + str(path)


# ---------------------------------------------------------------------------------------------------- keys


def test_cache_key_is_stable_and_unambiguous() -> None:
    a = cache_key({"module": "m", "options": "o", "trnsim": "0.1.0"})
    assert a == cache_key({"trnsim": "0.1.0", "options": "o", "module": "m"})  # order does not matter
    assert a == cache_key({"module": b"m", "options": b"o", "trnsim": b"0.1.0"})  # str is its UTF-8
    assert len(a) == 64 and int(a, 16) >= 0
    assert cache_key({"ab": "c"}) != cache_key({"a": "bc"})  # length prefixes: no concatenation collisions
    assert cache_key({"a": "", "b": "x"}) != cache_key({"a": "x", "b": ""})
    assert cache_key({"a": "1"}) != cache_key({"a": "2"})


def test_bad_key_and_bad_build() -> None:
    cache = CompileCache("memory://bad-key")
    with pytest.raises(CacheError, match="bad cache key"):
        cache.get("../../etc/passwd")
    with pytest.raises(CacheError, match="build returned str"):
        cache.get_or_build(KEY, lambda: "text")  # type: ignore[arg-type, return-value]


# ---------------------------------------------------------------------------------------------------- stores


@pytest.fixture(params=["memory", "file"])
def cache(request: pytest.FixtureRequest, tmp_path: Path, memory_url: str) -> CompileCache:
    return CompileCache(memory_url if request.param == "memory" else file_url(tmp_path / "cache"))


def test_get_put_round_trip(cache: CompileCache) -> None:
    assert cache.get(KEY) is None
    assert cache.put(KEY, b"artifact bytes", meta={"name": "f"})
    assert cache.get(KEY) == b"artifact bytes"
    assert cache.get(OTHER) is None
    assert (cache.stats.hits, cache.stats.misses) == (1, 2)


def test_get_or_build(cache: CompileCache) -> None:
    calls: list[int] = []

    def build() -> bytes:
        calls.append(1)
        return b"\x00compiled\xff" * 100

    assert cache.get_or_build(KEY, build, meta={"name": "f", "target": "trn3"}) == (b"\x00compiled\xff" * 100, False)
    assert cache.get_or_build(KEY, build) == (b"\x00compiled\xff" * 100, True)
    assert len(calls) == 1
    s = cache.stats
    assert (s.hits, s.misses, s.builds, s.corrupt) == (1, 1, 1, 0)
    [entry] = cache.entries()
    assert entry.key == KEY and entry.problem is None and entry.size > 1000
    assert entry.meta["name"] == "f" and entry.meta["target"] == "trn3" and entry.meta["build_s"] >= 0
    assert abs(entry.mtime - time.time()) < 600


def test_entries_stat_clear(cache: CompileCache) -> None:
    assert cache.entries() == [] and cache.stat().entries == 0 and cache.stat().oldest is None
    cache.put(KEY, b"a" * 10)
    cache.put(OTHER, b"b" * 20)
    summary = cache.stat()
    assert summary.entries == 2 and summary.bytes > 30 and summary.corrupt == 0
    assert summary.oldest is not None and summary.newest is not None and summary.oldest <= summary.newest
    assert [e.key for e in cache.entries()] == sorted([KEY, OTHER])
    assert sorted(cache.keys()) == sorted([KEY, OTHER])
    assert cache.clear() == 2
    assert cache.entries() == [] and cache.get(KEY) is None


def test_clear_leaves_other_files_alone(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = CompileCache(str(root))  # a plain path works too
    cache.put(KEY, b"x")
    (root / "notes.txt").write_text("mine")
    assert cache.clear() == 1
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]


def test_default_url_is_the_setting(tmp_path: Path) -> None:
    with settings.override(cache_url=file_url(tmp_path / "knob")):
        cache = CompileCache()
        cache.put(KEY, b"x")
    assert cache.url == file_url(tmp_path / "knob")
    assert (tmp_path / "knob" / (KEY + SUFFIX)).is_file()


def test_default_location_honours_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRNSIM_CACHE_URL", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert CompileCache().url == file_url(tmp_path / "trnsim")


def test_local_publish_leaves_no_temp_files(tmp_path: Path) -> None:
    cache = CompileCache(file_url(tmp_path))
    for i in range(5):
        cache.put(KEY, bytes([i]) * 1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY + SUFFIX]
    assert cache.get(KEY) == bytes([4]) * 1000


def test_unknown_protocol_is_a_cache_error() -> None:
    with pytest.raises(CacheError, match="cannot open the cache URL"):
        CompileCache("nosuchproto://bucket/cache")


# ---------------------------------------------------------------------------------------------------- corruption


def _entry_path(cache: CompileCache, key: str) -> str:
    return f"{cache.url.rstrip('/')}/{key}{SUFFIX}"


def _damage(cache: CompileCache, key: str, how: str) -> None:
    with fsspec.open(_entry_path(cache, key), "rb") as f:
        raw: bytes = f.read()
    if how == "flip":
        raw = raw[:-5] + bytes([raw[-5] ^ 1]) + raw[-4:]
    elif how == "truncate":
        raw = raw[: len(raw) // 2]
    elif how == "empty":
        raw = b""
    elif how == "magic":
        raw = b"GARBAGE!" + raw[8:]
    with fsspec.open(_entry_path(cache, key), "wb") as f:
        f.write(raw)


@pytest.mark.parametrize("how", ["flip", "truncate", "empty", "magic"])
def test_corrupt_entry_is_reported_once_and_rebuilt(cache: CompileCache, how: str) -> None:
    cache.get_or_build(KEY, lambda: b"good" * 50)
    _damage(cache, KEY, how)
    [listed] = cache.entries()
    if how != "flip":  # listing checks headers only; a flipped payload byte needs the hash
        assert listed.problem is not None and cache.stat().corrupt == 1
    with pytest.warns(CacheWarning, match=r"is corrupt \(.*\); deleted, it will be rebuilt") as record:
        assert cache.get_or_build(KEY, lambda: b"good" * 50) == (b"good" * 50, False)
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt entry is fine: no more warnings
        assert cache.get_or_build(KEY, lambda: b"other") == (b"good" * 50, True)
    assert (cache.stats.corrupt, cache.stats.builds) == (1, 2)
    assert [e.key for e in cache.entries()] == [KEY]


def test_corrupt_entry_via_get_is_deleted(tmp_path: Path) -> None:
    cache = CompileCache(str(tmp_path))
    cache.put(KEY, b"payload")
    _damage(cache, KEY, "truncate")
    with pytest.warns(CacheWarning, match="truncated"):
        assert cache.get(KEY) is None
    assert not (tmp_path / (KEY + SUFFIX)).exists()


# ---------------------------------------------------------------------------------------------------- read-only, full


class ReadOnlyMemoryFileSystem(MemoryFileSystem):
    """memory://, but every write is refused, as on a read-only bucket or mount."""

    protocol = ("romemory",)

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(13, "Permission denied")

    pipe_file = _refuse
    makedirs = _refuse
    mkdir = _refuse
    mv = _refuse


fsspec.register_implementation("romemory", ReadOnlyMemoryFileSystem, clobber=True)


def _one_warning_then_silence(cache: CompileCache) -> None:
    builds: list[int] = []

    def build() -> bytes:
        builds.append(1)
        return b"compiled"

    with pytest.warns(CacheWarning, match=r"is not writable \(PermissionError: Permission denied\); compiling "
                                          r"without caching") as record:
        assert cache.get_or_build(KEY, build) == (b"compiled", False)
        assert cache.get_or_build(KEY, build) == (b"compiled", False)
        assert cache.get_or_build(OTHER, build) == (b"compiled", False)
        assert not cache.put(KEY, b"x")
    assert len(record) == 1 and len(builds) == 3
    assert "TRNSIM_CACHE_URL" in str(record[0].message)
    assert cache.disabled is not None


def test_read_only_fsspec_cache_degrades() -> None:
    _one_warning_then_silence(CompileCache("romemory://ro-cache"))


def test_read_only_local_cache_degrades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # NOTE: tests run as root, where chmod 0o555 stops nothing: refuse creating files instead
    root = tmp_path / "ro"
    root.mkdir()
    real_open = os.open

    def no_create(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and str(path).startswith(str(root)):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_create)
    _one_warning_then_silence(CompileCache(file_url(root)))
    assert list(root.rglob("*")) == [root / ".locks"]  # nothing written


def test_full_local_cache_degrades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_replace = os.replace

    def full(src: Any, dst: Any) -> None:
        if str(dst).endswith(SUFFIX):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full)
    cache = CompileCache(file_url(tmp_path))
    with pytest.warns(CacheWarning, match="No space left on device") as record:
        assert cache.get_or_build(KEY, lambda: b"x") == (b"x", False)
        assert cache.get_or_build(KEY, lambda: b"x") == (b"x", False)
    assert len(record) == 1
    assert [p.name for p in tmp_path.iterdir()] == [".locks"]  # no temp file, no lock left behind
    assert list((tmp_path / ".locks").iterdir()) == []


# ---------------------------------------------------------------------------------------------------- locks


def _lock_path(root: Path, key: str) -> Path:
    return root / ".locks" / f"{key}.lock"


def test_waits_for_a_live_holder(tmp_path: Path) -> None:
    """Another process holds the lock; when its entry appears, we return it without building."""
    lock = _lock_path(tmp_path, KEY)
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename, "token": "other"}))
    holder = CompileCache(str(tmp_path))

    def finish() -> None:
        time.sleep(0.2)
        holder.put(KEY, b"from the holder")
        lock.unlink()

    t = threading.Thread(target=finish)
    t.start()
    cache = CompileCache(str(tmp_path))
    assert cache.get_or_build(KEY, lambda: b"built here") == (b"from the holder", True)
    t.join()
    assert (cache.stats.builds, cache.stats.waits, cache.stats.hits) == (0, 1, 1)


def test_lock_of_a_dead_process_is_broken(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = _lock_path(tmp_path, KEY)
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename, "token": "dead"}))
    cache = CompileCache(str(tmp_path))
    with pytest.warns(CacheWarning, match=f"stale build lock.*process {dead.pid}, has exited"):
        assert cache.get_or_build(KEY, lambda: b"x") == (b"x", False)
    assert not lock.exists()


def test_silent_lock_from_another_host_is_broken(tmp_path: Path) -> None:
    lock = _lock_path(tmp_path, KEY)
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": 1, "host": "elsewhere", "token": "t"}))
    old = time.time() - 10
    os.utime(lock, (old, old))
    cache = CompileCache(str(tmp_path), stale_after=5)
    with pytest.warns(CacheWarning, match=r"not refreshed for 1\d s"):
        assert cache.get_or_build(KEY, lambda: b"x") == (b"x", False)


def test_holder_keeps_its_lock_fresh(tmp_path: Path) -> None:
    cache = CompileCache(str(tmp_path), stale_after=0.2)
    lock = _lock_path(tmp_path, KEY)
    seen: list[float] = []

    def slow_build() -> bytes:
        for _ in range(4):
            time.sleep(0.1)
            seen.append(time.time() - lock.stat().st_mtime)
        return b"slow"

    assert cache.get_or_build(KEY, slow_build) == (b"slow", False)
    assert max(seen) < 0.2  # refreshed every stale_after / 4: never looks stale to a waiter
    assert not lock.exists()


def test_failed_build_releases_the_lock(tmp_path: Path) -> None:
    cache = CompileCache(str(tmp_path))

    def fail() -> bytes:
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cache.get_or_build(KEY, fail)
    assert not _lock_path(tmp_path, KEY).exists()
    assert cache.get_or_build(KEY, lambda: b"ok") == (b"ok", False)


# ---------------------------------------------------------------------------------------------------- processes


def _race_worker(url: str, counter: str, out: str, barrier: Any) -> None:
    def build() -> bytes:
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # a compile takes a while: the others arrive while it runs
        return hashlib.sha256(b"deterministic").digest() * 1000

    cache = CompileCache(url)
    barrier.wait()
    data, hit = cache.get_or_build(KEY, build)
    with open(out, "w") as f:
        json.dump({"sha": hashlib.sha256(data).hexdigest(), "hit": hit, "waits": cache.stats.waits}, f)


def test_processes_racing_on_one_key_build_once(tmp_path: Path) -> None:
    n = 6
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    url = file_url(tmp_path / "cache")
    counter = tmp_path / "builds.txt"
    procs = [ctx.Process(target=_race_worker, args=(url, str(counter), str(tmp_path / f"out{i}.json"), barrier))
             for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    results = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(n)]
    expected = hashlib.sha256(hashlib.sha256(b"deterministic").digest() * 1000).hexdigest()
    assert all(r["sha"] == expected for r in results)
    assert len(counter.read_text().split()) == 1  # build ran once
    assert sorted(r["hit"] for r in results) == [False] + [True] * (n - 1)
    cache = CompileCache(url)
    assert [e.key for e in cache.entries()] == [KEY]  # exactly one entry
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".locks", KEY + SUFFIX]
    assert list((tmp_path / "cache" / ".locks").iterdir()) == []
