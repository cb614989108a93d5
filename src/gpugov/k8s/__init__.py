"""Kubernetes driver: scheduler extender, admission webhook, CRDs, annotation codec."""
