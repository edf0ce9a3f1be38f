#!/usr/bin/env bash
# The CPU test suite: sets up the environment if needed, then runs pytest.
# No GPU needed: Triton kernels run in the Triton interpreter. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source utils/setup-triton.sh
export TRITON_INTERPRET="${TRITON_INTERPRET:-1}"
exec python -m pytest tests -q "$@"
