"""Shared test helpers: import paths and the golden data location."""

import os
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.dirname(TESTS)
REPO = os.path.dirname(TRAIN)
for p in (TRAIN, TESTS):
    if p not in sys.path:
        sys.path.insert(0, p)

GOLDEN = os.path.join(REPO, "tests", "data", "golden")
TINY_A = os.path.join(GOLDEN, "tiny-a")
OPS = os.path.join(GOLDEN, "ops", "ops.safetensors")

import torch  # noqa: E402

# One intra-op thread: these shapes are small, and OpenMP threads that spin-wait turn a
# shared, loaded 2-core machine into a 10x slowdown (measured), while 1 thread is steady.
torch.set_num_threads(1)


def ops_golden() -> dict:
    from dsv4mini.safetensors_io import read_safetensors
    return {k: torch.from_numpy(v.array) for k, v in read_safetensors(OPS).items()}
