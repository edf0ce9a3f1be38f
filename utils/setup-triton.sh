# Set up (once) and activate the Triton track's environment:   source utils/setup-triton.sh
# Creates .venv at the repository root and installs this repository into it in editable mode
# (pyproject.toml: the pinned packages, the demo's and the tests'), from the package index only.
# Re-sourcing is quick: packages are reinstalled only when pyproject.toml changes.
# GLM_ASR_VENV=DIR picks another place.
_glm_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_glm_venv="${GLM_ASR_VENV:-$_glm_root/.venv}"
_glm_setup() {
    set -e
    python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is required")'
    [ -x "$_glm_venv/bin/python" ] || python3 -m venv "$_glm_venv"
    local stamp="$_glm_venv/.glm_asr_pyproject"
    if ! cmp -s "$_glm_root/pyproject.toml" "$stamp"; then
        echo "Installing packages into $_glm_venv (first time: a few minutes)..."
        "$_glm_venv/bin/python" -m pip install -q --upgrade pip
        # torch first: the CUDA build (the default index's) where an NVIDIA driver answers; elsewhere the
        # CPU build from PyTorch's CPU index: 0.75 GB installed, against several GB for the CUDA build and
        # its nvidia-* packages. pyproject.toml's torch pin accepts either.
        if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
            "$_glm_venv/bin/python" -m pip install -q "torch==2.13.0"
        elif ! "$_glm_venv/bin/python" -m pip install -q --retries 0 "torch==2.13.0" \
                --index-url https://download.pytorch.org/whl/cpu; then
            echo "note: PyTorch's CPU index did not serve torch 2.13.0; installing from the default index instead" \
                 "(on Linux that is the CUDA build: larger, and it runs on the CPU all the same)"
            "$_glm_venv/bin/python" -m pip install -q "torch==2.13.0"
        fi
        "$_glm_venv/bin/python" -m pip install -q -e "$_glm_root[demo,lab,test]"
        cp "$_glm_root/pyproject.toml" "$stamp"
    fi
}
if ( _glm_setup ); then
    source "$_glm_venv/bin/activate"
    echo "Triton environment ready: $(python -c 'import torch, triton; print(f"torch {torch.__version__}, triton {triton.__version__}, CUDA available: {torch.cuda.is_available()}")')"
else
    echo "error: environment setup failed (see above)" >&2
fi
unset -f _glm_setup
