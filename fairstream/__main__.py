"""``python -m fairstream`` runs the CLI."""

import sys

from fairstream.cli import main

sys.exit(main())
