"""``python -m engine`` is the ``engine`` command."""

from engine.cli import main

raise SystemExit(main())
