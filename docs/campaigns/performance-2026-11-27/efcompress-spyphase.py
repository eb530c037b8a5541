"""Samples of py-spy raw stacks that pass through a phase function, by their deepest hpcgc frame and by their leaf."""
import sys, collections, re
path, key = sys.argv[1], sys.argv[2]
by_py, by_leaf, tot = collections.Counter(), collections.Counter(), 0
for line in open(path):
    stack, _, n = line.rstrip().rpartition(" ")
    if key not in stack or "run/loop.py" not in stack:
        continue
    n = int(n); tot += n
    frames = stack.split(";")
    hp = [f for f in frames if "hpcgc/" in f]
    by_py[re.sub(r":\d+\)", ")", hp[-1]) if hp else "?"] += n
    by_leaf[frames[-1][:90]] += n
print(f"{path}: {tot} samples through {key}")
print(" by deepest hpcgc frame:")
for f, n in by_py.most_common(14): print(f"  {n:6d} {100*n/tot:5.1f} %  {f}")
print(" by leaf:")
for f, n in by_leaf.most_common(10): print(f"  {n:6d} {100*n/tot:5.1f} %  {f}")
