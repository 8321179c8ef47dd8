"""Running compiled programs: the ``.neff``-style artifact format and the shared compile cache.

Layer: above the compiler (which produces what goes into an artifact), below the CLI. Nothing here knows
how a program is compiled: an artifact is metadata plus named byte sections, and a cache entry is bytes
under a key.
"""

from __future__ import annotations

from trnsim.runtime.artifact import (
    FORMAT_VERSION,
    Artifact,
    pack_arrays,
    pack_artifact,
    read_artifact,
    unpack_arrays,
    unpack_artifact,
    write_artifact,
)
from trnsim.runtime.cache import CacheEntry, CacheStats, CacheWarning, CompileCache, cache_key

__all__ = [
    "FORMAT_VERSION",
    "Artifact",
    "CacheEntry",
    "CacheStats",
    "CacheWarning",
    "CompileCache",
    "cache_key",
    "pack_arrays",
    "pack_artifact",
    "read_artifact",
    "unpack_arrays",
    "unpack_artifact",
    "write_artifact",
]
