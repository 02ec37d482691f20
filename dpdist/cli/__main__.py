"""``python -m dpdist.cli``: the ``dpdist`` command (how ``dpdist run`` starts its supervised child)."""

import sys

from dpdist.cli import main

if __name__ == "__main__":
    sys.exit(main())
