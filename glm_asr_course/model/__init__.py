"""The model core: what a track needs to run GLM-ASR (configuration, checkpoint, audio and features,
precision, weight packing, the greedy engine and its profiler regions).
"""
