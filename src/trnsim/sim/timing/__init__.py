"""Instruction-level timing of NeuronCore programs: cost rules (``costs``), DMA queues sharing HBM
bandwidth (``dma``) and the event-driven scheduler (``schedule``); ``trnsim.sim.profile`` turns its
timeline into a ``Profile``.

    >>> from trnsim import hw
    >>> from trnsim.sim.timing import matmul_program, simulate
    >>> tl = simulate(matmul_program(256, 256, 512), hw.get("trn3"))
    >>> tl.total_seconds > 0
    True
"""

from trnsim.sim.timing.costs import DmaCost as DmaCost
from trnsim.sim.timing.costs import EngineCost as EngineCost
from trnsim.sim.timing.costs import TensorWork as TensorWork
from trnsim.sim.timing.examples import matmul_program as matmul_program
from trnsim.sim.timing.schedule import Timeline as Timeline
from trnsim.sim.timing.schedule import simulate as simulate
