#!/usr/bin/env bash
# Guards the per-ISA builds (core/isa_target.h). A weak symbol (an inline function or a
# template instance) may be defined in many object files, and the linker keeps one copy of
# it for every caller. If the copy it keeps were compiled for AVX2 or AVX-512, a caller on
# a smaller CPU would die with SIGILL. So no weak symbol in the library may contain a VEX or
# EVEX instruction (mnemonics v*, or k* mask moves): the baseline (x86-64-v2) never emits
# them, and code for a wider level must live in a lt::isa_* namespace (a weak symbol whose
# name involves lt::isa_avx2:: or lt::isa_avx512:: exists at that level only, so the
# linker cannot hand it to another level's caller), or in functions with internal linkage.
# usage: isa_objects_check.sh OBJECT...   (exit 1 and a list of offenders on failure)
# An argument may also be a ;-separated list (CMake's $<TARGET_OBJECTS:...>).
set -euo pipefail
objects=()
for arg in "$@"; do
  IFS=';' read -ra parts <<<"$arg"
  objects+=("${parts[@]}")
done
bad=0
checked=0
for obj in "${objects[@]}"; do
  weak=$(nm --defined-only "$obj" | awk '$2 ~ /^[WVu]$/ {print $3}')
  checked=$((checked + 1))
  [ -n "$weak" ] || continue
  found=$(objdump -d --no-show-raw-insn "$obj" | awk -v weak="$weak" '
    BEGIN { n = split(weak, w, "\n"); for (i = 1; i <= n; i++) isweak[w[i]] = 1 }
    /^[0-9a-f]+ <.*>:$/ { fn = substr($2, 2, length($2) - 3); next }
    /:\t(v[a-z]|k(mov|or|and|not|shift|test|unpck))/ && (fn in isweak) && !(fn in seen) { seen[fn] = 1; print fn }' |
    c++filt | grep -v -e 'lt::isa_avx2::' -e 'lt::isa_avx512::' || true)
  if [ -n "$found" ]; then
    echo "$obj: weak symbols with AVX/AVX-512 code:"
    echo "$found" | sed 's/^/  /'
    bad=1
  fi
done
echo "checked $checked object files"
exit $bad
