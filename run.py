#!/usr/bin/env python3
"""Léa replay orchestrator: ``python run.py --help`` lists the commands."""

import sys

from cli.main import main

if __name__ == "__main__":
    sys.exit(main())
