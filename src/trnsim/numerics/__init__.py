"""Bit-exact number formats: fp32/tf32/bf16/fp16, fp8 (e4m3fn, e5m2), fp6, fp4, E8M0, OCP MX block
formats, int8/int4 with scales, and N:M structured sparsity.

    >>> import numpy as np, trnsim.numerics as tn
    >>> tn.quantize(np.float32([0.1, 1.06, 500.0]), "fp8_e4m3").tolist()
    [0.1015625, 1.0, 448.0]
    >>> mx = tn.mx_quantize(np.linspace(-1, 1, 64, dtype=np.float32), "mxfp4_e2m1")
    >>> mx.scale_exponents.tolist()
    [-2, -2]
"""

from trnsim.numerics.formats import FORMATS as FORMATS
from trnsim.numerics.formats import FloatFormat as FloatFormat
from trnsim.numerics.formats import Format as Format
from trnsim.numerics.formats import IntFormat as IntFormat
from trnsim.numerics.formats import MXFormat as MXFormat
from trnsim.numerics.formats import get_format as get_format
from trnsim.numerics.intq import IntQuantized as IntQuantized
from trnsim.numerics.intq import quantize_int as quantize_int
from trnsim.numerics.mx import SCALE_RULES as SCALE_RULES
from trnsim.numerics.mx import MXArray as MXArray
from trnsim.numerics.mx import mx_quantize as mx_quantize
from trnsim.numerics.quantize import decode as decode
from trnsim.numerics.quantize import encode as encode
from trnsim.numerics.quantize import quantize as quantize
from trnsim.numerics.rounding import ROUNDING as ROUNDING
from trnsim.numerics.sparsity import SparseMetadata as SparseMetadata
from trnsim.numerics.sparsity import compress as compress
from trnsim.numerics.sparsity import decompress as decompress
from trnsim.numerics.sparsity import prune as prune
from trnsim.numerics.sparsity import satisfies as satisfies
