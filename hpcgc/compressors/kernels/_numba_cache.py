"""Guard against stale numba caches across modules, and against compile storms under MPI.

numba's ``cache=True`` invalidates a cached kernel only when *its own* source file changes. A
kernel in ``qsgd.py`` that calls ``wire.pack_fixed_width`` keeps the old, inlined copy after
``wire.py`` is edited — silently running stale code. At import, this module hashes the sources of
the package (``hpcgc/compressors`` and its ``kernels/``) and, when the hash differs from the one
recorded in ``hpcgc/compressors/__pycache__``, deletes the package's cached kernels (every
``__pycache__/*.nbi``, ``*.nbc`` under it) so that everything recompiles once.

Many ranks starting at once after such a change would each compile every kernel they use (a
"recompilation storm": 8 ranks on 2 cores took 60 s each instead of 5 s). So the rebuild is done
by one process under an exclusive ``flock`` on ``__pycache__/hpcgc-kernel-cache.lock``: it
deletes the stale files and, when the process is one of several MPI ranks (``PMI_SIZE``,
``OMPI_COMM_WORLD_SIZE``, ``PMIX_SIZE`` or ``SLURM_NTASKS`` > 1), compiles the catalogue's kernels
on small inputs (the package's ``_warm_up``) before it records the new hash and releases the lock.
The other ranks wait on the lock and then load the cached kernels. A single process keeps the lazy
behaviour (it compiles only what it uses), and so does a ``python -m hpcgc.bench`` run, which sets
``HPCGC_KERNEL_WARMUP=run``: it compiles only its own compressors' kernels, one rank first
(``hpcgc.run.experiment.warm_jit``), instead of the whole catalogue. numba writes cache files atomically (temporary file +
rename), so concurrent readers never see a partial file.

Only the default cache location (``__pycache__`` beside the sources) is handled; with
``NUMBA_CACHE_DIR`` set, clear that directory by hand after editing kernels. Errors (read-only
installs, file systems without ``flock``, concurrent ranks deleting the same files) are ignored:
the worst case is a recompile.
"""
from __future__ import annotations

import hashlib
import os
import sys
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path

_STAMP = "hpcgc-kernel-sources.sha1"
_LOCK = "hpcgc-kernel-cache.lock"
_WARMUP_VAR = "HPCGC_KERNEL_WARMUP"
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS")

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None


def _here() -> Path:
    """The guarded package: ``hpcgc/compressors`` (this file is in its ``kernels/``)."""
    return Path(__file__).resolve().parent.parent


def _sources(here: Path) -> list[Path]:
    """Every source file of the package, its subpackages included, in a fixed order."""
    return sorted(here.rglob("*.py"), key=lambda p: p.relative_to(here).as_posix())


def _cached_kernels(here: Path) -> list[Path]:
    """numba's index and data files in every ``__pycache__`` of the package."""
    return [f for cache in here.rglob("__pycache__") for f in (*cache.glob("*.nbi"), *cache.glob("*.nbc"))]


def _digest(here: Path) -> str | None:
    h = hashlib.sha1()
    try:
        for src in _sources(here):
            h.update(src.relative_to(here).as_posix().encode())
            h.update(src.read_bytes())
    except OSError:
        return None
    return h.hexdigest()


def _stamp_ok(cache: Path, digest: str) -> bool:
    try:
        return (cache / _STAMP).read_text() == digest
    except OSError:
        return False


def _several_ranks() -> bool:
    for var in _SIZE_VARS:
        v = os.environ.get(var, "")
        if v.isdigit() and int(v) > 1:
            return True
    return False


class Rebuild:
    """Held by the process that rebuilds the cache: :meth:`finish` records the hash, unlocks."""

    def __init__(self, cache: Path, digest: str, fd: int | None, warm: bool):
        self.cache, self.digest, self.fd, self.warm = cache, digest, fd, warm

    def finish(self, warm_up=None) -> None:
        try:
            if self.warm and warm_up is not None:
                try:
                    warm_up()
                except Exception:  # noqa: BLE001 - a failed warm-up only costs lazy compiles later
                    pass
            try:
                tmp = self.cache / f"{_STAMP}.{os.getpid()}"
                tmp.write_text(self.digest)
                tmp.replace(self.cache / _STAMP)
            except OSError:
                pass
        finally:
            if self.fd is not None:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)
                    os.close(self.fd)
                except OSError:
                    pass


