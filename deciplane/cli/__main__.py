"""``python -m deciplane.cli`` = the ``deciplane`` command."""

from deciplane.cli import app

app()
