"""Fitting a request onto a node and node-scoring policies (one module per policy)."""
