#!/usr/bin/env bash
# The CPU test suite: sets up the environment if needed, then runs pytest.
# No GPU needed: Triton kernels run in the Triton interpreter, cuTile kernels in the CPU emulator, and
# the cuTile compiler (installed by setup-cutile.sh) checks that every cuTile kernel compiles for sm_90.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source utils/setup-cutile.sh
export TRITON_INTERPRET="${TRITON_INTERPRET:-1}"
# Two workers (pytest-xdist): the tests are single-threaded Python (interpreter, emulator), so a 2-core
# machine runs the suite in about half the time. --dist loadfile keeps each file on one worker: its
# module-scoped fixtures (the class grader's run, the demo server) are built once, and the Slurm tests,
# which read the first running job of the user, never overlap. -n 0 runs it in one process.
exec python -m pytest tests -q -n 2 --dist loadfile "$@"
