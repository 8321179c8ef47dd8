import sys

from trnsim.cli import main

sys.exit(main())
