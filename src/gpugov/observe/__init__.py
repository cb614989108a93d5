"""Observation: the declared / allocated / used views joined, and the tools that read them.

A driver-level room (beside k8s/ and node/): it may import model/ and control/, and nothing
below it imports it. Pure joins live in `views.py`; I/O (Kubernetes, Prometheus) in
`cluster.py` and `promapi.py`; the long-running process in `reconciler.py`.
"""
