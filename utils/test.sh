#!/usr/bin/env bash
# The CPU test suite: sets up the environment if needed, then runs pytest.
# No GPU needed: Triton kernels run in the Triton interpreter, cuTile kernels in the CPU emulator, and
# the cuTile compiler (installed by setup-cutile.sh) checks that every cuTile kernel compiles for sm_90.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source utils/setup-cutile.sh
export TRITON_INTERPRET="${TRITON_INTERPRET:-1}"
exec python -m pytest tests -q "$@"
