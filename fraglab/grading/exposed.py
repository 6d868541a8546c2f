"""What the code of each exercise may use of the course while it is graded: the one home of that
fact (:mod:`.sandbox` reads it).

The process that runs a learner's code cannot import the course. What an exercise needs of it
comes as *services*: the notebook's name of a course module (``warp``, ``lc``, ``rr``, ...) and
the names in it that the exercise may use. A function is called *in the grader* with the
learner's plain-data arguments (so a check that counts or records its calls, e.g.
``grade.count_calls(warp, "shfl_xor_sync")``, sees them, and the learner's process cannot forge
them); a constant is copied; an exception class is mirrored by name, both ways.

A service's result that is not plain data stays in the grader and the learner's code gets a
handle: it may read the attributes :data:`ATTRIBUTES` lists for the object's class (a method
among them is called in the grader too) and pass the handle back. Nothing else of the course
reaches the learner's process: every other course name of the notebook there is a stand-in
that refuses each use (``grade``, ``checks``, ``tracer`` while a layout is the answer...).
"""
from __future__ import annotations

#: The warp emulator as a learner's Python uses it (not its reductions: ``reduce_xor`` is an
#: answer).
WARP = ("shfl_sync shfl_xor_sync shfl_up_sync shfl_down_sync FULL_MASK WARP_SIZE LANES lane_id "
        "lanes lanes_in_mask mask_of WarpError LayoutError format_diff to_fragment from_fragment")

#: ``lab/regions | alias: names | alias: names``.
_TABLE = f"""
00_hello_warp/1 2 | warp: {WARP}
03_permutation_and_quad_reduction/1 2 | warp: {WARP}
04_microbenchmark/3 | bench: compare
05_flash_attention/2 | warp: {WARP}
06_layout_codegen/2 | lc: plan harness_source reduce_kernel OPS | tracer: layout
07_register_reuse/3a 3b | rr: tiles build occupancy shared_bytes threads TILES
08_register_liveness/1a 1b | rl: build
"""

#: ``{lab: {region: {alias: (names, ...)}}}``, read from the table above.
SERVICES: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {}
for _line in _TABLE.strip().splitlines():
    _key, *_parts = (x.strip() for x in _line.split("|"))
    _lab, _regions = _key.split("/")
    for _region in _regions.split():
        _mods = SERVICES.setdefault(_lab, {}).setdefault(_region, {})
        for _part in _parts:
            _alias, _names = (x.strip() for x in _part.split(":"))
            _mods[_alias] = tuple(_names.split())

#: Attributes a learner's code may read (or call, for methods) on a handle, by the object's
#: class (``module.qualname``). An object of a class not listed can only be passed back.
ATTRIBUTES: dict[str, frozenset] = {k: frozenset(v.split()) for k, v in {
    "fraglab.toolchain.Build": "name arch kernels ptx resources sass opcodes classes report",
    "fraglab.bench.Comparison": "timings baseline settings ratios",
    "fraglab.bench.Timing": "name times_ms n median_ms p10_ms p90_ms min_ms mean_ms std_ms iqr_ms "
                            "summary to_dict",
    "fraglab.layout_codegen.plan.Plan": "name shape k ctype layout rows cols sm80 source n_regs "
                                        "line pattern describe",
    "fraglab.layout_codegen.plan.LinePlan": "axis lines groups offsets span line_of leaders "
                                            "lane_bits",
}.items()}


def services(lab: str, regions) -> dict[str, tuple[str, ...]]:
    """``{alias: names}`` an exercise (its regions) may use."""
    out: dict[str, set] = {}
    for r in regions:
        for alias, names in SERVICES.get(lab, {}).get(r, {}).items():
            out.setdefault(alias, set()).update(names)
    return {a: tuple(sorted(n)) for a, n in out.items()}


def attributes(obj) -> frozenset:
    t = type(obj)
    return ATTRIBUTES.get(f"{t.__module__}.{t.__qualname__}", frozenset())
