"""`python -m sediment ...` runs the command-line interface."""

from sediment.cli import main

raise SystemExit(main())
