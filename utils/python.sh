# Sourced by the shell wrappers: pick the Python that has the project's packages.
# An active virtualenv wins, then the repository's .venv (made by utils/setup-triton.sh), then python3.
if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
    PYTHON="$VIRTUAL_ENV/bin/python"
elif [ -x "$(dirname "${BASH_SOURCE[0]}")/../.venv/bin/python" ]; then
    PYTHON="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin/python"
else
    PYTHON="${PYTHON:-python3}"
fi
