#!/usr/bin/env bash
# ./demo.sh [streamlit options]  →  the live demo on http://localhost:8501, reachable from this machine only
# (.streamlit/config.toml holds the server settings). Set up the environment first: source utils/setup-triton.sh
set -euo pipefail
cd "$(dirname "$0")"
source utils/python.sh
if ! "$PYTHON" -c 'import streamlit' 2>/dev/null; then
    echo "error: streamlit is not installed for $PYTHON; run: source utils/setup-triton.sh" >&2
    exit 2
fi
exec "$PYTHON" -m streamlit run demo.py "$@"
