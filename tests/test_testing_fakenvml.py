"""The fake NVML (joulebound.testing.fakenvml) against the real nvidia-ml-py API: every NVML
function it implements exists in ``pynvml`` with the same parameters, and every constant it
defines has pynvml's value (issue 29: the fake was never checked against the real API)."""

from __future__ import annotations

import inspect

import pytest

from joulebound.testing import fakenvml

pynvml = pytest.importorskip("pynvml")


def _fake_functions() -> dict[str, object]:
    """The NVML calls the fake implements: FakeNvml's ``nvml*`` methods (unbound)."""
    cls = fakenvml.FakeNvml
    return {n: getattr(cls, n) for n in dir(cls)
            if n.startswith("nvml") and callable(getattr(cls, n))}


def _params(fn: object) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def test_the_fake_implements_a_real_api_surface():
    assert len(_fake_functions()) >= 15


@pytest.mark.parametrize("name", sorted(_fake_functions()))
def test_each_fake_function_exists_in_pynvml_with_the_same_parameters(name):
    assert hasattr(pynvml, name), f"pynvml has no {name}: the fake invents an NVML call"
    real = _params(getattr(pynvml, name))
    fake = _params(_fake_functions()[name])[1:]     # without self
    required = [p for p in real if p.default is p.empty]
    # the fake may accept pynvml's optional parameters or not, but must take every required one
    # and no more positional parameters than pynvml has
    assert len(required) <= len(fake) <= len(real), (
        f"{name}: pynvml takes ({', '.join(p.name for p in real)}), the fake "
        f"({', '.join(p.name for p in fake)})")


def test_constants_and_error_classes_match_pynvml():
    consts = {n: v for n, v in vars(fakenvml).items()
              if n.startswith("NVML_") and isinstance(v, int)}
    assert consts
    for n, v in consts.items():
        assert getattr(pynvml, n) == v, n
    for n, cls in vars(fakenvml).items():
        if n.startswith("NVMLError_") and isinstance(cls, type):
            real = getattr(pynvml, n)
            assert issubclass(real, pynvml.NVMLError), n
            code = next(v for k, v in consts.items()
                        if k.startswith("NVML_ERROR_") and fakenvml.NVMLError(v).__class__ is cls)
            assert isinstance(pynvml.NVMLError(code), real), n
