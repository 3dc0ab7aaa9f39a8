"""``python -m slics_core`` runs the ``slics`` command line."""
from slics_core.cli import run

raise SystemExit(run())
