"""Topic 04_microbenchmark: the paper's benchmark (Morales 2025, section 4), reproduced and measured.

The kernels (``kernels/04_microbenchmark.cu``) compute the 16 row maxima of ``C = A @ B`` for
each 16x16 tile, one WMMA per warp, and differ only in the epilogue: through shared memory
(``smem``, the baseline) or in registers (``regs``, the paper's permutation and quad reduction).

One job per module:

* :mod:`.kernels` - the wrappers :func:`rowmax`, :func:`rowmax_cycles`, :func:`launcher` (a
  zero-argument launch for :mod:`fraglab.bench`), :func:`random_inputs` and :func:`reference`
  (NumPy, float64 of the rounded inputs); :mod:`.problems` - :data:`PROBLEMS` (correctness,
  described once) and :func:`check_correctness`.
* :mod:`.build_report` - Table 3 from ptxas and SASS (:func:`build_report`) and the check that
  the clock reads enclose the epilogue (:func:`clock_bracket`).
* **The paper's measurement**: one timed launch per fresh process, baseline first, averaged over
  processes (:mod:`.processes`, :func:`run_processes`; the child runs :mod:`.child_main`), and
  the same with ONE factor changed at a time (:mod:`.setups`, :data:`SETUPS`: launch order,
  module loading, loading the kernels before timing, an untimed warm-up launch).
* **Sound measurements**: warm, in-process, thousands of launches in both orders through
  :func:`fraglab.bench.compare` (:mod:`.warm`, :func:`warm_compare`); the epilogue alone in SM
  cycles (:func:`epilogue_cycles`); power through NVML during a sustained loop and during the
  paper's process-relaunch loop (:mod:`.power`); occupancy from Nsight Compute (:mod:`.ncu`).
* **The record**: ``python -m fraglab.microbenchmark all --out DIR`` (:mod:`.run`) runs everything
  (about 3.5 minutes on an H100) and writes ``DIR/results.json`` (with
  :func:`fraglab.bench.device_info`) and ``DIR/run.log``; :func:`load` (:mod:`.record`) reads it
  back, :func:`reproduce_table`, :func:`findings`, :func:`conclusion` (:mod:`.report`) and the
  ``plot_*`` functions (:mod:`.plots`) turn it into the chapter's tables and figures;
  :mod:`.explain` computes the explanations the chapter glues into its prose (where the first
  launch's time goes, epilogue cycles against kernel time, idle power, energy, throughput against
  the H100's peaks) and :mod:`.tables` gives the chapter's tables as HTML.
* :mod:`.lab` - the lab's checks; :mod:`.cli` - the command line.

Command line::

    python -m fraglab.microbenchmark all --out book/data/04_microbenchmark
    python -m fraglab.microbenchmark paper --processes 30 [--setups paper,warmup] [--out DIR]
    python -m fraglab.microbenchmark warm|cycles|power|ncu|table3|check [--out DIR]
"""
from ..child import MARKER as CHILD_MARKER, ChildError  # noqa: F401
from ..dtypes import from_bf16, to_bf16  # noqa: F401
from ..nvml import PowerSampler  # noqa: F401
from .build_report import (EPILOGUE_OPS, bracket, build_report, clock_bracket,  # noqa: F401
                           kernel_sass, write_cubin)
from .cli import main  # noqa: F401
from .kernels import (DTYPES, FINAL, KERNELS, LABELS, MAX_TILES, VARIANTS, decode,  # noqa: F401
                      encode, kernel_name, launcher, random_inputs, reference, rowmax, rowmax_cycles,
                      storage_dtype, tolerance)
from .lab import (clock_source_problems, cycles_of_source, recorded_compares,  # noqa: F401
                  warm_plan_problems)
from .ncu import (ACHIEVED, NCU_METRICS, interpret_ncu, ncu_command,  # noqa: F401
                  occupancy_table, parse_ncu_csv, run_ncu)
from .plots import (plot_cycles, plot_loading, plot_power, plot_speedups,  # noqa: F401
                    plot_time_distributions)
from .power import relaunch_power, sustained_power  # noqa: F401
from .problems import PROBLEMS, check_correctness  # noqa: F401
from .processes import (child_command, device_info_in_child, parse_child_output,  # noqa: F401
                        run_child, run_processes, summarize_processes)
from .explain import (energy_rows, epilogue_vs_kernel,  # noqa: F401
                      first_launch_breakdown, glue_values, power_idle, timer_step_ns,
                      waves_throughput)
from .record import RESULTS_DIR, load  # noqa: F401
from .report import PAPER, conclusion, findings, format_table, reproduce_table  # noqa: F401
from .tables import (SETUP_SHORT, build_html, cycles_html, loading_html,  # noqa: F401
                     occupancy_html, power_html, reproduce_html, warm_html)
from .run import PLAN, POWER_S, run_all  # noqa: F401
from .setups import (FACTOR_VALUES, PAPER_CONFIG, SETUP_LABELS, SETUPS,  # noqa: F401
                       one_factor_problems, setup_config)
from .warm import epilogue_cycles, fill_tiles, warm_compare  # noqa: F401
