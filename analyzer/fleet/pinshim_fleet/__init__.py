"""pinshim fleet: every trace under some directories analyzed by `pinshim
export` as tasks of a Dask cluster, and the tables reduced to fleet-wide
ones and one HTML page (docs/fleet.md)."""
