"""draconf: a conformance suite for GPU Dynamic Resource Allocation on Kubernetes.

PYTEST_DONT_REWRITE: ``draconf run`` imports this package before it starts pytest, which marks
an installed plugin's package for assertion rewriting; without this marker a plain (not
editable) install's every run warned that ``draconf`` was imported too early to be rewritten.
"""
__version__ = "0.1.0"
