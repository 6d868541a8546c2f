"""Attention, as every attention chapter (05, 08, 09, 10) checks and times it: a core package, which
imports no topic.

* :mod:`.constants`: element types, the FA-2 head dimensions, size limits, ``LOG2E``.
* :mod:`.checks`: the kernels' argument checks (:func:`check_qkv`, :func:`check_scale`,
  :func:`require_fa2_gpu`, :func:`check_fa2_arguments`) and their poisoned output
  (:func:`fa2_output`).
* :mod:`.inputs`: :func:`random_qkv` (random or peaky, of the kernel's dtype, with the exact
  values) and :func:`as_float` (an output as float64).
* :mod:`.reference`: :func:`attention_reference`, float64 softmax(Q K^T * scale) V.
* :mod:`.problems`: :func:`attention_problem`, a kernel as a :class:`fraglab.problem.Problem`
  (inputs, reference, tolerances :data:`TOL`, labels, run plumbing), and :func:`check_all`.
* :mod:`.torch_sdpa`: PyTorch's SDPA by backend (flash, cuDNN, memory-efficient) and DLPack
  views between torch and CuPy.
* :mod:`.baselines`: :class:`Baselines`, SDPA and the course's earlier kernels on one stream
  beside a chapter's kernels, and :func:`attention_flops`.

    from fraglab import attention
    P = attention.attention_problem("NN_topic/mine", "softmax(Q K^T * scale) V, my kernel",
                                    my_attention, cases)      # my_attention(q, k, v, *, causal, scale)
    P.check(P.cases[0], rng)
"""
from .baselines import COURSE_KERNELS, Baselines, attention_flops, course_launcher  # noqa: F401
from .checks import (check_fa2_arguments, check_qkv, check_scale, fa2_output,  # noqa: F401
                     require_fa2_gpu)
from .constants import DTYPES, FA2_HEAD_DIMS, LOG2E, MAX_BH, MAX_N  # noqa: F401
from .inputs import as_float, random_qkv  # noqa: F401
from .problems import LABELS, TOL, attention_problem, check_all, requires_fa2  # noqa: F401
from .reference import attention_reference, softmax_scale  # noqa: F401
