"""GPU device catalog: clocks, peak rates, power limits, with sources."""
