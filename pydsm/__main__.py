"""``python -m pydsm`` is the ``pydsm`` command."""
import sys

from .cli import main

sys.exit(main())
