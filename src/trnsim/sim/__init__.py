"""The simulator: ISA semantics in plain numpy (the living spec of ``trnsim.isa``), ``Device``, and the timing
model (``sim.timing``) with its ``Profile`` (``sim.profile``) and trace export (``sim.trace``).

    >>> from trnsim.sim import Device
    >>> Device("trn3").spec.cores
    8
"""

# semantics_engines registers the VectorE/ScalarE/GpSimd semantics in SEMANTICS on import
from trnsim.sim import semantics_engines as semantics_engines
from trnsim.sim.device import Device as Device
from trnsim.sim.device import Executed as Executed
from trnsim.sim.device import RunResult as RunResult
from trnsim.sim.semantics import SEMANTICS as SEMANTICS
from trnsim.sim.tensorspec import TensorSpec as TensorSpec
