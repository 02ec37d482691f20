"""A software prefetch for numba kernels: ``prefetch(a, i)`` asks the CPU to start loading the cache
line of ``a[i]`` (LLVM's ``llvm.prefetch``: for writing, rw = 1, as most lines the solvers ask
for are updated; a line only read is loaded all the same; high temporal locality; data cache).

It is a hint: it reads nothing into the program, never faults (an x86 or ARM prefetch of any
address is dropped silently) and changes no result, only when memory arrives. The solvers' scattered
updates (a move's rows in [RKL23] Alg. 2, the sampler weights of the moved coordinates) wait on one
random access each; issued some entries ahead, the loads overlap instead (benchmarks/fw_prefetch.py
and fw_full_shape_steps.py measure the steps with and without).

The intrinsic is declared by its base name ``llvm.prefetch``, which LLVM's intrinsic upgrade maps
to the mangling of the running LLVM (``.p0i8`` before opaque pointers, ``.p0`` after): checked with
numba 0.61.2 / llvmlite 0.44 (LLVM 15: ``llvm.prefetch.p0i8``, the oldest numba pyproject.toml
accepts) and numba 0.68.1 / llvmlite 0.50 (LLVM 22: ``llvm.prefetch.p0``).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch"]

_I32 = ir.IntType(32)


@intrinsic
def prefetch(typingctx: Any, arr: types.Array, idx: types.Integer) -> tuple[Any, Any] | None:
    """``prefetch(arr, i)`` in a numba function: prefetch the cache line holding ``arr[i]`` (1-d array,
    integer i; no bounds check, none is needed: a prefetch never faults)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(idx, types.Integer)):
        return None
    sig = types.void(arr, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = context.cast(builder, args[1], signature.args[1], types.intp)  # uint8 200 is 200, not -56
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [idx], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch")
        # rw = 1 (the lines are written: alpha, mark, the weights), locality = 3 (keep in all levels), data
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(_I32, 1), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])
        return context.get_dummy_value()

    return sig, codegen
