"""NVIDIA GPUs through NVML: ``dralet run --driver nvidia``."""
