#!/bin/sh
# No library of ACCL exports libstdc++'s own functions. A toolchain that links
# libstdc++ statically into shared libraries would otherwise put a second
# libstdc++ in front of the process's (torch's) and crash where the versions
# differ; the build keeps such a copy private (--exclude-libs). Usage: FILE...
# (shared libraries and modules). Fails naming each file and symbol.
rc=0
for f in "$@"; do
  [ -f "$f" ] || { echo "no such file: $f"; rc=1; continue; }
  # Functions only libstdc++ itself defines (never an inline or template
  # instantiation of a user's code): locale, iostream initialisation, the
  # ostream inserters and the exception runtime.
  hits=$(nm -D --defined-only "$f" | awk '{print $NF}' | grep -E \
    '^(_ZNSt6locale7classicEv|_ZNSt8ios_base4InitC[12]Ev|_ZNSo9_M_insertI[lmdx]EERSoT_|__cxa_throw|__cxa_begin_catch|_ZNSt6locale2id5_M_idEv)$')
  if [ -n "$hits" ]; then
    echo "$f exports libstdc++'s own functions: $(echo $hits | tr '\n' ' ')"
    rc=1
  else
    echo "$f: no libstdc++ functions exported ($(nm -D --undefined-only "$f" | grep -c 'GLIBCXX_') taken from the shared libstdc++)"
  fi
done
exit $rc
