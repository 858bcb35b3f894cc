"""The public Python API (joulebound/__init__.py): every name exists, is documented and loads
lazily; the README's Python examples run as written (on CPU)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import joulebound

README = Path(__file__).resolve().parent.parent / "README.md"


def test_every_public_name_resolves_and_has_a_docstring():
    for name in joulebound.__all__:
        obj = getattr(joulebound, name)
        if name == "__version__":
            continue
        assert (obj.__doc__ or "").strip(), f"joulebound.{name} has no docstring"


def test_import_joulebound_is_light():
    code = ("import sys, joulebound; heavy = [m for m in ('torch', 'numba', 'scipy', "
            "'transformers', 'highspy') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "[]"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_readme_python_examples_run(tmp_path):
    blocks = _python_blocks(README.read_text())
    api = [b for b in blocks if "import joulebound as jb" in b]
    assert api, "README has no Python API example"
    script = tmp_path / "readme_api.py"
    script.write_text("\n".join(api))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert re.match(r"\d+ kernels x \d+ clock configs", lines[0])
    assert "(modeled)" in lines[1] and "energy" in lines[1]
    assert (tmp_path / "plan.json").is_file() and (tmp_path / "runs.db").is_file()
    assert lines[-1].startswith("work ")
