"""NVML return codes map to typed errors (issue 29: NVML errors were recognised by substring and
one JouleboundError served input, environment and hardware faults)."""

from __future__ import annotations

import pytest

from joulebound.core.errors import (
    GpuBusy,
    InputError,
    JouleboundError,
    NoPermission,
    SchemaError,
    SetupError,
    UnsupportedGPU,
)
from joulebound.hw import gpu as gpu_layer
from joulebound.testing import fakenvml


def test_every_kind_is_a_joulebound_error():
    for kind in (InputError, SetupError, UnsupportedGPU, NoPermission, GpuBusy, SchemaError):
        assert issubclass(kind, JouleboundError)
    assert issubclass(SchemaError, InputError)


@pytest.mark.parametrize("code, kind", [
    (fakenvml.NVML_ERROR_NOT_SUPPORTED, UnsupportedGPU),
    (fakenvml.NVML_ERROR_NO_PERMISSION, NoPermission),
    (fakenvml.NVML_ERROR_UNINITIALIZED, SetupError),
    (fakenvml.NVML_ERROR_LIBRARY_NOT_FOUND, SetupError),
    (fakenvml.NVML_ERROR_GPU_IS_LOST, JouleboundError),
    (fakenvml.NVML_ERROR_INVALID_ARGUMENT, JouleboundError),
])
def test_nvml_codes_map_to_kinds(code, kind):
    assert gpu_layer.nvml_error_kind(fakenvml, fakenvml.NVMLError(code)) is kind


def test_a_message_alone_does_not_classify():
    """Only the return code counts: an error whose text happens to say 'not supported' or
    'permission' is neither (the old substring rule said it was)."""
    fake_text = RuntimeError("Not Supported: permission to read the counter is lost")
    assert not gpu_layer.is_not_supported(fakenvml, fake_text)
    assert not gpu_layer.is_no_permission(fakenvml, fake_text)
    assert gpu_layer.nvml_error_kind(fakenvml, fake_text) is JouleboundError


def test_driver_version_without_nvml_is_none():
    nv = fakenvml.FakeNvml(n_gpus=1, init_error=fakenvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    assert gpu_layer.driver_version(nv) is None
    assert isinstance(gpu_layer.driver_version(fakenvml.FakeNvml(n_gpus=1)), str)


def test_refused_clock_locks_are_no_permission(monkeypatch):
    from joulebound.core.clocks import ClockConfig
    from joulebound.runtime.actuators import NvmlActuator

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = fakenvml.FakeNvml(n_gpus=1, privileged=False)
    act = NvmlActuator(0, nvml=nv, check_privileges=False, install_signal_handlers=False)
    try:
        with pytest.raises(NoPermission, match="refused"):
            act._apply(ClockConfig(1410, None))
    finally:
        act.close()
