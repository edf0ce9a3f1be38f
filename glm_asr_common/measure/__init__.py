"""Measuring a transcription: the FLOP and byte model with its roofline, and the profiler's view.
"""
