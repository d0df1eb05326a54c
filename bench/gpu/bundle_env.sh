# Sourced by the GPU scripts with the bundle's folder (scripts/gpu_bundle.sh's
# .gpu) as $1: puts the libraries the bundle carries from the build
# machine's packages that this machine lacks (libunwind, libdw,
# libbenchmark, ...) on the library path, as links in BUNDLE/needed; the ones
# this machine has stay its own. Each script sources it itself, so any of
# them runs alone on a fresh machine.
#
#   . bench/gpu/bundle_env.sh BUNDLE
pinshim_bundle_dir="$(cd "${1:?bundle_env.sh: no bundle folder}" && pwd)"
mkdir -p "$pinshim_bundle_dir/needed"
for pinshim_lib in "$pinshim_bundle_dir"/lib/*; do
  [ -e "$pinshim_lib" ] || continue
  pinshim_name=$(basename "$pinshim_lib")
  ldconfig -p | grep -qE "^[[:space:]]$pinshim_name " ||
    ln -sf "$pinshim_lib" "$pinshim_bundle_dir/needed/$pinshim_name"
done
case ":${LD_LIBRARY_PATH:-}:" in
  *":$pinshim_bundle_dir/needed:"*) ;;
  *) export LD_LIBRARY_PATH="$pinshim_bundle_dir/needed${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
esac
unset pinshim_lib pinshim_name
