"""`python -m jaxeval.cli ...`: the `jaxeval` command."""

import sys

from jaxeval.cli import entry

sys.exit(entry())
