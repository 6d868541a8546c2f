"""The paper's measurement setup and the setups that change one factor of it at a time
(:data:`SETUPS`; the kernels themselves are :data:`.kernels.VARIANTS`)."""
from __future__ import annotations

from .kernels import DTYPES, MAX_TILES, VARIANTS, check_dtype

#: The paper's procedure, as a child process of ours runs it: bf16, one tile (one block of one
#: warp), the baseline first, the CUDA default module loading (LAZY since CUDA 12.2), nothing
#: loaded or launched before the timed launches.
PAPER_CONFIG = {"dtype": "bf16", "tiles": 1, "order": ("smem", "regs"), "module_loading": "LAZY",
                "preload": False, "warmup": False}

#: One factor changed at a time from PAPER_CONFIG.
SETUPS = {
    "paper": {},
    "regs_first": {"order": ("regs", "smem")},
    "eager": {"module_loading": "EAGER"},
    "preload": {"preload": True},
    "warmup": {"warmup": True},
}
SETUP_LABELS = {
    "paper": "the paper's way (baseline first, lazy loading, cold)",
    "regs_first": "in-register kernel launched first",
    "eager": "CUDA_MODULE_LOADING=EAGER",
    "preload": "both kernels loaded before the timed launches",
    "warmup": "one untimed launch of each kernel first",
}
FACTOR_VALUES = {"order": {("smem", "regs"), ("regs", "smem")},
                 "module_loading": {"LAZY", "EAGER"}, "preload": {False, True},
                 "warmup": {False, True}, "dtype": set(DTYPES)}


def setup_config(overrides: dict | None = None) -> dict:
    """PAPER_CONFIG with ``overrides`` applied and checked (orders become tuples)."""
    cfg = dict(PAPER_CONFIG)
    for k, v in (overrides or {}).items():
        if k not in PAPER_CONFIG:
            raise ValueError(f"unknown factor {k!r}; known: {', '.join(PAPER_CONFIG)}")
        cfg[k] = tuple(v) if k == "order" else v
    if cfg["module_loading"] not in FACTOR_VALUES["module_loading"]:
        raise ValueError(f"module_loading must be LAZY or EAGER, got {cfg['module_loading']!r}")
    if sorted(cfg["order"]) != sorted(VARIANTS) and not (len(cfg["order"]) == 1
                                                     and cfg["order"][0] in VARIANTS):
        raise ValueError(f"order must be a permutation of {VARIANTS} (or one of them), "
                         f"got {cfg['order']}")
    check_dtype(cfg["dtype"])
    if not isinstance(cfg["tiles"], int) or not 1 <= cfg["tiles"] <= MAX_TILES:
        raise ValueError(f"tiles must be an int between 1 and {MAX_TILES}, got {cfg['tiles']!r}")
    return cfg


def jsonable_config(cfg: dict) -> dict:
    """A configuration as JSON holds it (tuples become lists)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()}


def one_factor_problems(setups: dict[str, dict]) -> list[str]:
    """What is wrong with a plan of setups (name -> overrides of PAPER_CONFIG): each one but a
    ``paper`` reference must change exactly one factor, and order, module_loading, preload and
    warmup must each be varied. Returns a list of problems (empty: the plan is sound)."""
    problems = []
    if "paper" not in setups or setups["paper"]:
        problems.append("the plan needs a 'paper' entry with no change: the reference to vary from")
    varied = set()
    for name, ov in setups.items():
        if name == "paper":
            continue
        try:
            cfg = setup_config(ov)
        except (ValueError, TypeError) as e:
            problems.append(f"{name}: {e}")
            continue
        changed = [k for k in PAPER_CONFIG if cfg[k] != PAPER_CONFIG[k]]
        if len(changed) != 1:
            problems.append(f"{name}: changes {len(changed)} factors ({', '.join(changed) or 'none'}); "
                            "change exactly one, so that a difference has one cause")
        else:
            varied.add(changed[0])
    for factor in ("order", "module_loading", "preload", "warmup"):
        if factor not in varied:
            problems.append(f"no setup changes {factor!r} alone")
    return problems
