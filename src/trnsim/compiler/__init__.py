"""The StableHLO compiler: module in, ``CompiledProgram`` out (see ``trnsim.compile``)."""

from __future__ import annotations

from trnsim.compiler.api import CompiledProgram, compile, compile_for_conformance, compile_graph
from trnsim.compiler.options import CompileOptions

__all__ = ["CompileOptions", "CompiledProgram", "compile", "compile_for_conformance", "compile_graph"]
