import sys

from toolsched.cli import main

sys.exit(main())
