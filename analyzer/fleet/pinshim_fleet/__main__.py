"""`python3 -m pinshim_fleet`, as `pinshim fleet` runs it."""
import sys

from pinshim_fleet.cli import main

sys.exit(main(sys.argv[1:]))
