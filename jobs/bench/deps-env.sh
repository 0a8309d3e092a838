# Sourced, never run: puts the dependency prefix made by jobs/bench/pack-deps.sh to use.
#   source jobs/bench/deps-env.sh [PREFIX]        (default: .gpu-deps/ in the repository root)
#   cmake -S . -B build/gpu $HPCTRAIN_DEPS_CMAKE_ARGS ...      (unquoted: one word per argument)
# Exports OPAL_PREFIX/OPAL_SYSCONFDIR (Open MPI relocation), PMIX_* (the same for PMIx),
# OMPI_MCA_plm=isolated where there is no ssh/rsh (see below), PATH,
# LD_LIBRARY_PATH, CMAKE_PREFIX_PATH, HPCTRAIN_DEPS_PREFIX and HPCTRAIN_DEPS_CMAKE_ARGS, a
# space-separated string (pack-deps.sh refuses prefix paths with spaces), so that it also
# reaches child scripts and splits with deps_args=($HPCTRAIN_DEPS_CMAKE_ARGS).
# Safe to source again (also with another prefix) and under set -euo pipefail.

_hd_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
_hd_p=${1:-$_hd_root/.gpu-deps}
if [ ! -f "$_hd_p/.hpctrain-deps" ] || [ ! -f "$_hd_p/usr/share/hpctrain-deps/sonames" ]; then
  echo "deps-env: $_hd_p is not a prefix made by jobs/bench/pack-deps.sh" >&2
  unset _hd_root _hd_p
  return 1
fi
_hd_p=$(cd "$_hd_p" && pwd)
_hd_lib=$_hd_p/usr/lib/x86_64-linux-gnu

