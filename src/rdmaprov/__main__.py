"""Allow `python -m rdmaprov`."""

from rdmaprov.cli import main

raise SystemExit(main())
