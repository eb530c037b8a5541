"""The machine's state around a measurement: CPU model and frequency, load, other processes' CPU use.

A benchmark run on a busy machine measures the machine, not the method. :func:`snapshot` reads
what Linux tells without privileges — ``/proc/cpuinfo`` (model, ``cpu MHz``), ``/proc/loadavg``
(1/5/15-minute load, runnable tasks now), ``/proc/stat`` (busy and total jiffies since boot) and
``/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq`` when the kernel exposes cpufreq (virtual
machines often do not) — and says in ``missing`` what it could not read. :func:`noise` compares two
snapshots with the CPU time this job's own ranks spent between them: the rest of the machine's busy
time is the other processes' share. :func:`busy_warnings` decides, from those numbers alone, whether
the machine was busy (pyperf's ``WARNING: ...`` lines; Stinner, pyperf ``system tune``/``check``):

* others competed with us: the other processes used at least a quarter of a core on average while
  the run ran (measured, or, without ``/proc/stat``, the load average minus our ranks) **and**
  they plus our ranks on this host wanted more cores than there are;
* we competed with ourselves: more of our ranks on this host than cores (oversubscribed).

No MPI here: the caller sums its ranks' CPU times through the transport (``hpcgc.transport``), and
:func:`crowding` counts our ranks per host through it (``run.wait = "auto"``: :func:`wait_mode`).
``snapshot()`` is public: ``docs/data/`` files record it too.
"""
from __future__ import annotations

import glob
import os
import platform
import time

