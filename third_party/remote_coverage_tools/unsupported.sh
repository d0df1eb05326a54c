#!/bin/sh
echo "coverage is not supported in pinshim's offline build" >&2
exit 1
