"""What docs/quickstart.md says of the install is what setup.cfg does (the install itself
is scripts/wheel_check.py's: scripts/test.py's wheel step)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_quickstart_s_extras_are_setup_cfg_s() -> None:
    """docs/quickstart.md's table of extras: each is in setup.cfg, installing what it says."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = {name: [re.split(r"[<>=;\[ ]", line.strip())[0].lower()
                     for line in value.splitlines() if line.strip() and not line.startswith("#")]
              for name, value in config["options.extras_require"].items()}
    table = re.findall(r"^\| `(\w+)` \| ([\w-]+) \|", (ROOT / "docs" / "quickstart.md").read_text(),
                       re.MULTILINE)
    assert table
    for extra, package in table:
        assert extras.get(extra) == [package], (extra, extras.get(extra))
