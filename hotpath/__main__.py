"""``python -m hotpath [--only answers,progress,events,retention]``: see hotpath/runner.py."""

import sys

from hotpath.runner import main

sys.exit(main())
