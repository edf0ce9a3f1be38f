"""Streamlit demo: record or upload speech, pick an implementation, read the transcript.

    streamlit run demo.py        (streamlit is installed by utils/setup-triton.sh)
"""

import io
import time

import streamlit as st
import torch

from glm_asr_common.audio import SAMPLE_RATE, load_audio
from glm_asr_common.checkpoint import DEFAULT_MODEL
from glm_asr_common.precision import PRECISIONS
from glm_asr_common.errors import UserError
from glm_asr_common.frontend import decode, prepare_inputs
from glm_asr_common.runtime import import_track, open_checkpoint, track_folders

LABELS = {
    "glm_asr_triton_example": "Triton Example (Baseline)",
    "glm_asr_triton_template": "Triton Template",
    "glm_asr_cutile_example": "CuTile Example (Baseline)",
    "glm_asr_cutile_template": "CuTile Template",
    "glm_asr_scratch": "Scratch (PyTorch)",
}


@st.cache_resource(show_spinner="Loading the model (first time: download and kernel compilation)…")
def load(folder: str, model: str, precision: str, device: str):
    checkpoint = open_checkpoint(model, PRECISIONS[precision].dtype)
    track = import_track(folder, None, device)
    return checkpoint, track.load_model(checkpoint.config, checkpoint.weights, device, precision)


def main():
    st.set_page_config(page_title="GLM-ASR kernels demo", page_icon="🎙️")
    st.title("GLM-ASR-Nano: speech to text with your kernels")
    folders = track_folders()
    default = folders.index("glm_asr_triton_example") if "glm_asr_triton_example" in folders else 0
    with st.sidebar:
        folder = st.selectbox("Implementation", folders, index=default, format_func=lambda f: LABELS.get(f, f))
        model = st.text_input("Checkpoint (hub id or directory)", DEFAULT_MODEL)
        precision = st.radio("Precision", list(PRECISIONS), horizontal=True)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        st.caption(f"Device: {device}" + ("" if device == "cuda" else " (Triton runs in its slow interpreter)"))
        max_new_tokens = st.slider("Max new tokens", 16, 512, 200)

    recorded = st.audio_input("Record from the microphone")
    uploaded = st.file_uploader("…or upload a file", type=["wav", "flac", "ogg"])
    source = recorded or uploaded
    if source is None:
        st.info("Record or upload some speech to transcribe it.")
        return
    try:
        audio = load_audio(io.BytesIO(source.getvalue()), name=getattr(source, "name", "the recording"))
        checkpoint, asr = load(folder, model, precision, device)
        inputs = prepare_inputs([audio], checkpoint.config, checkpoint.processor)
    except UserError as e:
        st.error(str(e))
        return
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    tokens = asr.generate(inputs, max_new_tokens)[0]
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed_ms = (time.perf_counter() - start) * 1000
    st.subheader("Transcript")
    st.write(decode(checkpoint.processor, tokens) or "(no tokenizer in this checkpoint: no text)")
    seconds = len(audio) / SAMPLE_RATE
    st.caption(f"{seconds:.1f} s of audio · {len(tokens)} tokens · {elapsed_ms:.0f} ms "
               f"({elapsed_ms / max(len(tokens), 1):.1f} ms/token, {seconds * 1000 / elapsed_ms:.1f}× real time)")


main()
