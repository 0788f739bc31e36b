"""Process memory figures shared by the pipeline's workers and the trainer's ranks."""

import resource


def status_counters(pid: int | str = "self") -> dict[str, int] | None:
    """The kB counters of ``/proc/PID/status`` (``VmHWM``, ``RssAnon``, ...) in bytes: the
    kernel's running figures, O(1) to read (``smaps_rollup`` walks every page table). None
    where the process is gone or there is no /proc."""
    fields = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    fields[parts[0].rstrip(":")] = int(parts[1]) << 10
    except OSError:
        return None
    return fields


def anon_bytes() -> int:
    """This process's resident anonymous memory (``RssAnon``: heap and arrays, not mapped
    files), 0 where /proc does not say."""
    return (status_counters() or {}).get("RssAnon", 0)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process: ``VmHWM``, the high-water mark of its own
    address space. (``ru_maxrss`` is kept across exec, so a worker spawned by a large parent
    would report the parent's peak.)"""
    hwm = (status_counters() or {}).get("VmHWM")
    if hwm is not None:
        return hwm
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
