#!/usr/bin/env bash
# Packs, from this Debian 12 machine, the build and run dependencies that a bare GPU machine
# (Ubuntu 24.04-like: glibc, libstdc++, zlib, g++, CMake, CUDA and pip torch only) lacks into one
# relocatable prefix: Open MPI 4.1 (+ PMIx), parallel HDF5, Boost.ProgramOptions, spdlog, fmt,
# nlohmann-json, PCRE2, utf8proc, GoogleTest/GMock and zlib's headers.
#   jobs/bench/pack-deps.sh [PREFIX]      (default: .gpu-deps/ in the repository root)
# Then, on the GPU machine: source jobs/bench/deps-env.sh PREFIX (see there).
# Layout mirrors Debian's (<prefix>/usr/{bin,include,lib/x86_64-linux-gnu,share}, <prefix>/etc):
# Debian's CMake package files compute their prefix from their own location and Open MPI
# relocates with OPAL_PREFIX, so both work unchanged from anywhere.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${1:-$repo/.gpu-deps}
limit_mib=28                         # small enough to copy to a GPU machine with a dataset
ML=/usr/lib/x86_64-linux-gnu         # Debian's multiarch library directory
OMPI_PKGLIB=$ML/openmpi/lib/openmpi3 # Open MPI's components (ompi_info --path pkglibdir)
PMIX=$ML/pmix2                       # the external PMIx 4 that Open MPI's pmix/ext3x uses
stamp=.hpctrain-deps                 # marks a folder this script made, so it may delete it
manifest=usr/share/hpctrain-deps/sonames  # "own|closure SONAME" lines, read by deps-env.sh

# Sonames every target machine provides itself: glibc, the compiler runtime, zlib. Shipping
# them would shadow the machine's newer copies (and glibc must match its own ld.so).
excluded_re='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libz|linux-vdso)\.so'
# Sonames that belong to the packed packages themselves: always taken from the prefix.
# Everything else in the runtime closure (hwloc, libevent, curl, openssl, ...) may be replaced
# by the machine's own copy; deps-env.sh decides that on the machine.
own_re='^(libmpi|libopen-rte|libopen-pal|libmca_common_|libpmix|libhdf5|libboost_|libspdlog|libfmt|libpcre2-8|libutf8proc)'
# Sonames replaced by stubs (see make_stub below).
stubbed=(libcurl.so.4 libcrypto.so.3)

for tool in gcc g++ readelf nm ldd; do
  command -v "$tool" >/dev/null || { echo "pack-deps: $tool is missing" >&2; exit 1; }
done
for f in $ML/libmpi.so $ML/libhdf5_openmpi.so $ML/libboost_program_options.so $ML/libspdlog.so \
         $ML/libfmt.so $ML/libgtest.a /usr/include/nlohmann/json.hpp "$PMIX/lib/libpmix.so.2" \
         $ML/libpcre2-8.so $ML/libutf8proc.so /usr/include/pcre2.h /usr/include/utf8proc.h; do
  [ -e "$f" ] || { echo "pack-deps: $f is missing; run jobs/install-deps.sh first" >&2; exit 1; }
done

case $prefix in *[[:space:]]*) echo "pack-deps: the prefix path must not contain spaces" >&2; exit 1 ;; esac
# Start clean, but never delete a folder this script did not make.
prefix=$(mkdir -p "$prefix" && cd "$prefix" && pwd)
if [ -n "$(ls -A "$prefix")" ] && [ ! -e "$prefix/$stamp" ]; then
  echo "pack-deps: $prefix is not empty and was not made by this script; refusing to clear it" >&2
  exit 1
fi
find "$prefix" -mindepth 1 -delete
touch "$prefix/$stamp"
P=$prefix

