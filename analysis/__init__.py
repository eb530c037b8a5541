"""Analysis of hpcgc results files: figures, tables and the network projection.

    python -m analysis.report RESULTS... -o OUTDIR [--baseline ALG:COMPRESSOR] [--eps 1e-8]
    python -m analysis.project RESULTS... [--eps 1e-8] [--network 10] [--latency-us 5]

``RESULTS`` are results files (``.h5``, also unfinished ``.h5.partial``) and/or directories of them
(e.g. the ``task-<id>.h5`` files of a SLURM job array). Everything is read through
:func:`hpcgc.results.load`. Documented in ``docs/analysis.md`` and ``docs/projection.md``.
"""
