"""Node agent: NVML discovery, device plugin, enforcement-region reader, exporter."""
