"""Rung 10's tuning switches in the chapter: the main loop's SASS per switch setting, compiled
where the chapter runs (Table 5 and the counts its prose quotes). The counting is
:func:`.switches.sass_evidence`'s; the settings are :data:`.report.SWITCH_SETS`' first four (off,
RDB, O1, RDB + O1); the sweep's timings of the same settings are :func:`.report.switches_table`.

    rows = live_rows(doc)          # rung 10's tiles at 4096^3 and rung 9's, each setting
    table(rows)                    # Table 5
    glue_values(rows)              # {"ch07-live-sw-after-rdb": "111", ...}
"""
from __future__ import annotations

from .. import report
from . import kernels, switches
from .report import SIZE, SWITCH_SETS, SWITCHES_OFF, rung10_tiles, tuned_tiles

#: The settings of Table 5, and their glue names' suffixes.
SETTINGS = dict(zip(list(SWITCH_SETS)[:4], ("off", "rdb", "o1", "both")))
#: The counts the prose quotes: glue name part -> sass_evidence key.
QUOTED = {"after": "ffma_after_barrier", "reuse": "reuse_flags", "cache": "from_cache",
          "file": "from_file", "bank": "conflicts_mod4", "regs": "registers"}


def live_rows(doc: dict, arch: str = "sm_90") -> list[dict]:
    """:func:`.switches.sass_evidence` (compiled here) of rung 10 as it launches at SIZE^3 with
    the record's table and of rung 9's tile, each with the switches of :data:`SETTINGS` on and
    the others off (``setting``: which)."""
    rows = []
    for base in (rung10_tiles(doc, (SIZE,) * 3), tuned_tiles(doc)["autotuned"]):
        base = {k: v for k, v in base.items() if k in kernels.TILES["split_k"]}
        rows += [{"setting": name, **switches.sass_evidence(
            {**base, **SWITCHES_OFF, **SWITCH_SETS[name]}, arch)} for name in SETTINGS]
    return rows


def table(rows: list[dict]) -> report.Table | report.Tables:
    """Table 5: per row of :func:`live_rows`, registers, the main loop's FFMAs and those after
    its barrier, ``.reuse`` flags, operands the reuse cache serves, register-file reads, FFMAs
    whose register-file reads share a bank (reg mod 4)."""
    keys = ("registers", "ffma", "ffma_after_barrier", "reuse_flags", "from_cache", "from_file",
            "conflicts_mod4")
    body = [[f"{r['tiles']['BM']}x{r['tiles']['BN']}x{r['tiles']['BK']}", r["setting"],
             *(r[k] for k in keys)] for r in rows]
    return report.table(body, ["block tile", "switches", "regs", "FFMA", "FFMA after the barrier",
                               ".reuse flags", "from the reuse cache", "register-file reads",
                               "bank conflicts (mod 4)"], wrap_header=True, caption="Table 5: "
                        "rung 10's main loop per switch setting (SASS for sm_90, compiled where "
                        "this page was executed).")


def glue_values(rows: list[dict]) -> dict[str, str]:
    """The counts of the first tile of :func:`live_rows` that the prose quotes
    (``ch07-live-sw-<count>-<setting>``, ``ch07-live-sw-ffma``, ``ch07-live-sw-tile``): they
    depend on the compiler, so :func:`.report.glue_values` (the record's) leaves them out."""
    by = {r["setting"]: r for r in rows[:len(SETTINGS)]}
    out = {"ch07-live-sw-ffma": str(by["off"]["ffma"]), "ch07-live-sw-tile": by["off"]["label"]}
    for name, s in SETTINGS.items():
        out.update({f"ch07-live-sw-{k}-{s}": str(by[name][v]) for k, v in QUOTED.items()})
    return out
