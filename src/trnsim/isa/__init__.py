"""The NeuronCore instruction set: access patterns, one frozen dataclass per instruction (semantics as
pseudo-code in its docstring), programs of per-engine streams synchronised by semaphores, a verifier and a
text form that round-trips.

    >>> from trnsim.isa import tile, Memset, ProgramBuilder, parse
    >>> b = ProgramBuilder(); b.emit("vector", Memset(tile("sbuf", "fp32", (128, 4)), 1.0))
    >>> p = b.build(); parse(str(p)) == p
    True
"""

from trnsim.isa.ap import MEMORIES as MEMORIES
from trnsim.isa.ap import AccessPattern as AccessPattern
from trnsim.isa.ap import Memory as Memory
from trnsim.isa.ap import format_ap as format_ap
from trnsim.isa.ap import hbm as hbm
from trnsim.isa.ap import parse_ap as parse_ap
from trnsim.isa.ap import tile as tile
from trnsim.isa.ap import transposed as transposed
from trnsim.isa.base import ENGINES as ENGINES
from trnsim.isa.base import INSTRUCTIONS as INSTRUCTIONS
from trnsim.isa.base import Engine as Engine
from trnsim.isa.base import Instruction as Instruction
from trnsim.isa.base import Nop as Nop
from trnsim.isa.dma import DmaCopy as DmaCopy
from trnsim.isa.dma import DmaGather as DmaGather
from trnsim.isa.dma import DmaScatter as DmaScatter
from trnsim.isa.dma import DmaScatterAdd as DmaScatterAdd
from trnsim.isa.dtypes import DTYPES as DTYPES
from trnsim.isa.dtypes import DType as DType
from trnsim.isa.dtypes import VerifyError as VerifyError
from trnsim.isa.dtypes import get_dtype as get_dtype
from trnsim.isa.elementwise import Activation as Activation
from trnsim.isa.elementwise import AffineSelect as AffineSelect
from trnsim.isa.elementwise import Iota as Iota
from trnsim.isa.elementwise import Memset as Memset
from trnsim.isa.elementwise import Select as Select
from trnsim.isa.elementwise import TensorCopy as TensorCopy
from trnsim.isa.elementwise import TensorScalar as TensorScalar
from trnsim.isa.elementwise import TensorTensor as TensorTensor
from trnsim.isa.ops import ACTIVATIONS as ACTIVATIONS
from trnsim.isa.ops import ALU_OPS as ALU_OPS
from trnsim.isa.ops import REDUCE_OPS as REDUCE_OPS
from trnsim.isa.program import Program as Program
from trnsim.isa.program import ProgramBuilder as ProgramBuilder
from trnsim.isa.program import TensorDecl as TensorDecl
from trnsim.isa.reduction import BnAggr as BnAggr
from trnsim.isa.reduction import BnStats as BnStats
from trnsim.isa.reduction import FindIndex8 as FindIndex8
from trnsim.isa.reduction import MatchReplace8 as MatchReplace8
from trnsim.isa.reduction import Max8 as Max8
from trnsim.isa.reduction import PartitionBroadcast as PartitionBroadcast
from trnsim.isa.reduction import PartitionReduce as PartitionReduce
from trnsim.isa.reduction import TensorReduce as TensorReduce
from trnsim.isa.reduction import Transpose32 as Transpose32
from trnsim.isa.tensor_engine import Matmul as Matmul
from trnsim.isa.tensor_engine import TensorTranspose as TensorTranspose
from trnsim.isa.text import parse as parse
from trnsim.isa.text import parse_instruction as parse_instruction
from trnsim.isa.verify import verify as verify
