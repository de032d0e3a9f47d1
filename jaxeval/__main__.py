import sys

from jaxeval.cli import main

sys.exit(main())
