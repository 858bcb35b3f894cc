"""Energy scaling model for transformer training: proxies, speedup laws, energy laws, advisor."""
