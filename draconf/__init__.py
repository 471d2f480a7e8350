"""draconf: a conformance suite for GPU Dynamic Resource Allocation on Kubernetes."""
__version__ = "0.1.0"
