"""Energy measurement: meters (NVML, RAPL, simulated, replay), windows, store."""
