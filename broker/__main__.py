"""``python -m broker``: the MDP/0.2 broker and bus proxy, configured from ``LEA_*``."""

import sys

from broker.broker import main

if __name__ == "__main__":
    sys.exit(main())
