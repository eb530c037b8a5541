"""EF + top-k compress phase split into its parts, code AFTER branch efcompress: PYTHONPATH=<checkout> python efcompress-parts-after.py [--evict] [--asc] (--asc: the ascending select_at_least instead of select_desc)."""
import sys, time, math
import numpy as np
from hpcgc.compressors import make
from hpcgc.compressors import topk as T
from hpcgc.compressors.kernels.sparse import float_bits, scratch, cast_finite, scatter_scaled, select_at_least, SELECT_UNROLL
from hpcgc.compressors.kernels.topk_select import sample_bounds, select_desc
evict = "--evict" in sys.argv
desc = "--asc" not in sys.argv
rep = 40; d, k = 2**20, 16384
rng = np.random.default_rng(0); e0 = rng.standard_normal(d); e = e0.copy()
comp = make("topk:k=16384"); big = np.ones(8 << 20); parts = {}
def tick(name, t):
    parts.setdefault(name, []).append(time.perf_counter() - t); return time.perf_counter()
for it in range(rep + 1):
    e[:] = e0
    if evict: big.sum()
    t = t0 = time.perf_counter()
    keys, mask, inf_bits = float_bits(e)
    m = 8192; lines = m // 8; step = d // lines; off = (step // 2) & -8; qm = k * m / d
    r = math.ceil(qm + 4.0 * math.sqrt(qm) + 4.0); r_hi = math.floor(qm - 4.0 * math.sqrt(qm) - 4.0)
    lo, hi = sample_bounds(keys, mask, lines, step, off, 8, r, r_hi, 64, scratch("topk-sample", 2 * m, np.int64))
    t = tick("sample_bounds", t)
    cap = int(1.25 * d * r / m) + 4096
    if desc:
        size = cap + 64 + SELECT_UNROLL + 1
        sidx = scratch("select-idx", size, np.int64); sbits = scratch("select-bits", size, keys.dtype)
        first, status = select_desc(keys, mask, keys.dtype.type(lo), inf_bits, sidx, sbits)
        cidx, cbits = sidx[first:], sbits[first:]
    else:
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
    wire_vals = payload[voff:voff + vbytes].view("<f4"); cast_finite(vals, wire_vals)
    t = tick("values cast", t)
    scatter_scaled(wire_vals, idx, -1.0, e, True)
    t = tick("own update", t)
    parts.setdefault("TOTAL", []).append(t - t0)
for name, v in parts.items():
    v = np.array(v[1:]) * 1e6
    print(f"{name:20s} median {np.median(v):8.1f} us  min {v.min():8.1f}")
