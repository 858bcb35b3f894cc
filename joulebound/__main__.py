"""``python -m joulebound``: the same command line as the ``joulebound`` script."""

import sys

from joulebound.cli import main

if __name__ == "__main__":
    sys.exit(main())
