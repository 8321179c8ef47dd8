"""A compile cache at any fsspec URL: a local folder, ``file://``, ``memory://``, ``s3://`` (with s3fs).

At scale the compiler runs once and every worker loads its output from shared storage, so the cache must be
safe to share (JAX's persistent cache, Neuron's ``NEURON_COMPILE_CACHE_URL``). Entries are bytes under a key
that hashes named entries (``cache_key``); the caller decides what the bytes are (an artifact, usually).

On-disk layout under the cache URL::

    <key>.trnc              one entry: header | metadata JSON | payload
    .tmp.<key>.<random>     an entry being written (renamed onto <key>.trnc when complete)
    .locks/<key>.lock       held while one process builds <key> (local filesystems only)

An entry header is ``<8sIIQ32s``: magic ``b"TRNSCACH"``, entry version, metadata size, payload size, and the
sha256 of metadata + payload. So every entry verifies itself: a truncated or corrupted one is detected on
read, reported once (``CacheWarning``), deleted and rebuilt.

Guarantees:

- **Atomic publish.** An entry is written under a temporary name in the same folder and renamed into place
  (on object stores, ``s3://`` and the like, a single PUT is already atomic and is used directly), so a reader
  sees no entry or a whole one.
- **One build per key, on local filesystems.** ``get_or_build`` takes an exclusive lock file (``O_CREAT |
  O_EXCL``, which NFSv3+ honours too) before building; other processes poll until the entry appears. The holder
  refreshes the lock's mtime while building; a lock whose holder died (same host, pid gone) or that has not
  been refreshed for ``stale_after`` seconds is broken, with a warning. Breaking a stale lock can race with
  another process breaking it too; the worst case is a duplicate build, never a wrong or partial entry.
- **Other filesystems** (``memory://``, ``s3://``, ...) have no atomic create, so ``get_or_build`` builds
  and then publishes only if the entry is still absent: concurrent processes all get correct results and
  leave one entry, but each may build.
- **A read-only or full cache degrades.** The first failed write (``OSError``: permission denied, no space,
  read-only filesystem) warns once and the cache stops writing; building still works.

Entries are not fsync'ed: after a power loss an entry may be empty or partial, which its hash detects.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import socket
import struct
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from trnsim.config import settings
from trnsim.errors import CacheError

ENTRY_MAGIC = b"TRNSCACH"
ENTRY_VERSION = 1
SUFFIX = ".trnc"
_ENTRY = struct.Struct("<8sIIQ32s")  # magic, entry version, meta size, payload size, sha256(meta + payload)
_MAX_META = 1 << 20
_KEY = re.compile(r"[0-9A-Za-z_\-]{1,128}")
_TMP_PREFIX = ".tmp."
_LOCKS = ".locks"
# Filesystems where one write of a whole object is atomic (object stores; memory:// within a process).
_ATOMIC_PUT = frozenset({"memory", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"})
_HINT = "set TRNSIM_CACHE_URL (or --url) to a writable location, or free space there"


class CacheWarning(UserWarning):
    """Something about the compile cache the user should know; compilation carries on regardless."""


def cache_key(entries: Mapping[str, str | bytes]) -> str:
    """sha256 (hex) over named entries, sorted by name, each name and value length-prefixed.

    Callers pass everything the output depends on, e.g. ``{"module": ..., "options": ..., "target": ...,
    "trnsim": __version__, "format": str(FORMAT_VERSION)}``. Strings are hashed as UTF-8.
    """
    h = hashlib.sha256(b"trnsim.cache_key/1\0")
    for name in sorted(entries):
        value = entries[name]
        raw = value.encode() if isinstance(value, str) else bytes(value)
        name_raw = name.encode()
        h.update(struct.pack("<Q", len(name_raw)) + name_raw + struct.pack("<Q", len(raw)))
        h.update(raw)
    return h.hexdigest()


@dataclass
class CacheStats:
    """Counters of one ``CompileCache`` in this process (for benchmarks and ``trnsim cache stat``).

    Every ``get``/``get_or_build`` counts one hit (bytes came from the cache, perhaps after waiting for
    another process to build them) or one miss; ``builds`` counts calls of ``build``.
    """

    hits: int = 0
    misses: int = 0
    builds: int = 0
    corrupt: int = 0
    waits: int = 0  # get_or_build calls that waited for another process's build
    build_s: float = 0.0  # seconds spent in build


@dataclass(frozen=True)
class CacheEntry:
    """One entry as listed by ``CompileCache.entries``; ``problem`` is set when its header is bad."""

    key: str
    size: int  # bytes on storage, header included
    mtime: float  # seconds since the epoch
    meta: dict[str, Any] = field(default_factory=dict[str, Any])
    problem: str | None = None


@dataclass(frozen=True)
class CacheSummary:
    """What ``CompileCache.stat`` reports."""

    url: str
    entries: int
    bytes: int
    oldest: float | None
    newest: float | None
    corrupt: int  # entries whose header is bad


# ---------------------------------------------------------------------------------------------------- entries


def _encode_entry(payload: bytes, meta: Mapping[str, Any]) -> bytes:
    meta_raw = json.dumps(dict(meta), sort_keys=True, separators=(",", ":"), default=str).encode()
    digest = hashlib.sha256(meta_raw + payload).digest()
    return _ENTRY.pack(ENTRY_MAGIC, ENTRY_VERSION, len(meta_raw), len(payload), digest) + meta_raw + payload


def _decode_head(raw: bytes) -> tuple[int, int, bytes] | str:
    """(meta size, payload size, digest) from the start of an entry, or what is wrong with it."""
    if len(raw) < _ENTRY.size:
        return f"truncated: {len(raw)} bytes, shorter than the {_ENTRY.size}-byte header"
    magic, version, meta_size, payload_size, digest = _ENTRY.unpack_from(raw)
    if magic != ENTRY_MAGIC:
        return f"bad magic {magic!r}"
    if version != ENTRY_VERSION:
        return f"entry version {version}, expected {ENTRY_VERSION}"
    if meta_size > _MAX_META:
        return f"metadata size {meta_size} is implausible"
    return meta_size, payload_size, digest


def _decode_entry(raw: bytes, key: str) -> tuple[bytes, dict[str, Any]] | str:
    """(payload, metadata) of the whole entry stored as ``key``, or what is wrong with it."""
    head = _decode_head(raw)
    if isinstance(head, str):
        return head
    meta_size, payload_size, digest = head
    expected = _ENTRY.size + meta_size + payload_size
    if len(raw) < expected:
        return f"truncated: {len(raw)} bytes, the header says {expected}"
    if len(raw) > expected:
        return f"{len(raw) - expected} unexpected bytes after the end"
    body = memoryview(raw)[_ENTRY.size:]
    if hashlib.sha256(body).digest() != digest:
        return "sha256 mismatch (corrupted bytes)"
    meta = _parse_meta(bytes(body[:meta_size]))
    if isinstance(meta, str):
        return meta
    wrong = _wrong_key(meta, key)
    if wrong is not None:
        return wrong
    return bytes(body[meta_size:]), meta


def _wrong_key(meta: Mapping[str, Any], key: str) -> str | None:
    """Why an entry whose metadata is ``meta`` is not the one for ``key`` (a copied or renamed entry file,
    a mis-synced shared cache), or None. NOTE: the key is inside the hashed metadata, so it cannot drift."""
    stored = meta.get("key")
    if stored == key:
        return None
    if stored is None:
        return "it records no key (written by an older trnsim)"
    return f"it was stored under another key, {str(stored)[:16]}… (a copied or renamed entry)"


def _parse_meta(raw: bytes) -> dict[str, Any] | str:
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "metadata is not JSON"
    return meta if isinstance(meta, dict) else "metadata is not a JSON object"


# ---------------------------------------------------------------------------------------------------- storage


class _Store(Protocol):
    url: str
    local: bool

    def read(self, name: str) -> tuple[bytes, object] | None:
        """The file's bytes and a version stamp (for ``remove``), or None when absent."""
        ...

    def read_head(self, name: str, size: int) -> bytes: ...

    def publish(self, name: str, data: bytes, *, overwrite: bool) -> None:
        """Atomically make ``name`` hold ``data``; raises OSError when the storage refuses."""
        ...

    def remove(self, name: str, stamp: object = None) -> None:
        """Delete ``name`` (if given, only while it still has version ``stamp``); absent is fine."""
        ...

    def listing(self) -> list[tuple[str, int, float]]:
        """(name, size, mtime) of every file directly under the root."""
        ...


