"""Transcript normalisation and word error rate (jiwer); accuracy = max(0, 1 − WER)."""

import re


def normalize(text: str) -> str:
    """Lower case, punctuation dropped (apostrophes inside words kept), whitespace collapsed."""
    text = text.lower().replace("’", "'")
    text = re.sub(r"[^\w\s']", " ", text)
    text = re.sub(r"(?<!\w)'|'(?!\w)", " ", text)
    return " ".join(text.split())


def word_error_rate(hypothesis: str, reference: str) -> float:
    import jiwer

    ref, hyp = normalize(reference), normalize(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    return float(jiwer.wer(ref, hyp if hyp else ""))


def accuracy(wer: float) -> float:
    return max(0.0, 1.0 - wer)
