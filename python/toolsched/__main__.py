import sys

from toolsched._cli.cli import main

sys.exit(main())
