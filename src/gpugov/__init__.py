"""gpugov: declarable, governable and verifiable GPU sharing on Kubernetes."""

__version__ = "0.1.0"
