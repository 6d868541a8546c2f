"""A PTX interpreter: run the course's CUDA kernels (compiled by NVRTC for sm_80) on a CPU.

    >>> from fraglab import ptx, toolchain
    >>> prog = ptx.Program(toolchain.compile("00_hello_warp", "sm_80").ptx)
    >>> res = ptx.launch(prog, "warp_sum", grid=(rows,), block=(32,), args=(x, out, np.int32(rows)))

Warps of 32 lanes run vectorised with NumPy; see fraglab/ptx/README.md for the model
(minimum-PC reconvergence, memory spaces and checks, deterministic clocks) and its limits.
"""
from .errors import (BarrierError, CollectiveError, CrossBlockWait, Deadlock,  # noqa: F401
                     DeviceAssertion, MemoryAccessError, PTXError, PTXSyntaxError, SharedRace,
                     StepBudgetExceeded, TrapError, UninitializedRead, UnsupportedInstruction,
                     WgmmaHazard)
from .program import Launch, Program, ScheduleDependent, launch, load, options  # noqa: F401
from .opcodes import interpreter_arch, opcodes, supported, unsupported_opcodes  # noqa: F401
from .tensormap import TensorMapError  # noqa: F401
from .inspect import (registers_at, register_table, plot_registers,  # noqa: F401
                      shuffle_trace, plot_shuffles, ShuffleTrace, ShuffleStep)

#: The interpreter runs sm_90a PTX too: wgmma, mbarriers, bulk and TMA tensor copies, named
#: barriers (README).
SUPPORTS_SM90A = True
