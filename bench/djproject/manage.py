#!/usr/bin/env python
"""manage.py of the bench Django project (bench/djproject/settings.py)."""

import os
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.djproject.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
