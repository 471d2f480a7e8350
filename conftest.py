"""Loads the draconf plugin when pytest runs from a source checkout."""

pytest_plugins = ["draconf.pytest_plugin"]
