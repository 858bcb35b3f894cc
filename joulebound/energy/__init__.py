"""Energy measurement: meters (NVML, RAPL, simulated, replay), windows, store.

```python
from joulebound.energy import EnergyMeter
meter = EnergyMeter()                 # NVML when a GPU is readable, else time only (says why)
with meter.window("train"):
    ...
```
See ``docs/measurement.md``.
"""

from joulebound.energy.meter import EnergyMeter
from joulebound.energy.results import DeviceEnergy, WindowResult

__all__ = ["DeviceEnergy", "EnergyMeter", "WindowResult"]
