"""Figures the book shows are legible at the text column's width: every number or label at least
report.MIN_TEXT_PX (9 px) tall when the page shrinks the image to 785 px (CPU, matplotlib Agg)."""
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fraglab import report, tracer  # noqa: E402

# The kinds whose layout heatmaps chapters 01 and 02 show.
BOOK_KINDS = ["acc_16x16x16_f32", "a_16x16x16_bf16_row", "a_16x16x16_f16_row", "b_32x8x16_f16_row"]


@pytest.mark.parametrize("name", BOOK_KINDS)
def test_layout_heatmap_numbers_are_legible(name):
    k = tracer.get_kind(name)
    fig = tracer.plot_layout(tracer.layout(k), kind=k)
    px = report.smallest_text_px(fig)
    plt.close(fig)
    assert px >= report.MIN_TEXT_PX, f"{name}: smallest text {px:.1f} px at the column width"


def test_displayed_px_arithmetic():
    # a 13.9-inch figure at 100 dpi is shrunk to 785 px: 6 pt text is 4.7 px (the old heatmaps)
    assert report.displayed_px(6, 13.92) == pytest.approx(6 / 72 * 100 * 785 / 1392)
    assert report.displayed_px(9, 5.0) == pytest.approx(12.5)        # not enlarged
    assert report.displayed_px(report.min_fontsize_pt(12.0), 12.0) == pytest.approx(report.MIN_TEXT_PX)
