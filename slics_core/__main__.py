"""``python -m slics_core`` runs the ``slics`` command line."""
from slics_core.cli import main

raise SystemExit(main())
