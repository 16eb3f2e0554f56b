#!/usr/bin/env python3
"""Cross-check of the exporter with the C++ engine: tiny-a loaded by dsv4mini, exported
again, must pass the engine's own golden checks.

    /usr/bin/python3 train/tests/engine_golden_check.py PATH/TO/dsv4
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

from dsv4mini.checkpoint import export_checkpoint, load_checkpoint  # noqa: E402


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    cfg, model = load_checkpoint(util.TINY_A)
    with tempfile.TemporaryDirectory() as tmp:
        out = export_checkpoint(model, cfg, os.path.join(tmp, "tiny-a"))
        return subprocess.call([argv[0], "check-golden", "--model", out, "--golden",
                                os.path.join(util.TINY_A, "golden.safetensors")])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
