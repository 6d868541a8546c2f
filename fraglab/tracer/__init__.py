"""Topic 01_tracer: which lane and register hold which element of a WMMA fragment, found by
tracing (the wrappers of ``kernels/01_tracer.cu``).

The idea (Morales, "Accelerating fused WMMA operations via in-register data permutation",
section 3.1, Algorithm 1): fill a matrix with values that encode their own coordinates, get it
into a fragment, let each lane write out its registers, and decode the values on the host.

    >>> from fraglab import tracer
    >>> t = tracer.trace("acc_16x16x16_f32")            # on a GPU: traced live
    >>> t.layout[5, 2]                                   # lane 5, register 2 -> (row, col)
    array([9, 2])
    >>> lay = tracer.layout("acc_16x16x16_f32")          # GPU: live; no GPU: the recording

Parts, each usable without a GPU unless it says so:

* the fragment kinds (:data:`KINDS`, :func:`get_kind`, :data:`TYPES`...) are
  :mod:`fraglab.fragments`' catalogue, re-exported here; the recordings
  (:func:`load_recording`, :func:`recorded_layout`) are :mod:`fraglab.fragments.recording`'s.
* :mod:`.encoding` - :data:`ENCODINGS`: ``linear`` (row*cols + col), ``paper`` (row*100 + col,
  as in Algorithm 1) and ``two_pass`` (rows, then columns, in two runs); :func:`exactness_problems`
  says when an encoding is too large for a type: ``row*100 + col`` in bf16 rounds.
* :mod:`.decode` - :func:`decode` turns dumps into a :class:`Trace` (the (32, num_elements, 2)
  layout plus coverage, uniqueness and duplicate counts); :func:`simulate_dump` produces the dump
  a GPU would give for a known layout, rounding as the device does (:func:`fraglab.dtypes.round_to`).
* :mod:`.live` - GPU: :func:`dump`, :func:`trace`, :func:`trace_kind` (both ways, compared);
  :func:`layout`: live on a GPU (compared with the recording for that arch), the recording
  (``fraglab/layouts/<arch>.json``, default sm_90) without one.
* :mod:`.record` - GPU: :func:`record` writes the recording of this GPU.
* :mod:`.plots` - :func:`plot_layout`, :func:`format_table`: lane and register per element, used
  by the book, the labs and failure messages.
* :mod:`.cli` - ``python -m fraglab.tracer kinds | record | show``.
"""
from ..dtypes import round_bf16, round_tf32  # noqa: F401
from ..fragments import (CPP_TYPES, KINDS, TYPES, ElemType, Kind,  # noqa: F401
                         UnsupportedKind, get_kind, kinds, num_elements_table,
                         require_supported, supported)
from ..fragments.recording import (DEFAULT_ARCH, FORMAT, LAYOUTS_DIR,  # noqa: F401
                                   RecordingMissing, compare_layouts, load_recording,
                                   recorded_layout, recording_path)
from .decode import Trace, TraceError, decode, simulate_dump  # noqa: F401
from .encoding import (ENCODINGS, WAYS, Encoding, choose_encoding,  # noqa: F401
                       exactness_problems, value_path)
from .live import (KERNELS, LayoutMismatchWarning, dump, layout, source_line,  # noqa: F401
                   trace, trace_kind)
from .plots import element_table, format_table, holders, plot_layout, plot_mismatch  # noqa: F401
from .record import record  # noqa: F401
