"""Analysis of hpcgc results files: figures, tables, an HTML report and the network projection.

    hpcgc report RESULTS... -o OUTDIR [--baseline ALG:COMPRESSOR] [--eps 1e-8]
    hpcgc project RESULTS... [--eps 1e-8] [--network 10] [--latency-us 5]
    hpcgc breakeven RESULTS... --collectives COLL.h5 [--n-max 1024] [-o DIR]

Modules (installed with ``pip install "hpcgc[analysis]"``, so this works from any directory):

    tables      reading results files for the report, methods and panels, runs/method/projection rows, CSV/Markdown
    costmodels  α–β–γ cost models of MPICH's collectives (Thakur, Rabenseifner & Gropp 2005)
    projection  the α–β network model of a run (uses costmodels; no dependency on the report)
    report      figures, ``report.html``, the ``hpcgc report`` command (uses tables and projection)
    project     the ``hpcgc project`` command (uses tables and projection)
    breakeven   the ``hpcgc breakeven`` command: break-even bandwidth against the Allreduce a user would run;
                a package: measure (what a run measured, the target), model (T(α, β, n), break-even, α),
                report (the table, the spread), check (the model against measured runs), figures, cli
    baselines   which uncompressed-equivalent Allreduce (fp16, bf16, fp32) is the baseline
    reducescatter  the compressed reduce-scatter's cost model
    dagc_table  the DAGC comparison table

The dependency graph is one way: costmodels ← projection ← tables ← report, project, breakeven. Results as pandas frames are
:meth:`hpcgc.results.Results.to_frame` and friends. Documented in ``docs/analysis.md``.
"""
