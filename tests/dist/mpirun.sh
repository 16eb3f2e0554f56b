#!/usr/bin/env bash
# Runs `mpirun -np N CMD...` for CTest on one machine (loopback / shared
# memory): --oversubscribe (more ranks than cores), --allow-run-as-root when
# root (containers), and no single-copy kernel mechanism (CMA needs ptrace
# rights a container may not grant).  Exit 77 (CTest SKIP_RETURN_CODE) when
# mpirun is missing, so a machine without OpenMPI skips instead of failing.
set -euo pipefail
np=$1
shift
if ! command -v mpirun >/dev/null 2>&1; then
  echo "mpirun not found: skipping (scripts/deps installs openmpi-bin)" >&2
  exit 77
fi
args=(--oversubscribe -np "$np" --mca btl_vader_single_copy_mechanism none)
if [ "$(id -u)" = 0 ]; then args+=(--allow-run-as-root); fi
exec mpirun "${args[@]}" "$@"
