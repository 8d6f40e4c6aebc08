"""``python -m actors.hotpath [--only answers,progress,events]``: see actors/hotpath/runner.py."""

import sys

from actors.hotpath.runner import main

sys.exit(main())
