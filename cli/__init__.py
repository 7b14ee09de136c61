"""The command line behind ``python run.py``."""
