"""preflight: is this multi-GPU node ready for a long torchrun job?"""

__version__ = "0.1.0"