def begin_invalidation() -> Rebuild | None:
    """Check the sources' hash; if the cache is stale, either become the rebuilder (returns a
    :class:`Rebuild`, stale kernels already deleted: call ``finish`` once the kernel modules are
    imported) or wait for the rank that is rebuilding (returns None)."""
    here = _here()
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    digest = _digest(here)
    if digest is None:
        return None
    cache = here / "__pycache__"
    if _stamp_ok(cache, digest):
        return None
    fd = None
    try:
        cache.mkdir(exist_ok=True)
        if fcntl is not None:
            fd = os.open(cache / _LOCK, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fcntl.flock(fd, fcntl.LOCK_SH)      # another process is rebuilding: wait for it
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                return None
            if _stamp_ok(cache, digest):            # rebuilt while we were starting
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                return None
        for f in _cached_kernels(here):
            try:
                f.unlink()
            except OSError:
                pass
    except OSError:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
            fd = None
    return Rebuild(cache, digest, fd, warm=_several_ranks() and os.environ.get(_WARMUP_VAR, "") != "run")


def init_target() -> None:
    """Initialise numba's CPU target — what numba does on a process's first kernel call, cached or
    not — without its BLAS probe importing scipy.linalg.

    On first use numba loads its typing and lowering registries
    (``numba.core.cpu.CPUContext.load_additional_registries``), among them ``numba.np.arraymath``,
    whose import calls ``numba.np.linalg.ensure_blas()`` only to set ``arraymath._HAVE_BLAS``
    (whether ``np.correlate``/``np.convolve`` of floats may use BLAS ``dot``; no hpcgc kernel uses
    them). That probe imports ``scipy.linalg``: about a third of numba's first-use cost, paid by
    every MPI rank (``docs/performance.md``, start-up). Here the probe fails at once (``scipy.linalg``
    is ``None`` in ``sys.modules`` while the registries load, so its import raises ImportError,
    which numba catches) and the flag is then set to what the probe finds when scipy is installed.
    Kernels that call BLAS are unaffected: numba's ``np.dot`` lowering runs ``ensure_blas()``
    itself, which imports ``scipy.linalg.cython_blas`` when such a kernel is compiled or loaded.
    A no-op once numba's target is initialised, or when scipy.linalg is already imported (the probe
    is then free).
    """
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    from numba.core.registry import cpu_target
    sys.modules["scipy.linalg"] = None
    try:
        cpu_target.target_context.refresh()
    finally:
        if sys.modules.get("scipy.linalg", 0) is None:
            del sys.modules["scipy.linalg"]
    from numba.np import arraymath
    arraymath._HAVE_BLAS = find_spec("scipy") is not None


class WouldCompile(RuntimeError):
    """Raised inside :func:`cache_only` when a kernel is not in numba's cache."""


@contextmanager
def cache_only():
    """Within this block numba may load kernels from its on-disk cache but not compile one: a
    cache miss raises :class:`WouldCompile` before any compilation starts (a listener on numba's
    ``numba:compile`` event, which numba triggers only on a miss). Lets every MPI rank load its
    kernels at once when the cache is complete, and fall back to one compiling rank when it is not
    (``hpcgc.run.experiment.warm_jit``).

    Cache loads skip numba's target refresh from here on (:func:`light_loads`)."""
    from numba.core import event

    class _Refuse(event.Listener):
        def on_start(self, ev):
            raise WouldCompile(f"{ev.data.get('dispatcher', 'a kernel')} is not in numba's cache")

        def on_end(self, ev):
            pass

    light_loads()
    listener = _Refuse()
    event.register("numba:compile", listener)
    try:
        yield
    finally:
        event.unregister("numba:compile", listener)


def light_loads() -> None:
    """From now on in this process, numba loads a cached kernel without refreshing its target.

    numba's ``Cache.load_overload`` calls ``target_context.refresh()`` first, which imports and
    installs every typing and lowering registry (``numba.np.arraymath``, ``numba.typed``,
    ``numba.np.random``, … ≈ 0.15 CPU-s per process, measured; ``docs/performance.md``, start-up) —
    what *compiling* needs, not relinking a cached object file, which needs only numba's runtime
    (NRT) symbols: ``rtsys.initialize``, the first step of that refresh, is all a load does here.
    A compile (a cache miss) is unaffected: numba's compiler refreshes the contexts itself
    (``CompilerBase.__init__``). Idempotent; called by :func:`cache_only`, so it holds for the rest
    of a run too (a kernel first met after the warm-up loads as lightly)."""
    from numba.core import caching
    from numba.core.runtime import rtsys

    if getattr(caching.Cache.load_overload, "_hpcgc_light", False):
        return
    if not (hasattr(caching.Cache, "_load_overload") and hasattr(caching.Cache, "_guard_against_spurious_io_errors")):
        return                       # another numba than the one this was written against: its own loads stay

    def load_overload(cache, sig, target_context):
        rtsys.initialize(target_context)
        with cache._guard_against_spurious_io_errors():
            return cache._load_overload(sig, target_context)

    load_overload._hpcgc_light = True
    caching.Cache.load_overload = load_overload
