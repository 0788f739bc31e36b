"""Process memory figures shared by the pipeline's workers and the trainer's ranks."""

import resource


def peak_rss_bytes() -> int:
    """Peak resident set size of this process: ``VmHWM``, the high-water mark of its own
    address space. (``ru_maxrss`` is kept across exec, so a worker spawned by a large parent
    would report the parent's peak.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
