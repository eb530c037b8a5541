"""``hpcgc breakeven``: below which bandwidth does a method beat the Allreduce a user would run?

For every method of an experiment (algorithm × compressor × collective) the time to reach the
experiment's target on a network of latency α and inverse bandwidth β, with ``n`` processes, is

    T(α, β, n) = K · ( c(n) + a(n)·α + b(n)·β + g(n)·γ )

- K: the iterations the run needed to reach the target (mean over seeds; assumed independent of n);
- c(n): everything of an iteration that is not a transfer, measured on rank 0's timeline (the
  root under ``gather``; any rank is on the critical path of a symmetric collective) as means over
  the iterations after the first (the first carries one-time costs: connections made at first
  contact, first touch of buffers; reported apart): its compute — grad + compress, plus the server
  phase (decode, aggregate, step: at the root under ``gather``, on every rank otherwise), scaled by
  n / n_run under ``gather`` and ``allgather`` (it decodes one message per worker) and constant under
  ``allreduce`` — its idle time before the collectives (``wait_up`` + ``wait_down``: waiting for the
  slowest rank, and for the server step) and hpcgc's bookkeeping (``other``); both assumed
  independent of the bandwidth and of n;
- a, b, g: the coefficients of the collectives the run issues per iteration, with the run's message
  sizes (bytes each worker handed to MPI, from the transport's ledger), in MPICH's algorithms
  (:mod:`hpcgc.analysis.costmodels`, Thakur, Rabenseifner & Gropp 2005):

  ``gather``    MPI_Gather of the 4-byte lengths + MPI_Gatherv of (n − 1) payloads into the root,
                then MPI_Bcast of the iterate (a compressed downlink: an 8-byte header + the payload)
  ``allreduce`` ``exchange_rounds`` MPI_Allreduce calls of the worker's vectors (PowerSGD: 2)
  ``allgather`` MPI_Allgather of the lengths + MPI_Allgatherv of the payloads (``run.overlap``: one
                MPI_Iallgather of a fixed-size slot per bucket, priced as that pair of the slot's payload
                part — one 4-byte Allgather per bucket more than it issues)
  ``reduce-scatter`` MPI_Alltoall of the segment lengths + MPI_Alltoallv of the compressed segments,
                MPI_Allgather of the lengths + MPI_Allgatherv of the re-compressed reduced segments
                (:mod:`hpcgc.analysis.reducescatter`).

The baseline b is the fastest uncompressed-equivalent Allreduce among fp16, bf16 and float32 that
reaches the target (:mod:`hpcgc.analysis.baselines`; a 16-bit one modelled from the float32 run when
there is no fp16/bf16 run, labelled so), the float32 one a second line. T is affine in β for fixed
n, so a method m beats the baseline b where ΔP + ΔQ·β < 0, with P = K(c + aα + gγ), Q = K·b: the
**break-even bandwidth** 1/β* with β* = ΔP / (−ΔQ) is exact, not read off a grid
(:func:`break_even`). α comes from a ``bench collectives`` file (each collective's fitted latency
divided by its model's latency coefficient at the file's rank count; the median over collectives)
or ``--latency-us``. A run with ``run.overlap`` (its attributes ``overlap_buckets``,
``overlap_window_seconds`` = H) pays only the exchange time beyond its backward pass,
T = K·(c + max(0, aα + bβ + gγ − H)): piecewise affine in β, its break-even solved exactly on each
piece (:func:`overlapped_break_even`). Documented in ``docs/breakeven.md``; the formulas in
``docs/cost-models.md``.

Modules: ``measure`` (what a run measured, the target), ``model`` (T(α, β, n), break-even, α),
``report`` (the table, the spread), ``check`` (the model against measured runs), ``figures``,
``cli`` (``hpcgc breakeven``). The names below are re-exported: ``from hpcgc.analysis import
breakeven as be; be.break_even(...)``.
"""
from __future__ import annotations

from .check import (
    CHECK_COLUMNS,
    CHECK_MD_COLUMNS,
    CHECK_TOLERANCE,
    LOCAL_SPAN,
    LocalFit,
    _ratio,
    _relative_line,
    _window,
    check,
    check_markdown,
    local_fit,
    message_seconds_local,
    op_alpha_beta,
    predicted_run_time,
    predicted_run_time_local,
    predicted_run_time_table,
    table_seconds,
)
from .cli import build_parser, main
from .figures import _slug, band, figures
from .measure import (
    ACCURACY_GAP,
    BITS,
    COMPUTE_PHASES,
    HEADER_BYTES,
    N_LARGE,
    N_REFERENCE,
    PHASES,
    BreakEvenError,
    Target,
    accuracy_target,
    beta_to_gbps,
    common_target,
    gbps_to_beta,
    measured_run_time,
    measured_time,
    rank0_means,
    run_metric,
    run_target_series,
    target_series,
)
from .model import (
    BreakEven,
    Latency,
    MethodModel,
    _add,
    _label,
    break_even,
    exchange_coefficients,
    exchange_parts,
    is_baseline,
    iteration_messages,
    latency_from_collectives,
    measure_run,
    method_break_even,
    method_models,
    op_coefficients,
    overlapped_break_even,
)
from .report import (
    COLUMNS,
    MD_COLUMNS,
    N_COLUMNS,
    SPREAD_COLUMNS,
    SPREAD_MD_COLUMNS,
    Corners,
    Report,
    bandwidth_sweep,
    break_even_interval,
    build,
    corners,
    markdown,
    measurably_faster,
    panel_rows,
    spread_markdown,
    spread_row,
)

__all__ = [
    'ACCURACY_GAP',
    'BITS',
    'CHECK_COLUMNS',
    'CHECK_MD_COLUMNS',
    'CHECK_TOLERANCE',
    'COLUMNS',
    'COMPUTE_PHASES',
    'HEADER_BYTES',
    'LOCAL_SPAN',
    'MD_COLUMNS',
    'N_COLUMNS',
    'N_LARGE',
    'N_REFERENCE',
    'PHASES',
    'SPREAD_COLUMNS',
    'SPREAD_MD_COLUMNS',
    'BreakEven',
    'BreakEvenError',
    'Corners',
    'Latency',
    'LocalFit',
    'MethodModel',
    'Report',
    'Target',
    '_add',
    '_label',
    '_ratio',
    '_relative_line',
    '_slug',
    '_window',
    'accuracy_target',
    'band',
    'bandwidth_sweep',
    'beta_to_gbps',
    'break_even',
    'break_even_interval',
    'build',
    'build_parser',
    'check',
    'check_markdown',
    'common_target',
    'corners',
    'exchange_coefficients',
    'exchange_parts',
    'figures',
    'gbps_to_beta',
    'is_baseline',
    'iteration_messages',
    'latency_from_collectives',
    'local_fit',
    'main',
    'markdown',
    'measurably_faster',
    'measure_run',
    'measured_run_time',
    'measured_time',
    'message_seconds_local',
    'method_break_even',
    'method_models',
    'op_alpha_beta',
    'op_coefficients',
    'overlapped_break_even',
    'panel_rows',
    'predicted_run_time',
    'predicted_run_time_local',
    'predicted_run_time_table',
    'rank0_means',
    'run_metric',
    'run_target_series',
    'spread_markdown',
    'spread_row',
    'table_seconds',
    'target_series',
]
