"""`python3 -m pinshim_fleet`, as `pinshim fleet` runs it."""
import sys

from pinshim_fleet.cli import main

# Dask's worker processes start by importing the main module: only the
# command itself runs main().
if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
