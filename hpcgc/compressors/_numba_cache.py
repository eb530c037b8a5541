"""Guard against stale numba caches across modules.

numba's ``cache=True`` invalidates a cached kernel only when *its own* source file changes. A
kernel in ``qsgd.py`` that calls ``wire.pack_fixed_width`` keeps the old, inlined copy after
``wire.py`` is edited — silently running stale code. At import, this module hashes the sources of
the package and, when the hash differs from the one recorded next to the cache, deletes the
package's cached kernels (``__pycache__/*.nbi``, ``*.nbc``) so that everything recompiles once.

Only the default cache location (``__pycache__`` beside the sources) is handled; with
``NUMBA_CACHE_DIR`` set, clear that directory by hand after editing kernels. Errors (read-only
installs, concurrent ranks deleting the same files) are ignored: the worst case is a recompile.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

_STAMP = "hpcgc-kernel-sources.sha1"


def invalidate_if_sources_changed() -> None:
    here = Path(__file__).resolve().parent
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    h = hashlib.sha1()
    try:
        for src in sorted(here.glob("*.py")):
            h.update(src.name.encode())
            h.update(src.read_bytes())
    except OSError:
        return
    digest = h.hexdigest()
    cache = here / "__pycache__"
    stamp = cache / _STAMP
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    try:
        for f in list(cache.glob("*.nbi")) + list(cache.glob("*.nbc")):
            try:
                f.unlink()
            except OSError:
                pass
        cache.mkdir(exist_ok=True)
        tmp = cache / f"{_STAMP}.{os.getpid()}"
        tmp.write_text(digest)
        tmp.replace(stamp)
    except OSError:
        pass