OTHERS_MIN_CORES = 0.25
"""Other processes below this many cores on average are not called busy (daemons, the shell)."""


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def machine_id() -> str:
    """What identifies the machine (kernel) a rank runs on: the kernel's boot id, else MPI's processor
    name. Not the host name: the nodes of an emulated cluster (``docs/emulated-cluster.md``) see host
    names of their own but share this machine's cores and memory."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    if boot and boot.strip():
        return boot.strip()
    from .transport import processor_name
    return processor_name()


def cores() -> int:
    """CPUs this process may run on (its affinity mask; else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_ids() -> frozenset:
    """The CPUs this process may run on (its affinity mask; else all of the machine's)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


def crowding(transport) -> tuple[int, int]:
    """The job's most crowded host (the most ranks per CPU): (our ranks on it, the CPUs they may run
    on — the union of their affinity masks, so ranks pinned to distinct cores are not crowded and
    ranks pinned to one core are). Hosts are :func:`machine_id`'s (an emulated cluster's nodes share
    one kernel, and its cores). Collective (one gather and one broadcast through the transport, the
    first time; then cached on it); the same value on every rank."""
    got = getattr(transport, "_crowding", None)
    if got is None:
        rows = transport.gather_object((machine_id(), sorted(cpu_ids())))
        if transport.is_root:
            hosts: dict = {}
            for host, cpus in rows:
                n, union = hosts.get(host, (0, set()))
                hosts[host] = (n + 1, union | set(cpus))
            got = max(((n, len(union)) for n, union in hosts.values()), key=lambda h: h[0] / max(h[1], 1))
        got = transport._crowding = tuple(transport.bcast_object(got))
    return got


def wait_mode(setting: str, transport) -> str:
    """``run.wait`` resolved: ``"spin"`` or ``"yield"``; ``"auto"`` is ``"yield"`` when the most
    crowded host (:func:`crowding`) runs more of our ranks than its CPUs, else ``"spin"``.
    Collective for ``"auto"`` (every rank of a run has the same setting)."""
    if setting != "auto":
        return setting
    ranks, cpus = crowding(transport)
    return "yield" if ranks > cpus else "spin"


def own_cpu_seconds() -> float:
    """User + system CPU seconds this process has used (``os.times``; ``/proc/self/stat``'s utime + stime)."""
    t = os.times()
    return float(t.user + t.system)


def snapshot() -> dict:
    """The machine now, as flat JSON-able values (every key always present; NaN / "" when unknown):
    ``time`` (Unix), ``host``, ``cpu_model``, ``cores``, ``cpu_mhz`` (mean of ``/proc/cpuinfo``'s
    ``cpu MHz``), ``cpufreq_mhz`` (mean of ``scaling_cur_freq``), ``load1``, ``load5``, ``load15``,
    ``runnable`` (tasks running or runnable now, ours included), ``busy_jiffies`` and ``total_jiffies``
    (``/proc/stat``'s aggregate cpu line since boot: total = every field, busy = total − idle − iowait),
    ``clock_ticks`` (jiffies per second), ``missing`` (what could not be read, comma-separated)."""
    nan = float("nan")
    missing = []
    out = {"time": time.time(), "host": platform.node(), "cpu_model": "", "cores": cores(), "cpu_mhz": nan,
           "cpufreq_mhz": nan, "load1": nan, "load5": nan, "load15": nan, "runnable": -1,
           "busy_jiffies": -1, "total_jiffies": -1, "clock_ticks": -1}
    info = _read("/proc/cpuinfo")
    if info is None:
        missing.append("/proc/cpuinfo")
        out["cpu_model"] = platform.processor()
    else:
        mhz = []
        for line in info.splitlines():
            key, _, val = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model", "cpu model") and not out["cpu_model"]:
                out["cpu_model"] = val.strip()
            elif key == "cpu MHz":
                try:
                    mhz.append(float(val))
                except ValueError:
                    pass
        if mhz:
            out["cpu_mhz"] = sum(mhz) / len(mhz)
        else:
            missing.append("cpu MHz in /proc/cpuinfo")
    freqs = []
    for p in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"):
        text = _read(p)
        if text and text.strip().isdigit():
            freqs.append(int(text) / 1e3)
    if freqs:
        out["cpufreq_mhz"] = sum(freqs) / len(freqs)
    else:
        missing.append("cpufreq (/sys/devices/system/cpu/*/cpufreq)")
    load = _read("/proc/loadavg")
    if load is None:
        missing.append("/proc/loadavg")
        try:
            out["load1"], out["load5"], out["load15"] = os.getloadavg()
        except (AttributeError, OSError):
            pass
    else:
        parts = load.split()
        out["load1"], out["load5"], out["load15"] = (float(x) for x in parts[:3])
        out["runnable"] = int(parts[3].split("/")[0])
    stat = _read("/proc/stat")
    if stat is not None and stat.startswith("cpu "):
        fields = [int(x) for x in stat.splitlines()[0].split()[1:]]
        total = sum(fields[:8])                      # user nice system idle iowait irq softirq steal
        out["total_jiffies"] = total
        out["busy_jiffies"] = total - fields[3] - (fields[4] if len(fields) > 4 else 0)
        try:
            out["clock_ticks"] = os.sysconf("SC_CLK_TCK")
        except (AttributeError, ValueError, OSError):
            pass
    else:
        missing.append("/proc/stat")
    out["missing"] = ", ".join(missing)
    return out


def noise(start: dict, end: dict, own_cpu_s: float, own_ranks: int) -> dict:
    """What happened between two snapshots on this host, ``own_cpu_s`` being the CPU seconds our
    ``own_ranks`` ranks on it spent meanwhile: ``seconds``, ``own_cpu_cores`` (our mean CPU use, in
    cores), ``other_cpu_share`` (the other processes' busy time / the machine's capacity, 0..1; NaN
    without ``/proc/stat``), ``other_cpu_cores`` (the same in cores)."""
    nan = float("nan")
    seconds = max(end["time"] - start["time"], 1e-9)
    out = {"seconds": seconds, "own_ranks": own_ranks, "own_cpu_cores": own_cpu_s / seconds,
           "other_cpu_share": nan, "other_cpu_cores": nan}
    total = end["total_jiffies"] - start["total_jiffies"]
    if start["total_jiffies"] >= 0 and end["total_jiffies"] >= 0 and total > 0 and end["clock_ticks"] > 0:
        busy = end["busy_jiffies"] - start["busy_jiffies"]
        other = max(busy - own_cpu_s * end["clock_ticks"], 0.0)
        out["other_cpu_share"] = min(other / total, 1.0)
        out["other_cpu_cores"] = out["other_cpu_share"] * end["cores"]
    return out


def busy_warnings(cores: int, own_ranks: int, load1: float, other_cpu_cores: float = float("nan")) -> list[str]:
    """The pyperf-style warnings for a measurement by ``own_ranks`` ranks on a host of ``cores``
    cores: ``other_cpu_cores`` the other processes' measured mean CPU use (NaN: unknown; then the
    load average minus our ranks stands for it). Empty: the machine was quiet enough."""
    out = []
    measured = other_cpu_cores == other_cpu_cores          # not NaN
    others = other_cpu_cores if measured else max(load1 - own_ranks, 0.0) if load1 == load1 else 0.0
    if others >= OTHERS_MIN_CORES and others + own_ranks > cores:
        how = (f"other processes used {others:.2g} core(s) on average" if measured
               else f"load average {load1:.3g} > {own_ranks} rank(s) of ours")
        out.append(f"WARNING: the machine was busy: {how} while {own_ranks} rank(s) of ours ran on {cores} "
                   f"core(s) (load average {load1:.3g}); timings are not reliable: rerun on a quiet machine")
    if own_ranks > cores:
        out.append(f"WARNING: {own_ranks} ranks on {cores} core(s): the ranks compete for the cores "
                   "(oversubscribed); timings include waiting for a core")
    return out


def file_attrs(prefix: str, snap: dict) -> dict:
    """A snapshot as results-file attributes ``<prefix>_<key>`` (``machine_start_load1``, ...)."""
    return {f"{prefix}_{k}": v for k, v in snap.items()}


def describe(snap: dict) -> str:
    """One line: ``# machine: AMD EPYC, 2 cores, 2596 MHz; load 3.1 2.0 1.2 (cpufreq not available)``."""
    mhz = snap["cpufreq_mhz"] if snap["cpufreq_mhz"] == snap["cpufreq_mhz"] else snap["cpu_mhz"]
    text = (f"# machine: {snap['cpu_model'] or 'unknown CPU'}, {snap['cores']} core(s)"
            + (f", {mhz:.0f} MHz" if mhz == mhz else "")
            + f"; load average {snap['load1']:.2f} {snap['load5']:.2f} {snap['load15']:.2f}")
    return text + (f" (not available: {snap['missing']})" if snap["missing"] else "")


class Probe:
    """Around a measurement (collective, every rank): ``Probe(transport)`` at the start,
    :meth:`finish` at the end. Rank 0 snapshots the machine at both ends; every rank's own CPU
    time in between is summed on rank 0 over the ranks on rank 0's host (one gather through the
    transport). :meth:`finish` returns the attributes to record (``machine_start_*``,
    ``machine_end_*``, ``noise_*``) and the warnings (rank 0; elsewhere empty)."""

    def __init__(self, transport=None):
        self.t = transport                 # None: this process alone (no MPI: ``hpcgc micro``)
        self.root = transport is None or transport.is_root
        self.cpu0 = own_cpu_seconds()
        self.start = snapshot() if self.root else None

    def finish(self) -> tuple[dict, list[str]]:
        mine = own_cpu_seconds() - self.cpu0
        if self.t is None:
            rows = [("", mine)]
        else:
            rows = self.t.gather_object((machine_id(), mine))
        if not self.root:
            return {}, []
        end = snapshot()
        here = [cpu for host, cpu in rows if host == rows[0][0]]
        n = noise(self.start, end, sum(here), len(here))
        attrs = {**file_attrs("machine_start", self.start), **file_attrs("machine_end", end),
                 **{f"noise_{k}": v for k, v in n.items()}}
        warnings = busy_warnings(end["cores"], len(here), max(self.start["load1"], end["load1"]),
                                 n["other_cpu_cores"])
        attrs["noise_warnings"] = "\n".join(warnings)
        return attrs, warnings
