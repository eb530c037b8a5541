"""EF + top-k compress phase split into its parts, code BEFORE branch efcompress (9309025): PYTHONPATH=<checkout> python efcompress-parts-before.py [--evict]."""
import sys, time, math
import numpy as np
from hpcgc.compressors import make
from hpcgc.compressors import topk as T
from hpcgc.compressors.kernels.sparse import float_bits, select_at_least, scratch, cast_finite, scatter_scaled

evict = "--evict" in sys.argv
rep = 40
d, k = 2**20, 16384
rng = np.random.default_rng(0)
e0 = rng.standard_normal(d)
e = e0.copy()
comp = make("topk:k=16384")
codec = comp.prepared(d)
big = np.ones(8 << 20)
parts = {}
def tick(name, t):
    parts.setdefault(name, []).append(time.perf_counter() - t)
    return time.perf_counter()
for it in range(rep + 1):
    e[:] = e0
    if evict:
        big.sum()
    t = t0 = time.perf_counter()
    x = e
    keys, mask, inf_bits = float_bits(x)
    m = min(T._SAMPLE, d // 16); lines = m // T._RUN; step = d // lines; off = (step // 2) & -T._RUN
    sample = (keys[:lines * step].reshape(lines, step)[:, off:off + T._RUN] & mask).ravel()
    t = tick("sample gather", t)
    m = lines * T._RUN; qm = k * m / d
    r = math.ceil(qm + 4.0 * math.sqrt(qm) + 4.0); r_hi = math.floor(qm - 4.0 * math.sqrt(qm) - 4.0)
    part = np.partition(sample, [m - r, m - max(r_hi, 1)])
    lo = int(part[m - r]); hi = int(part[m - r_hi])
    t = tick("partition", t)
    cap = int(1.25 * d * r / m) + 4096
    cidx, cbits, status = select_at_least(keys, mask, keys.dtype.type(lo), inf_bits, cap, grow=False)
    t = tick("select pass", t)
    Tt, above = T.rank_among_candidates(cbits, mask, k, lo, hi, 64, scratch("topk-band", cidx.shape[0], np.int64))
    t = tick("rank", t)
    idx = scratch("topk-idx", k + 1, np.int64); bits = scratch("topk-bits", k + 1, keys.dtype)
    T.take_top(cidx, cbits, mask, Tt, k - above, idx, bits)
    t = tick("take_top", t)
    idx = idx[:k]; vals = bits[:k].view(np.float64)
    payload, voff, vbytes = comp._new_sparse_payload(idx, d)
    t = tick("payload+index enc", t)
    wire_vals = payload[voff:voff + vbytes].view("<f4")
    cast_finite(vals, wire_vals)
    t = tick("values cast", t)
    scatter_scaled(wire_vals, idx, -1.0, e, True)
    t = tick("own update", t)
    parts.setdefault("TOTAL", []).append(t - t0)
# whole phase via codec
for name, v in parts.items():
    v = np.array(v[1:]) * 1e6
    print(f"{name:20s} median {np.median(v):8.1f} us  min {v.min():8.1f}")
