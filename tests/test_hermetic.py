"""The suite does not read the user's own joulebound state (issue 29: after the README's
`joulebound devices import gpu.xml --name mygpu` in the real home, `make test` failed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from joulebound.hw.catalog import list_devices, user_catalog_dir


def test_every_test_gets_an_empty_private_home():
    home = Path(os.environ["JOULEBOUND_HOME"])
    assert user_catalog_dir() == home / "devices"
    real = Path("~/.config/joulebound").expanduser()
    assert home.resolve() != real.resolve() and not (home / "devices").exists()


def test_an_entry_in_the_real_default_home_does_not_reach_the_suite(tmp_path):
    """A child process given a HOME whose ~/.config/joulebound/devices holds an imported GPU
    sees it only without the suite's JOULEBOUND_HOME; with it (as every test has), the catalog
    is the built-in one."""
    fake_home = tmp_path / "user"
    devs = fake_home / ".config" / "joulebound" / "devices"
    devs.mkdir(parents=True)
    t4 = Path(__file__).resolve().parent.parent / "joulebound" / "hw" / "data" / "t4.toml"
    (devs / "mygpu.toml").write_text(t4.read_text().replace('name = "t4"', 'name = "mygpu"'))
    code = ("from joulebound.hw.catalog import list_devices; "
            "print(sorted(d.name for d in list_devices()))")
    bare = {k: v for k, v in os.environ.items() if k != "JOULEBOUND_HOME"}
    bare["HOME"] = str(fake_home)
    seen = subprocess.run([sys.executable, "-c", code], env=bare, capture_output=True,
                          text=True, timeout=120, check=True).stdout
    assert "'mygpu'" in seen            # without the isolation the user's GPU is in the catalog
    isolated = {**bare, "JOULEBOUND_HOME": os.environ["JOULEBOUND_HOME"]}
    seen = subprocess.run([sys.executable, "-c", code], env=isolated, capture_output=True,
                          text=True, timeout=120, check=True).stdout
    assert "'mygpu'" not in seen
    assert seen.strip() == str(sorted(d.name for d in list_devices()))