# /lib is a link to /usr/lib on Debian 12; ldd reports /lib paths. Use the /usr spelling.
norm() { case $1 in /lib/*|/lib64/*) echo "/usr$1" ;; *) echo "$1" ;; esac; }

# put FILE: copy FILE's content (links followed) to the same path in the prefix.
put() {
  local dst; dst="$P$(norm "$1")"
  mkdir -p "$(dirname "$dst")"
  cp -L --preserve=mode,timestamps "$1" "$dst"
}

# put_lib PATH: the real file behind PATH under its real name, and PATH itself (and the
# file's soname) as relative links to it, so libfoo.so -> libfoo.so.N.M and
# libfoo.so.N -> libfoo.so.N.M exist as in Debian, each link one hop from the real file.
put_lib() {
  local path real soname link
  path=$(norm "$1")
  real=$(readlink -f "$path")
  [ -e "$P$real" ] || put "$real"
  soname=$(readelf -d "$real" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  for link in "$path" ${soname:+"$(dirname "$real")/$soname"}; do
    [ "$link" = "$real" ] && continue
    mkdir -p "$P$(dirname "$link")"
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$real")" "$P$link"
  done
}

# put_tree DIR [FIND-ARGS...]: the files under DIR (links followed), optionally filtered.
put_tree() {
  local dir=$1; shift
  while IFS= read -r -d '' f; do put "$f"; done < <(find -L "$dir" -type f "$@" -print0)
}

# put_headers_of DIR CFLAGS -- HEADER...: exactly the headers under DIR that HEADER... pull in,
# transitively, as the compiler's dependency output lists them (glibc's and the compiler's own
# headers are the machine's). Scanned as C++17, C++20 and C, so that branches depending on the
# language or standard (boost/config, mpi.h's C++ bindings) are covered.
put_headers_of() {
  local dir=$1 flags=() f std src; shift
  while [ "$1" != -- ]; do flags+=("$1"); shift; done; shift
  src=$(mktemp --suffix=.cpp)
  for f in "$@"; do echo "#include <$f>"; done >"$src"
  # shellcheck disable=SC1003,SC2020  # tr turns the rule's spaces and continuation backslashes into newlines
  {
    for std in c++17 c++20; do g++ -std=$std "${flags[@]}" -M "$src"; done
    g++ -x c -std=c11 "${flags[@]}" -M "$src" 2>/dev/null || true   # C-only branches (mpi.h)
  } | tr ' \\' '\n\n' | grep "^$dir/" | sort -u | while read -r f; do put "$f"; done
  rm -f "$src"
}

echo "pack-deps: headers"
MPI_INC=$ML/openmpi/include
# mpi.h with and without the MPI-2 C++ bindings (the project skips them, other users may not).
put_headers_of "$MPI_INC" -I"$MPI_INC" -- mpi.h mpi-ext.h
put_headers_of "$MPI_INC" -I"$MPI_INC" -DOMPI_SKIP_MPICXX=1 -- mpi.h mpi-ext.h
# Parallel HDF5's public headers (all of them: hdf5.h includes most, users may include others).
put_tree /usr/include/hdf5/openmpi -name '*.h'
put $ML/libhdf5_openmpi.settings   # build settings, for diagnosis
# Boost: only the headers <boost/program_options.hpp> needs (a few MB, not /usr/include/boost).
put_headers_of /usr/include/boost -- boost/program_options.hpp boost/version.hpp boost/config.hpp
put_tree /usr/include/boost/config -name '*.hpp'   # compiler/stdlib-dependent branches
put_tree /usr/include/spdlog
put_tree /usr/include/fmt
put_tree /usr/include/nlohmann
put_tree /usr/include/gtest
put_tree /usr/include/gmock
put /usr/include/pcre2.h
put /usr/include/utf8proc.h
# zlib's headers and link name: the project includes <zlib.h> and finds ZLIB, and a bare
# machine has only the runtime libz.so.1 (which the link name resolves to there).
put /usr/include/zlib.h
put /usr/include/zconf.h
# The link name as a real file, and no libz.so.1: at run time the machine's own libz.so.1 serves.
mkdir -p "$P$ML" && cp -L "$ML/libz.so" "$P$ML/libz.so"

echo "pack-deps: libraries and CMake package files"
put_lib $ML/libmpi.so
for l in libmpi.so libopen-rte.so libopen-pal.so; do      # Open MPI's own libdir, as in Debian
  mkdir -p "$P$ML/openmpi/lib"
  ln -sfn "../../$(basename "$(readlink -f "$ML/$l.40")")" "$P$ML/openmpi/lib/$l"
done
put_lib $ML/libhdf5_openmpi.so
# Debian's HDF5_ROOT-style folder: hdf5/openmpi/{include,libhdf5.so}, as relative links.
mkdir -p "$P$ML/hdf5/openmpi"
ln -sfn ../../../../include/hdf5/openmpi "$P$ML/hdf5/openmpi/include"
ln -sfn "../../$(basename "$(readlink -f $ML/libhdf5_openmpi.so)")" "$P$ML/hdf5/openmpi/libhdf5.so"
put_lib $ML/libboost_program_options.so
put_lib $ML/libspdlog.so
put_lib $ML/libfmt.so
put_lib $ML/libpcre2-8.so
put_lib $ML/libutf8proc.so
for a in libgtest.a libgtest_main.a libgmock.a libgmock_main.a; do put $ML/$a; done
put_tree $ML/cmake/Boost-1.74.0
put_tree $ML/cmake/boost_headers-1.74.0
# Shared variant only: the static one would point at a libboost_program_options.a we don't ship.
put_tree $ML/cmake/boost_program_options-1.74.0 ! -name '*variant-static.cmake'
put $ML/cmake/BoostDetectToolset-1.74.0.cmake
put_tree $ML/cmake/fmt
put_tree $ML/cmake/spdlog
put_tree $ML/cmake/GTest
put_tree /usr/share/cmake/nlohmann_json

echo "pack-deps: Open MPI runtime"
# Components: everything except transports and launchers for hardware or schedulers a single
# GPU node doesn't have (UCX, OFI/libfabric, PSM/PSM2, verbs/openib, Slurm, Flux, JSM, Grid
# Engine), OpenSHMEM (not used), monitoring/debugger hooks and netlink reachability (libnl).
# What remains covers a singleton run and mpirun on one node: pml ob1, btl self/vader/tcp,
# pmix ext3x/isolated, plm isolated/rsh, ess singleton/hnp/pmi, coll, osc sm/rdma, io ompio/romio.
skip_re='_(ucx|ofi|psm|psm2|openib|verbs|slurm|flux|jsm|gridengine|monitoring|simulator|netlink)\.so$|^mca_(atomic|memheap|scoll|spml|sshmem)_|^libompi_dbg_msgq'
kept=0
for c in "$OMPI_PKGLIB"/*.so; do
  name=$(basename "$c")
  [[ $name =~ $skip_re ]] && continue
  put "$c"; kept=$((kept + 1))
done
echo "pack-deps: $kept Open MPI components kept"
# PMIx (loaded by pmix/ext3x): library, its plugins and help texts; deps-env.sh points PMIx's
# install-dir variables here. prm/slurm dropped with the other Slurm parts.
# Taken from PMIx's own folder (the multiarch libpmix.so.2 is only a convenience copy), and linked
# from the multiarch folder as in Debian.
put_lib "$PMIX/lib/libpmix.so.2"
ln -sfn "pmix2/lib/$(basename "$(readlink -f "$PMIX/lib/libpmix.so.2")")" "$P$ML/libpmix.so.2"
put_tree "$PMIX/lib/pmix" ! -name '*slurm*'
put_tree "$PMIX/share/pmix"
# Help texts and settings Open MPI reads at run time (Pkgdatadir); the compiler-wrapper data
# is left out with the wrappers.
put_tree /usr/share/openmpi ! -name '*-wrapper-data.txt'
# Debian's system-wide MCA defaults (excludes ucx/ofi/openib, osc pt2pt); deps-env.sh sets
# OPAL_SYSCONFDIR to this copy since /etc/openmpi won't exist on the GPU machine.
put /etc/openmpi/openmpi-mca-params.conf
put /etc/openmpi/openmpi-default-hostfile
# Launchers: mpirun/mpiexec are orterun; orted for completeness; ompi_info to diagnose.
for b in orterun orted ompi_info; do put /usr/bin/$b; done
for b in mpirun mpiexec mpirun.openmpi mpiexec.openmpi; do ln -sfn orterun "$P/usr/bin/$b"; done

echo "pack-deps: runtime closure"
# Walk DT_NEEDED from every ELF object packed so far; ldd (on this machine) says where each
# soname lives. The walk stops at the excluded sonames and at the stubbed ones below.
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
elves() { find "$P" -type f \( -name '*.so' -o -name '*.so.*' -o -path "$P/usr/bin/*" \) | sort; }
mapfile -t queue < <(elves)
# PMIx's folder on the path too, so libpmix.so.2 resolves there even without the multiarch link.
ldd_out=$(for e in "${queue[@]}"; do LD_LIBRARY_PATH=$PMIX/lib ldd "$e"; done 2>&1)
if grep -q 'not found' <<<"$ldd_out"; then
  echo "pack-deps: a packed object has an unresolved dependency on this machine:" >&2
  grep 'not found' <<<"$ldd_out" | sort -u >&2; exit 1
fi
declare -A where=() seen=() users=()
while read -r so path; do where[$so]=$path; done < <(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$ldd_out" | sort -u)
mkdir -p "$(dirname "$P/$manifest")"; : >"$P/$manifest"
while [ ${#queue[@]} -gt 0 ]; do
  e=${queue[0]}; queue=("${queue[@]:1}")
  for so in $(needed "$e"); do
    [[ $so =~ $excluded_re ]] && continue
    if [[ " ${stubbed[*]} " == *" $so "* ]]; then users[$so]+=" $e"; continue; fi
    [ -n "${seen[$so]:-}" ] && continue
    seen[$so]=1
    put_lib "${where[$so]}"
    queue+=("$(readlink -f "${where[$so]}")")
    # The manifest deps-env.sh reads: which sonames a machine's own copy may replace.
    if [[ $so =~ $own_re ]]; then echo "own $so"; else echo "closure $so"; fi >>"$P/$manifest"
  done
done

# Stubs: HDF5 links libcurl and libcrypto for its read-only S3 driver (ROS3) only, which hpctrain
# never uses, and their closure (openssl, gnutls, krb5, ldap, ssh2, ...) is ~16 MiB, more than
# the size limit allows. In their place go two tiny libraries with the same sonames and symbol
# versions whose functions abort with a message if ever called. They are "closure" entries, so
# deps-env.sh uses the machine's real libcurl/libcrypto wherever the machine has them.
make_stub() {
  local so=$1 dir src map real u syms
  shift
  real=${where[$so]}
  dir=$(mktemp -d); src=$dir/stub.c; map=$dir/stub.map
  # The versioned symbols the packed objects take from $so, as sym@VERSION.
  nm -D --defined-only "$real" | awk '{sub(/@@/, "@", $3); print $3}' | sort -u >"$dir/defined"
  syms=$(for u in "$@"; do nm -D --undefined-only "$u"; done | awk '{print $2}' | sort -u |
         grep -Fxf "$dir/defined" || true)
  [ -n "$syms" ] || { echo "pack-deps: no symbols found to stub in $so" >&2; exit 1; }
  {
    echo '#include <stdlib.h>'
    echo '#include <unistd.h>'
    echo 'static void stub_called(const char *m) { (void)!write(2, m, __builtin_strlen(m)); abort(); }'
    for sv in $syms; do
      # shellcheck disable=SC2028  # the \n is for the C string
      echo "void ${sv%%@*}(void) { stub_called(\"hpctrain deps: ${sv%%@*}() called, but $so is a stub" \
           "(HDF5's S3 driver is not supported); use a machine with $so\\n\"); }"
    done
  } >"$src"
  # One version node per version the users ask for, each listing its symbols.
  for v in $(tr ' ' '\n' <<<"$syms" | sed 's/.*@//' | sort -u); do
    echo "$v { global:"; tr ' ' '\n' <<<"$syms" | grep "@$v\$" | sed 's/@.*/;/'; echo "};"
  done >"$map"
  gcc -shared -fPIC -O2 -s -o "$P$ML/$so" -Wl,-soname,"$so" -Wl,--version-script="$map" "$src"
  rm -rf "$dir"
  echo "closure $so" >>"$P/$manifest"
  echo "pack-deps: $so is a stub ($(wc -w <<<"$syms") functions)"
}
for so in "${stubbed[@]}"; do
  # shellcheck disable=SC2086  # users[] is a space-separated list of paths (no spaces, checked)
  if [ -n "${users[$so]:-}" ]; then make_stub "$so" ${users[$so]}; fi
