"""Sampling profiles of a benchmark's server processes with py-spy (``pip install -e '.[profile]'``).

``Spy`` attaches ``py-spy record --format raw`` to running processes for a while; ``summarize`` reads
the collapsed stacks it wrote (one line per distinct stack: ``frame;frame;... count``) into the two
tables docs/performance.md quotes: where the samples were when taken (own time, per function) and
which functions they were under (inclusive time). py-spy leaves out samples of a thread that is idle
(the event loop waiting in ``epoll``), so the samples taken against those due (rate x seconds) say how
busy the process was; the shares are of its busy samples.

``cpu_seconds`` reads a process's CPU time (user + system, every thread) from ``/proc``: the load-robust
measure of a benchmark's work (a busy machine stretches latencies, not the CPU a unit of work costs).
"""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

OURS = ("chat_server/", "rcm/", "ordering/", "contracts/")
ENTRY = ("__main__.py", "rcm/cli.py")          # every sample is under these: no information
FRAME = re.compile(r"^(?P<func>[^ ]+) \((?P<file>[^:)]+)(?::\d+)?\)$")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux /proc), None once it is gone."""
    split = cpu_split(pid)
    return None if split is None else split[0] + split[1]


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after "pid (comm) " (the state is [0], the parent [1], utime [11],
    stime [12], cutime [13], cstime [14]), None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def cpu_split(pid: int) -> tuple[float, float] | None:
    """(user, system) CPU seconds a process has used so far (Linux /proc), None once it is gone."""
    fields = _stat(pid)
    if fields is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick     # utime, stime


def cpu_split_sum(pids: list[int]) -> tuple[float, float]:
    """(user, system) CPU seconds the processes ``pids`` have used so far together (those gone count nothing)."""
    splits = [s for s in (cpu_split(pid) for pid in pids) if s is not None]
    return sum(u for u, _ in splits), sum(k for _, k in splits)


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and every process under it now, with what the children each of
    them has waited for used (``cutime``/``cstime``): a test's JVM, servers and browsers as well as its own
    interpreter. A process that left the tree (a daemon that forked away, an orphan) is not counted."""
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields is None:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        used[pid] = sum(int(x) for x in fields[11:15]) / tick      # utime, stime, cutime, cstime
    total, stack = used.get(root, 0.0), [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            total += used[child]
            stack.append(child)
    return total


def machine_cpu() -> float:
    """CPU seconds the cores of this machine have been busy since boot (``/proc/stat``: user, nice, system,
    irq and softirq; not idle, iowait or steal, the hypervisor's), for a figure that counts what left every
    process tree too."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def write_calls(pid: int) -> int | None:
    """The write system calls a process (all its threads) has made so far (Linux /proc/<pid>/io ``syscw``:
    write and writev, which is how uvloop and ngircd write to a socket; asyncio's ``send`` is not counted),
    None once it is gone or when the kernel does not say."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("syscw:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def py_spy() -> str | None:
    """The py-spy executable beside this Python, or on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


@dataclass
class Spy:
    """``py-spy record`` on ``pids`` (name -> pid) for ``seconds``, raw stacks to ``out/<name>.txt``."""

    out: Path
    pids: dict[str, int]
    seconds: float
    rate: int = 250

    async def run(self) -> dict[str, Path]:
        exe = py_spy()
        if exe is None:
            raise RuntimeError("py-spy is not installed: .venv/bin/pip install -e '.[profile]'")
        self.out.mkdir(parents=True, exist_ok=True)
        procs, paths = [], {}
        for name, pid in self.pids.items():
            paths[name] = self.out / f"{name}.txt"
            procs.append(await asyncio.create_subprocess_exec(
                exe, "record", "--pid", str(pid), "--format", "raw", "--nonblocking", "--rate", str(self.rate),
                "--duration", str(max(1, round(self.seconds))), "--output", str(paths[name]),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL))
        for p in procs:
            await p.wait()
        return {n: p for n, p in paths.items() if p.exists()}


def _name(frame: str) -> str:
    m = FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    f = m.group("file")
    return f"{m.group('func')} ({f.rsplit('/', 1)[-1] if '/' in f else f})"


def _ours(frame: str) -> bool:
    """A frame of the suite's own code (not the loop, the library or the entry point)."""
    m = FRAME.match(frame.strip())
    f = m.group("file") if m else ""
    return f.startswith(OURS) and not f.endswith(ENTRY)


def summarize(path: Path, due: int, top: int = 15) -> dict[str, object]:
    """Own and inclusive shares of the busy samples in a py-spy raw file, the ``top`` of each (inclusive:
    the suite's own functions only); ``due``: the samples a process busy all the time would have given."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    busy = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        count = int(n)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        busy += count
        own[_name(frames[-1])] += count
        for name in {_name(f) for f in frames if _ours(f)}:
            incl[name] += count
    share = (lambda c: round(100 * c / busy, 1)) if busy else (lambda c: 0.0)
    return {"busy_samples": busy, "due_samples": due, "busy_pct": round(100 * busy / due, 1) if due else 0.0,
            "own_pct": [(n, share(c)) for n, c in own.most_common(top)],
            "inclusive_pct": [(n, share(c)) for n, c in incl.most_common(top * 2)]}


def render(name: str, s: dict[str, object]) -> str:
    """A summary as the benchmark prints it."""
    rows = [f"  {name}: busy {s['busy_pct']}% of the time ({s['busy_samples']} of {s['due_samples']} samples)"]
    rows.append("    own time:       " + "; ".join(f"{n} {p}%" for n, p in s["own_pct"][:8]))  # type: ignore[index]
    rows.append("    inclusive time: " + "; ".join(f"{n} {p}%" for n, p in s["inclusive_pct"][:12]))  # type: ignore[index]
    return "\n".join(rows)
