"""GLM-ASR in plain PyTorch: the reference implementation every kernel track is checked against."""
