import sys

from jaxeval.cli import entry

sys.exit(entry())
