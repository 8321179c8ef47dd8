"""The fabric's error: a topology, group or collective request the model cannot honour.

It is a ``TrnsimError`` like every other trnsim error, so the CLI prints its message and hint and exits
with code 2. (A module of its own so that every fabric module can raise it without import cycles.)
"""

from __future__ import annotations

from trnsim.errors import TrnsimError


class FabricError(TrnsimError):
    """A topology, group or collective request that the fabric model cannot honour."""


__all__ = ["FabricError"]
