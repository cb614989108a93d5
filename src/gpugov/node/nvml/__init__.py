"""NVML access for the node agent, the exporter and the device plugin (through `source`)."""
