"""Triton kernels; every module here imports `triton` and is imported only after a Triton backend was chosen."""
