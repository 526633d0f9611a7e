import sys

from probmodels.cli import main

sys.exit(main())