# _hd_strip VALUE: VALUE (a :-list) without entries inside a deps prefix, this one or one sourced
# before (recorded in HPCTRAIN_DEPS_PREFIX), so that sourcing again does not stack entries.
_hd_strip() {
  local out="" e IFS=:
  for e in $1; do
    [ -z "$e" ] && continue
    case $e in "$_hd_p"|"$_hd_p"/*) continue ;; esac
    if [ -n "${HPCTRAIN_DEPS_PREFIX:-}" ]; then
      case $e in "$HPCTRAIN_DEPS_PREFIX"|"$HPCTRAIN_DEPS_PREFIX"/*) continue ;; esac
    fi
    out=${out:+$out:}$e
  done
  printf '%s' "$out"
}
_hd_llp=$(_hd_strip "${LD_LIBRARY_PATH:-}")

# LD_LIBRARY_PATH: the loader searches it before the system folders, so whatever is in it wins.
# The packed MPI/HDF5/PMIx/Boost/spdlog/fmt must win (a machine's own libmpi.so.40, say, would
# not match the Open MPI components OPAL_PREFIX points at), so the prefix comes FIRST. The other
# runtime libraries (hwloc, libevent, libudev, szip, munge, and the libcurl/libcrypto stubs)
# must not shadow the machine's own, newer copies: LD_LIBRARY_PATH gets a folder of links to the
# prefix's libraries that leaves out each of those the machine already resolves (ldconfig -p,
# or a folder already on LD_LIBRARY_PATH). If the machine's copy lacks a symbol (or symbol
# version) the packed libraries need, the packed copy goes back in (checked with ldd -r below).
_hd_ldconfig=$(command -v ldconfig || true)
for _x in /sbin/ldconfig /usr/sbin/ldconfig; do   # not on a non-root PATH
  if [ -z "$_hd_ldconfig" ] && [ -x "$_x" ]; then _hd_ldconfig=$_x; fi
done
_hd_have=$(
  { [ -n "$_hd_ldconfig" ] && "$_hd_ldconfig" -p 2>/dev/null | awk '/x86-64/ {print $1}'
    IFS=:; for _d in $_hd_llp; do ls "$_d" 2>/dev/null; done; } | sort -u
)
_hd_pruned=$(awk '$1 == "closure" {print $2}' "$_hd_p/usr/share/hpctrain-deps/sonames" |
             grep -Fx -f <(printf '%s\n' "$_hd_have") || true)
# Keyed by what is left out, so a folder once made (and possibly in use by running processes)
# is reused, never rewritten; a machine with other libraries gets its own.
_hd_key=$(printf '%s\n' "$_hd_pruned" | md5sum | cut -c1-12)
_hd_farm=$_hd_p/.ld-$_hd_key
if [ ! -f "$_hd_farm/.complete" ]; then
  # Links are relative inside the prefix, so that it stays relocatable.
  _hd_to=../usr/lib/x86_64-linux-gnu
  if ! _hd_tmp=$(mktemp -d "$_hd_p/.ld-tmp.XXXXXX" 2>/dev/null); then
    # Read-only prefix: build the folder under TMPDIR instead.
    _hd_farm=${TMPDIR:-/tmp}/hpctrain-deps-$(id -u)-$(printf '%s' "$_hd_p" | md5sum | cut -c1-8)-$_hd_key
    _hd_tmp=$(mktemp -d "${TMPDIR:-/tmp}/hpctrain-deps-tmp.XXXXXX")
    _hd_to=$_hd_lib
  fi
  if [ ! -f "$_hd_farm/.complete" ]; then
    for _f in "$_hd_lib"/*.so "$_hd_lib"/*.so.*; do
      _n=${_f##*/}
      # Leave out a pruned soname and the versioned file names behind it (libhwloc.so.15.6.1).
      _skip=""
      for _s in $_hd_pruned; do case $_n in "$_s"|"$_s".*) _skip=1; break ;; esac; done
      [ -n "$_skip" ] || ln -s "$_hd_to/$_n" "$_hd_tmp/$_n"
    done
    # Put back what the machine's copies can't stand in for: ldd -r (which binds every symbol)
    # reports a symbol version missing from a machine library ("libfoo.so.1: version `V' not
    # found"), or an undefined symbol that the packed copy of a pruned library defines.
    if [ -n "$_hd_pruned" ] && command -v ldd >/dev/null; then
      _hd_ldd=$(LD_LIBRARY_PATH=$_hd_tmp${_hd_llp:+:$_hd_llp} ldd -r "$_hd_tmp"/*.so.* \
                  "$_hd_lib"/openmpi/lib/openmpi3/*.so "$_hd_lib"/pmix2/lib/pmix/*.so "$_hd_p"/usr/bin/* 2>&1 || true)
      _hd_undef=$(sed -n 's/^[[:space:]]*undefined symbol: \([^[:space:],]*\).*/\1/p' <<<"$_hd_ldd" | sort -u)
      for _s in $_hd_pruned; do
        _bad=""
        if grep -q "/$_s: version .* not found" <<<"$_hd_ldd"; then
          _bad=1
        elif [ -n "$_hd_undef" ] && command -v nm >/dev/null; then
          _defs=$(nm -D --defined-only "$_hd_lib/$_s" 2>/dev/null | awk '{sub(/@.*/, "", $3); print $3}' || true)
          if grep -Fxq -f <(printf '%s\n' "$_hd_undef") <<<"$_defs"; then _bad=1; fi
        fi
        if [ -n "$_bad" ]; then
          echo "deps-env: the machine's $_s lacks symbols the prefix needs; using the packed one" >&2
          for _f in "$_hd_lib/$_s" "$_hd_lib/$_s".*; do
            if [ -e "$_f" ]; then ln -sf "$_hd_to/${_f##*/}" "$_hd_tmp/${_f##*/}"; fi
          done
        fi
      done
    fi
    touch "$_hd_tmp/.complete"
    # Atomic publish; if another shell won the race, use its (identical) folder.
    mv -T "$_hd_tmp" "$_hd_farm" 2>/dev/null || rm -rf "$_hd_tmp"
  else
    rm -rf "$_hd_tmp"
  fi
fi
export LD_LIBRARY_PATH=$_hd_farm${_hd_llp:+:$_hd_llp}

# Open MPI relocation. Debian's Open MPI has Prefix /usr and every other folder below it
# (Libdir .../openmpi/lib, Pkglibdir .../openmpi/lib/openmpi3, Pkgdatadir /usr/share/openmpi),
# so OPAL_PREFIX moves them all. Only Sysconfdir (/etc/openmpi, Debian's MCA defaults) is
# absolute: OPAL_SYSCONFDIR points at the packed copy.
export OPAL_PREFIX=$_hd_p/usr
export OPAL_SYSCONFDIR=$_hd_p/etc/openmpi
# PMIx (used by mpirun and its ranks through pmix/ext3x) has absolute install folders under
# /usr/lib/x86_64-linux-gnu/pmix2: its env variables move them, and the component path is set
# directly since a machine's own pmix-mca-params.conf (same path on Ubuntu) would name its own.
_hd_pmix=$_hd_lib/pmix2
export PMIX_PREFIX=$_hd_pmix PMIX_EXEC_PREFIX=$_hd_pmix PMIX_LIBDIR=$_hd_pmix/lib \
  PMIX_PKGLIBDIR=$_hd_pmix/lib/pmix PMIX_DATADIR=$_hd_pmix/share PMIX_PKGDATADIR=$_hd_pmix/share/pmix \
  PMIX_SYSCONFDIR=$_hd_pmix/share PMIX_MCA_mca_base_component_path=$_hd_pmix/lib/pmix

# mpirun on one node launches its ranks itself, but Open MPI 4.1's ssh/rsh launcher aborts mpirun
# ("plm_rsh_agent ... could not be found") on a machine with neither, instead of standing aside.
# There, use the isolated launcher (local ranks only), unless the caller chose a launcher.
if [ -z "${OMPI_MCA_plm:-}" ] && [ -z "${OMPI_MCA_plm_rsh_agent:-}" ]; then
  _hd_agent=""
  for _a in ssh rsh; do
    _x=$(command -v "$_a" || true)
    if [ -f "$_x" ] && [ -x "$_x" ]; then _hd_agent=$_x; break; fi
  done
  if [ -z "$_hd_agent" ]; then export OMPI_MCA_plm=isolated; fi
fi

_hd_path=$(_hd_strip "${PATH:-}")
export PATH=$_hd_p/usr/bin${_hd_path:+:$_hd_path}
_hd_cpp=$(_hd_strip "${CMAKE_PREFIX_PATH:-}")
export CMAKE_PREFIX_PATH=$_hd_p/usr${_hd_cpp:+:$_hd_cpp}
export HPCTRAIN_DEPS_PREFIX=$_hd_p

# CMake cache arguments that pin every dependency to the prefix, so that neither a copy on the
# machine nor a compiler wrapper (mpicc, h5pcc) is consulted:
# - FindMPI: header dir + library given; wrapper, built-in-compiler and guessing steps skipped.
#   MPI_C_COMPILER_INCLUDE_DIRS (with MPI_C_LIB_NAMES) makes FindMPI skip its autodetection
#   altogether, including pkg-config (a machine's mpi-c.pc would otherwise override the paths).
# - FindHDF5: HDF5_ROOT makes every search NO_DEFAULT_PATH (no h5pcc/h5cc or hdf5-config.cmake
#   from the machine); the include dir and library are given outright, as the cache variables
#   of FindHDF5's wrapper-less search (HDF5_C_INCLUDE_DIR, HDF5_hdf5_LIBRARY_RELEASE; the
#   wrapper path's HDF5_C_LIBRARY_hdf5 is never consulted without a wrapper).
#   HDF5_IS_PARALLEL then comes from the prefix's H5pubconf.h. An empty
#   HDF5_C_COMPILER_EXECUTABLE counts as given (CMake 3.25), so no h5pcc/h5cc is looked for;
#   a CMake that searched anyway would look only under HDF5_ROOT, where there is none.
# - Config packages: <Pkg>_DIR points at the packed CMake files.
_hd_inc=$_hd_p/usr/include
_hd_args=(
  -DMPI_SKIP_COMPILER_WRAPPER=ON
  -DMPI_ASSUME_NO_BUILTIN_MPI=ON
  -DMPI_SKIP_GUESSING=ON
  "-DMPI_C_HEADER_DIR=$_hd_lib/openmpi/include"
  "-DMPI_C_COMPILER_INCLUDE_DIRS=$_hd_lib/openmpi/include"
  -DMPI_C_LIB_NAMES=mpi
  "-DMPI_mpi_LIBRARY=$_hd_lib/libmpi.so"
  "-DMPIEXEC_EXECUTABLE=$_hd_p/usr/bin/mpiexec"
  "-DHDF5_ROOT=$_hd_lib/hdf5/openmpi"
  -DHDF5_NO_FIND_PACKAGE_CONFIG_FILE=ON
  -DHDF5_C_COMPILER_EXECUTABLE=
  "-DHDF5_C_INCLUDE_DIR=$_hd_inc/hdf5/openmpi"
  "-DHDF5_hdf5_LIBRARY_RELEASE=$_hd_lib/libhdf5_openmpi.so"
  "-DBoost_DIR=$_hd_lib/cmake/Boost-1.74.0"
  "-Dfmt_DIR=$_hd_lib/cmake/fmt"
  "-Dspdlog_DIR=$_hd_lib/cmake/spdlog"
  "-Dnlohmann_json_DIR=$_hd_p/usr/share/cmake/nlohmann_json"
  "-DGTest_DIR=$_hd_lib/cmake/GTest"
  "-DZLIB_INCLUDE_DIR=$_hd_inc"
  "-DZLIB_LIBRARY=$_hd_lib/libz.so"
  "-DHPCTRAIN_MPIEXEC=$_hd_p/usr/bin/mpiexec"
)
export HPCTRAIN_DEPS_CMAKE_ARGS="${_hd_args[*]}"

unset _hd_root _hd_p _hd_lib _hd_llp _hd_ldconfig _hd_have _hd_pruned _hd_key _hd_farm _hd_tmp \
  _hd_ldd _hd_undef _bad _defs _hd_to _hd_pmix _hd_path _hd_cpp _hd_inc _hd_args _hd_agent _a _x _d _f _n _s _skip
unset -f _hd_strip
