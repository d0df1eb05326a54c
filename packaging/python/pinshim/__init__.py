"""pinshim: host<->device copy problems in unmodified CUDA programs.

This package only carries the native tool: bin/pinshim, lib/libpinshim.so
and the shared libraries they need that a system may lack. The `pinshim`
command and `python -m pinshim` run bin/pinshim with the same arguments.
"""

__version__ = "@VERSION@"
