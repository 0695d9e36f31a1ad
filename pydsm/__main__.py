"""``python -m pydsm`` is the ``pydsm`` command."""
import sys

from .tools.cli import main

sys.exit(main())