done

echo "pack-deps: checking"
# Static check, independent of what this machine has installed: every DT_NEEDED of every packed
# ELF object is either packed (file or link in a packed lib folder) or one of the excluded ones.
libdirs=("$P$ML" "$P$ML/openmpi/lib" "$P$PMIX/lib")
missing=0
while IFS= read -r e; do
  for n in $(readelf -d "$e" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [[ $n =~ $excluded_re ]] && continue
    found=""
    for d in "${libdirs[@]}"; do [ -e "$d/$n" ] && found=1 && break; done
    [ -n "$found" ] || { echo "pack-deps: ${e#"$P"} needs $n, which is not packed" >&2; missing=1; }
  done
done < <(elves)
[ "$missing" = 0 ] || exit 1
# No link may dangle or point outside the prefix (it would dangle on the GPU machine).
while IFS= read -r -d '' l; do
  t=$(readlink -e "$l" || true)
  case $t in "$P"/*) ;; *) echo "pack-deps: link ${l#"$P"} escapes the prefix ($t)" >&2; exit 1 ;; esac
done < <(find "$P" -type l -print0)

size_kib=$(du -sk "$P" | cut -f1)
echo "pack-deps: $(du -sh "$P" | cut -f1) in $P ($(find "$P" -type f | wc -l) files," \
     "$(grep -c '^closure' "$P/$manifest") replaceable runtime libraries)"
if [ "$size_kib" -ge $((limit_mib * 1024)) ]; then
  echo "pack-deps: over the ${limit_mib} MiB limit" >&2
  exit 1
fi
