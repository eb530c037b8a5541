"""hpcgc: an MPI benchmark suite for communication-compressed distributed optimization."""

__version__ = "0.1.0"
