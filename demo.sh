#!/usr/bin/env bash
# ./demo.sh [--model tiny|HUB_ID|DIR] [streamlit options]  →  the live demo on http://localhost:8501, reachable
# from this machine only (.streamlit/config.toml holds the server settings); --model picks the checkpoint the
# page starts on. Set up the environment first: source utils/setup-triton.sh
set -euo pipefail
cd "$(dirname "$0")"
source utils/python.sh
if ! "$PYTHON" -c 'import streamlit' 2>/dev/null; then
    echo "error: streamlit is not installed for $PYTHON; run: source utils/setup-triton.sh" >&2
    exit 2
fi
page_args=()
if [ "${1:-}" = "--model" ]; then
    if [ $# -lt 2 ]; then
        echo "error: --model needs a value: tiny, a hub id or a checkpoint directory" >&2
        exit 2
    fi
    page_args=(-- --model "$2")
    shift 2
fi
exec "$PYTHON" -m streamlit run demo.py "$@" "${page_args[@]}"
