"""Worked example: from a results directory to a figure through pandas (``docs/analysis.md``).

    python analysis/example_frames.py results/my-experiment/ -o bits.png

f(x) − f* against the model bits each worker sent, one line per run: colour = compressor,
line style = algorithm (what ``hpcgc report`` draws, in a dozen lines you can change). Needs the
analysis extra (``pip install "hpcgc[analysis]"``: matplotlib and pandas).
"""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from hpcgc import results

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("results", help="a results file or a directory of them")
ap.add_argument("-o", "--out", default="bits.png", help="figure file (default bits.png)")
args = ap.parse_args()

df = results.load(args.results).to_frame()          # one row per run × recorded iteration
runs = df.groupby(["algorithm", "compressor", "seed"], sort=True)
colors = dict(zip(sorted(df["compressor"].unique()), ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00")))
styles = dict(zip(sorted(df["algorithm"].unique()), ("-", "--", ":", "-.")))

fig, ax = plt.subplots(figsize=(3.5, 2.8), layout="constrained")      # one journal column
for (alg, comp, seed), g in runs:
    ax.semilogy(g["bits_up_model_mean"] / 1e3, g["suboptimality"], color=colors[comp], ls=styles[alg],
                label=f"{alg} {comp}" + (f" s{seed}" if df["seed"].nunique() > 1 else ""))
ax.set_xlabel("model bits sent per worker [kbit]")
ax.set_ylabel("f(x) − f*")
ax.grid(alpha=0.3)
fig.legend(loc="outside lower center", ncol=2, fontsize=7, frameon=False)
fig.savefig(args.out, dpi=200)
print(f"wrote {args.out}")
