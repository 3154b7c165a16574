import sys

from verltop.cli import main

sys.exit(main())