class _LocalStore:
    """A folder, through ``os``: real atomic rename and exclusive create."""

    local = True

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url

    def read(self, name: str) -> tuple[bytes, object] | None:
        try:
            with open(self.root / name, "rb") as f:
                st = os.fstat(f.fileno())
                return f.read(), (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            return None

    def read_head(self, name: str, size: int) -> bytes:
        with open(self.root / name, "rb") as f:
            return f.read(size)

    def publish(self, name: str, data: bytes, *, overwrite: bool) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{name}.", dir=self.root)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            if overwrite or not (self.root / name).exists():
                os.replace(tmp, self.root / name)
            else:
                os.unlink(tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def remove(self, name: str, stamp: object = None) -> None:
        path = self.root / name
        with contextlib.suppress(FileNotFoundError):
            if stamp is not None:
                st = os.stat(path)
                if (st.st_ino, st.st_mtime_ns, st.st_size) != stamp:
                    return  # replaced meanwhile (by a rebuild): keep the new one
            path.unlink()

    def listing(self) -> list[tuple[str, int, float]]:
        try:
            with os.scandir(self.root) as it:
                out: list[tuple[str, int, float]] = []
                for e in it:
                    with contextlib.suppress(FileNotFoundError):
                        if e.is_file():
                            st = e.stat()
                            out.append((e.name, st.st_size, st.st_mtime))
                return out
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise CacheError("the cache location is a file, not a folder", where=self.url,
                             hint="point TRNSIM_CACHE_URL (or --url) at a folder") from None
        except OSError as exc:
            raise CacheError(f"cannot list the cache: {_reason(exc)}", where=self.url, hint=_HINT) from None


class _FsspecStore:
    """Any other fsspec filesystem. No exclusive create, so no build lock (see the module docstring)."""

    local = False

    def __init__(self, fs: Any, root: str, url: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        self.atomic_put = any(p in _ATOMIC_PUT for p in protocols)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def read(self, name: str) -> tuple[bytes, object] | None:
        try:
            return self.fs.cat_file(self._path(name)), None
        except FileNotFoundError:
            return None

    def read_head(self, name: str, size: int) -> bytes:
        return self.fs.cat_file(self._path(name), start=0, end=size)

    def publish(self, name: str, data: bytes, *, overwrite: bool) -> None:
        path = self._path(name)
        if not overwrite and self.fs.exists(path):
            return
        with contextlib.suppress(FileExistsError):
            self.fs.makedirs(self.root, exist_ok=True)
        if self.atomic_put:
            self.fs.pipe_file(path, data)
            return
        tmp = self._path(f"{_TMP_PREFIX}{name}.{secrets.token_hex(6)}")
        self.fs.pipe_file(tmp, data)
        try:
            self.fs.mv(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                self.fs.rm_file(tmp)
            raise

    def remove(self, name: str, stamp: object = None) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(name))

    def listing(self) -> list[tuple[str, int, float]]:
        try:
            infos = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        out: list[tuple[str, int, float]] = []
        for info in infos:
            if info.get("type") != "file":
                continue
            name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
            out.append((name, int(info.get("size") or 0), _mtime(info)))
        return out


def _mtime(info: Mapping[str, Any]) -> float:
    for k in ("mtime", "LastModified", "last_modified", "created", "updated"):
        v = info.get(k)
        if isinstance(v, datetime):
            return v.timestamp()
        if isinstance(v, int | float):
            return float(v)
    return 0.0


def _resolve_url(url: str | None) -> str:
    """``url``, or TRNSIM_CACHE_URL when None, or the default cache when either is empty (an empty
    ``TRNSIM_CACHE_URL=`` means "the default", never the current folder)."""
    from trnsim.config import KNOBS

    if url is not None and not isinstance(url, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise CacheError(f"a cache URL must be a str, not {type(url).__name__}", where=repr(url),
                         hint="pass a URL or folder (str), a CompileCache, None (TRNSIM_CACHE_URL) or False")
    if url is None or not url.strip():
        url = str(settings.cache_url).strip()
    if not url:
        url = str(next(k for k in KNOBS if k.name == "cache_url").default())
    return url.strip()


def _open_store(url: str) -> _Store:
    parts = urlsplit(url)
    if "://" not in url or parts.scheme in ("file", "local"):
        if "://" not in url:
            raw = url
        elif parts.netloc in ("", "localhost"):   # file:///x and file://localhost/x are both /x
            raw = unquote(parts.path)
        else:
            raise CacheError(f"a file:// URL on another host ({parts.netloc}) is not supported", where=url,
                             hint="mount the folder and use file:///path (three slashes) or a plain path")
        return _LocalStore(Path(raw).expanduser().absolute(), url)
    try:
        import fsspec
        from fsspec.implementations.local import LocalFileSystem
    except ImportError:  # pragma: no cover - fsspec is a dependency
        raise CacheError("fsspec is not installed", where=url, hint="pip install fsspec") from None
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise CacheError(f"cannot open the cache URL: {exc}", where=url,
                         hint="install the filesystem's package (s3:// needs s3fs) or use a local folder") from None
    if isinstance(fs, LocalFileSystem):
        return _LocalStore(Path(root), url)
    return _FsspecStore(fs, root, url)


# ---------------------------------------------------------------------------------------------------- locking


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class _Lock:
    """An exclusive lock file; while held, a thread refreshes its mtime every ``stale_after / 4`` s."""

    def __init__(self, path: Path, stale_after: float) -> None:
        self.path = path
        self.stale_after = stale_after
        self.token = secrets.token_hex(8)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def try_acquire(self) -> bool:
        """True if acquired, False if someone holds it; OSError if the folder is not writable."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "token": self.token}, f)
        self._thread = threading.Thread(target=self._heartbeat, daemon=True, name="trnsim-cache-lock")
        self._thread.start()
        return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.stale_after / 4):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(OSError):
            if self.token in self.path.read_text():  # not if it was broken and taken over meanwhile
                self.path.unlink()

    def break_if_stale(self) -> str | None:
        """Remove the lock if its holder is dead or silent; returns why, or None if it is live (or gone)."""
        try:
            st = os.stat(self.path)
            text = self.path.read_text()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        try:
            info = json.loads(text)
        except json.JSONDecodeError:
            info = {}  # being written right now, or garbage: only age decides
        age = time.time() - st.st_mtime
        why = None
        if isinstance(info, dict) and info.get("host") == socket.gethostname() \
                and isinstance(info.get("pid"), int) and not _pid_alive(info["pid"]):
            why = f"its holder, process {info['pid']}, has exited"
        elif age > self.stale_after:
            why = f"not refreshed for {age:.0f} s"
        if why is None:
            return None
        with contextlib.suppress(OSError):
            # NOTE: re-check just before unlinking, to not remove a lock taken over meanwhile
            if self.path.read_text() == text and os.stat(self.path).st_ino == st.st_ino:
                self.path.unlink()
                return why
        return None


# ---------------------------------------------------------------------------------------------------- the cache


class CompileCache:
    """Bytes under keys at ``url`` (default: the ``TRNSIM_CACHE_URL`` setting).

        >>> cache = CompileCache("memory://doc")
        >>> key = cache_key({"module": "add", "target": "trn3"})
        >>> cache.get_or_build(key, lambda: b"compiled")
        (b'compiled', False)
        >>> cache.get_or_build(key, lambda: b"compiled")
        (b'compiled', True)
    """

    def __init__(self, url: str | None = None, *, stale_after: float = 60.0, poll: float = 0.02,
                 max_wait: float = 3600.0) -> None:
        self.url: str = _resolve_url(url)
        self._store = _open_store(self.url)
        self.stale_after = stale_after
        self.poll = poll
        self.max_wait = max_wait
        self.stats = CacheStats()
        self.disabled: str | None = None  # why writes stopped (read-only or full cache), once warned

    def __repr__(self) -> str:
        return f"CompileCache({self.url!r})"

    @property
    def local(self) -> bool:
        """Whether the cache is a local (or NFS-mounted) folder, where builds take a lock."""
        return self._store.local

    # -- reading and writing

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None (absent, or corrupt: then warned about and deleted)."""
        data = self._load(key)
        if data is None:
            self.stats.misses += 1
        else:
            self.stats.hits += 1
        return data

    def put(self, key: str, data: bytes, *, meta: Mapping[str, Any] | None = None) -> bool:
        """Store ``data`` under ``key`` atomically; False (after one warning) if the cache cannot be written."""
        return self._publish(key, bytes(data), meta or {}, overwrite=True)

    def get_or_build(self, key: str, build: Callable[[], bytes], *,
                     meta: Mapping[str, Any] | None = None) -> tuple[bytes, bool]:
        """``(payload, hit)``: the cached payload, or ``build()``'s result, stored for next time.

        On a local cache, concurrent callers (threads or processes) for one key run ``build`` once: the
        others wait for its entry. ``meta`` (plain JSON) is stored with the entry and shown by ``entries``.
        """
        data = self._load(key)
        if data is not None:
            self.stats.hits += 1
            return data, True
        if self._store.local and self.disabled is None:
            return self._build_locked(key, build, meta or {})
        data = self._build(build)
        self._publish(key, data[0], dict(meta or {}) | data[1], overwrite=False)
        self.stats.misses += 1
        return data[0], False

    def _build_locked(self, key: str, build: Callable[[], bytes], meta: Mapping[str, Any]) -> tuple[bytes, bool]:
        assert isinstance(self._store, _LocalStore)
        lock = _Lock(self._store.root / _LOCKS / f"{key}.lock", self.stale_after)
        start = time.monotonic()
        waited = False
        while True:
            try:
                acquired = lock.try_acquire()
            except OSError as exc:
                self._disable(exc)
                data, _ = self._build(build)
                self.stats.misses += 1
                return data, False
            if acquired:
                try:
                    data = self._load(key)  # published between our first look and the lock
                    if data is not None:
                        self.stats.hits += 1
                        return data, True
                    data, extra = self._build(build)
                    self._publish(key, data, dict(meta) | extra, overwrite=True)
                    self.stats.misses += 1
                    return data, False
                finally:
                    lock.release()
            if not waited:
                waited = True
                self.stats.waits += 1
            data = self._load(key)
            if data is not None:
                self.stats.hits += 1
                return data, True
            why = lock.break_if_stale()
            if why is not None:
                self._warn(f"removed a stale build lock for {key[:16]}… in {self.url}: {why}")
                continue
            if time.monotonic() - start > self.max_wait:
                self._warn(f"waited {self.max_wait:.0f} s for another process to build {key[:16]}… in "
                           f"{self.url}; building it here too")
                data, extra = self._build(build)
                self._publish(key, data, dict(meta) | extra, overwrite=True)
                self.stats.misses += 1
                return data, False
            time.sleep(self.poll)

    def _build(self, build: Callable[[], bytes]) -> tuple[bytes, dict[str, Any]]:
        t0 = time.perf_counter()
        data = build()
        elapsed = time.perf_counter() - t0
        if not isinstance(data, bytes | bytearray | memoryview):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise CacheError(f"build returned {type(data).__name__}, expected bytes")
        self.stats.builds += 1
        self.stats.build_s += elapsed
        return bytes(data), {"build_s": round(elapsed, 6)}

    def _load(self, key: str) -> bytes | None:
        name = _entry_name(key)
        try:
            found = self._store.read(name)
        except OSError as exc:
            self._warn(f"cannot read compile cache entry {key[:16]}… in {self.url} ({_reason(exc)}); "
                       f"building it instead")
            return None
        if found is None:
            return None
        raw, stamp = found
        decoded = _decode_entry(raw, key)
        if isinstance(decoded, str):
            self.stats.corrupt += 1
            self._warn(f"compile cache entry {key[:16]}… in {self.url} is corrupt ({decoded}); deleted, "
                       f"it will be rebuilt")
            with contextlib.suppress(OSError):
                self._store.remove(name, stamp)
            return None
        return decoded[0]

    def _publish(self, key: str, data: bytes, meta: Mapping[str, Any], *, overwrite: bool) -> bool:
        name = _entry_name(key)
        if self.disabled is not None:
            return False
        try:
            self._store.publish(name, _encode_entry(data, {**meta, "key": key}), overwrite=overwrite)
        except OSError as exc:
            self._disable(exc)
            return False
        return True

    def _disable(self, exc: OSError) -> None:
        if self.disabled is None:
            self.disabled = _reason(exc)
            self._warn(f"compile cache {self.url} is not writable ({self.disabled}); compiling without "
                       f"caching. hint: {_HINT}")

    def _warn(self, message: str) -> None:
        warnings.warn(message, CacheWarning, stacklevel=4)

    # -- management

    def entries(self) -> list[CacheEntry]:
        """Every entry, sorted by key, with its metadata (read from its header; payloads are not hashed)."""
        out: list[CacheEntry] = []
        for name, size, mtime in sorted(self._store.listing()):
            if not name.endswith(SUFFIX) or name.startswith("."):
                continue
            key = name[: -len(SUFFIX)]
            out.append(self._describe(key, name, size, mtime))
        return out

    def _describe(self, key: str, name: str, size: int, mtime: float) -> CacheEntry:
        try:
            head = self._store.read_head(name, _ENTRY.size)
            decoded = _decode_head(head)
            if isinstance(decoded, str):
                return CacheEntry(key, size, mtime, problem=decoded)
            meta_size, payload_size, _ = decoded
            if size != _ENTRY.size + meta_size + payload_size:
                return CacheEntry(key, size, mtime, problem=f"size {size}, the header says "
                                  f"{_ENTRY.size + meta_size + payload_size}")
            meta = _parse_meta(self._store.read_head(name, _ENTRY.size + meta_size)[_ENTRY.size:])
        except OSError as exc:
            return CacheEntry(key, size, mtime, problem=_reason(exc))
        if isinstance(meta, str):
            return CacheEntry(key, size, mtime, problem=meta)
        wrong = _wrong_key(meta, key)
        if wrong is not None:
            return CacheEntry(key, size, mtime, meta, problem=wrong)
        return CacheEntry(key, size, mtime, meta)

    def stat(self) -> CacheSummary:
        """Entry count, total bytes, oldest and newest entry."""
        entries = self.entries()
        times = [e.mtime for e in entries]
        return CacheSummary(self.url, len(entries), sum(e.size for e in entries),
                            min(times) if times else None, max(times) if times else None,
                            sum(e.problem is not None for e in entries))

    def clear(self) -> int:
        """Delete every entry (and temporary files older than ``stale_after``); returns the entries deleted."""
        removed = 0
        now = time.time()
        try:
            for name, _, mtime in self._store.listing():
                if name.endswith(SUFFIX) and not name.startswith("."):
                    self._store.remove(name)
                    removed += 1
                elif name.startswith(_TMP_PREFIX) and now - mtime > self.stale_after:
                    self._store.remove(name)
        except OSError as exc:
            raise CacheError(f"cannot clear: {_reason(exc)}", where=self.url, hint=_HINT) from None
        return removed

    def keys(self) -> Iterator[str]:
        """The keys present (no verification)."""
        for name, _, _ in self._store.listing():
            if name.endswith(SUFFIX) and not name.startswith("."):
                yield name[: -len(SUFFIX)]


def _entry_name(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise CacheError(f"bad cache key {key!r}", hint="keys are made by cache_key(): 64 hex digits")
    return key + SUFFIX


def _reason(exc: OSError) -> str:
    text = exc.strerror or str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


__all__ = ["CacheEntry", "CacheStats", "CacheSummary", "CacheWarning", "CompileCache", "cache_key"]
