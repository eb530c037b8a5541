"""The break-even report's local α–β fit (hpcgc.analysis.breakeven.local_fit) on constructed
collectives files: where the sizes near a message are latency-bound and their times fall with the
size (noise), the line through them has β_c < 0; the fit widens to the neighbouring sizes until
α_c, β_c > 0, or falls back to the global α, β, and says so — it never prices a message with a
non-physical line."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from hpcgc import results
from hpcgc.analysis import breakeven as be

SIZES = 2.0 ** np.arange(2, 21)           # 4 B … 1 MiB per rank


def _table(kind, avg):
    avg = np.asarray(avg, dtype=float)
    a, b = np.polyfit(SIZES, avg, 1)
    return results.CollectiveTable(kind=kind, size=SIZES.copy(), avg=avg, min=avg * 0.9, max=avg * 1.1,
                                   iterations=np.full(SIZES.size, 100), alpha=float(a), beta=float(b),
                                   fit_error=0.1, fit_error_median=0.05, fit_method="constructed")


def _file(tmp_path, tables):
    path = tmp_path / "coll.h5"
    results.write_collectives(path, {"world_size": 4, "mpi_library_version": "constructed"}, tables)
    return be.latency_from_collectives(path)


def _noisy_allreduce():
    """20 µs + 1 ns/B, but 64 … 512 B measured 30 → 24 µs (falling: a noisy latency-bound regime)."""
    avg = 20e-6 + 1e-9 * SIZES
    avg[(SIZES >= 64) & (SIZES <= 512)] = [30e-6, 28e-6, 26e-6, 24e-6]
    return _table("allreduce", avg)


def test_negative_local_beta_widens_to_the_neighbouring_sizes(tmp_path):
    lat = _file(tmp_path, [_noisy_allreduce(), _table("bcast", 10e-6 + 0.5e-9 * SIZES)])
    size, avg = lat.measured["allreduce"]
    sel = be._window(size, 192.0, be.LOCAL_SPAN)
    assert list(size[sel]) == [64, 128, 256, 512]
    assert be._relative_line(size, avg, sel)[1] < 0                  # what the old fit returned
    fit = be.local_fit(lat, "allreduce", 192.0)
    assert fit.ok and fit.alpha_c > 0 and fit.beta_c > 0
    assert fit.lo < 64 and fit.hi > 512
    assert "not > 0" in fit.note and "widened to" in fit.note
    text = fit.text("allreduce", 192.0)
    used, said = text.split(" (", 1)
    assert "-" not in used
    assert text == ("allreduce 192 B: α_c 21.9 µs, β_c 0.663 ns/B (the fit over 64 B…512 B gave α_c 29.9 µs, "
                    "β_c -12.1 ns/B, not > 0; widened to 4 B…8 KiB)")          # as docs/breakeven.md quotes it
    doc = " ".join((Path(__file__).resolve().parents[1] / "docs" / "breakeven.md").read_text().split())
    assert " ".join(text.split()) in doc
    assert be.message_seconds_local(lat, "allreduce", 192.0, 4) > 0
    big = be.local_fit(lat, "allreduce", 2.0 ** 18)          # a sane window: the local line, no note
    assert big.ok and big.note == "" and math.isclose(big.beta_c, 1e-9, rel_tol=1e-6)


def test_no_physical_line_anywhere_falls_back_to_the_global_alpha_beta(tmp_path):
    falling = _table("allreduce", 40e-6 - 1e-12 * SIZES)            # β < 0 at every span
    lat = _file(tmp_path, [falling, _table("bcast", 10e-6 + 0.5e-9 * SIZES)])
    fit = be.local_fit(lat, "allreduce", 192.0)
    assert not fit.ok and "global α, β" in fit.note and "global α, β" in fit.text("allreduce", 192.0)
    t = be.message_seconds_local(lat, "allreduce", 192.0, 4)
    alpha, beta = be.op_alpha_beta(lat, "allreduce")
    a, b, _ = (float(v) for v in be.op_coefficients("allreduce", 192.0, 4))
    assert alpha > 0 and beta > 0 and t == pytest.approx(a * alpha + b * beta) and t > 0


@pytest.mark.parametrize("nbytes", [4.0, 24.0, 192.0, 3000.0, 65536.0, 1e6])
def test_local_fit_is_never_non_physical(tmp_path, nbytes):
    rng = np.random.default_rng(7)
    noisy = (20e-6 + 1e-9 * SIZES) * rng.uniform(0.6, 1.4, SIZES.size)
    lat = _file(tmp_path, [_table("allreduce", noisy), _table("bcast", 10e-6 + 0.5e-9 * SIZES)])
    fit = be.local_fit(lat, "allreduce", nbytes)
    assert (fit.alpha_c > 0 and fit.beta_c > 0) or (not fit.ok and fit.note)
    assert be.message_seconds_local(lat, "allreduce", nbytes, 4) > 0
