"""``python -m asymgeo``: the command line (:mod:`asymgeo.cli`)."""

import sys

from .cli import main

sys.exit(main())
