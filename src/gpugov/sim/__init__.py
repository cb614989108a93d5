"""Simulation driver: trace loaders, experiment procedures, metrics and reports."""
