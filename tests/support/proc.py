"""What the kernel says of a process (/proc), for tests and benchmarks that measure one."""

from __future__ import annotations

import re
from pathlib import Path


def status_kib(pid: int, field: str) -> int:
    """A size of /proc/PID/status (``VmRSS``, the resident set; ``VmHWM``, its peak), in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB$", status, re.MULTILINE)
    if found is None:
        raise ValueError(f"/proc/{pid}/status has no {field}")
    return int(found[1])
