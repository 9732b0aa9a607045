import sys

from lifecycle.cli import main

sys.exit(main())
