"""Configuration: the one settings object every process reads (settings.py), and Redis URL parsing."""
