"""Process settings that make CPU training fast on a small shared machine.

Measured on the 2-core project machine (docs/training.md): glibc returns every freed
block above 32 MB (and, by its dynamic threshold, most freed large blocks) to the kernel,
so each training step page-faults all of its big activations afresh; keeping them in
the heap made forward+backward 1.5-2x faster.  OpenMP threads that spin-wait (libgomp's
default) collapse when another process shares the cores; PASSIVE waiting avoids that,
but it is read when torch loads libgomp, so it must be in the environment before
`import torch` (set_env_before_torch does that for a script that has not imported it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Serve every allocation from the heap and never trim it (glibc only)."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1
        ok &= libc.mallopt(_M_TRIM_THRESHOLD, 2 ** 31 - 1) == 1
        return bool(ok)
    except (OSError, AttributeError):
        return False


def set_env_before_torch() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless set (effective only before torch is imported)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def configure_cpu_training(threads: int) -> dict:
    """Heap setting above plus torch's intra-op thread count; returns what was applied."""
    import torch

    torch.set_num_threads(max(1, int(threads)))
    return {"keep_freed_memory": keep_freed_memory(), "threads": torch.get_num_threads(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default: spin)")}


def cpu_has_bf16_units(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True when the CPU multiplies BF16 natively (AVX512-BF16 or AMX-BF16): there the
    BF16 matrix products run ~10x the FP32 rate; elsewhere they are emulated."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def resolve_matmul(choice: str) -> str:
    """--matmul auto|bf16|fp32 -> bf16 or fp32."""
    if choice == "auto":
        return "bf16" if cpu_has_bf16_units() else "fp32"
    return choice
