"""``python -m cli ...`` is ``python run.py ...`` (used when the cwd is not the project root)."""

import sys

from cli.main import main

sys.exit(main())
