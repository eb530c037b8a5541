"""User-facing entry scripts of the analysis; the library is :mod:`hpcgc.analysis` (installed with
``pip install "hpcgc[analysis]"``). These keep the documented commands working from the repository
root, and ``analysis/example_frames.py`` is a worked example from a results directory to a figure:

    python -m analysis.report RESULTS... -o OUTDIR      # = hpcgc report
    python -m analysis.project RESULTS...                # = hpcgc project
    python -m analysis.dagc_table RESULTS...             # the DAGC comparison table
    python analysis/example_frames.py RESULTS -o fig.png # pandas frames → a matplotlib figure
"""
