"""The kubelet device-manager test peer (Go source, build helper, JSON-lines client)."""
