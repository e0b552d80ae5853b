#!/bin/sh
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The pool's sources form no circle: each source file calls only into files of a lower layer
# (the order pool/src/pool.h gives). Reads the symbols libmqttpool's objects define and use.
# usage: layers_test.sh SOURCE_DIR OBJECT_DIR
set -eu
src=$1
obj=$2
# layer file
layers='0 op
0 logic
0 corr
0 claims
1 wire
2 finish
3 node
4 session
5 legacy
6 conn
7 io
7 stats
8 api
8 create'
layer_of() { echo "$layers" | awk -v f="$1" '$2 == f {print $1}'; }
status=0
for c in "$src"/*.c; do
	f=$(basename "$c" .c)
	if [ -z "$(layer_of "$f")" ]; then
		echo "layers_test: $f.c has no layer here (add it, and to pool/src/pool.h)" >&2
		status=1
	fi
	[ -f "$obj/$f.c.o" ] || { echo "layers_test: no $obj/$f.c.o" >&2; exit 1; }
done
defs=$(mktemp)
trap 'rm -f "$defs"' EXIT
for f in $(echo "$layers" | awk '{print $2}'); do
	nm --defined-only -g "$obj/$f.c.o" | awk -v f="$f" '$3 ~ /^mqp_/ {print $3, f}'
done >"$defs"
for f in $(echo "$layers" | awk '{print $2}'); do
	mine=$(layer_of "$f")
	for s in $(nm --undefined-only "$obj/$f.c.o" | awk '$2 ~ /^mqp_/ {print $2}'); do
		g=$(awk -v s="$s" '$1 == s {print $2}' "$defs")
		[ -n "$g" ] || continue
		theirs=$(layer_of "$g")
		if [ "$theirs" -ge "$mine" ]; then
			echo "layers_test: $f.c (layer $mine) calls $s in $g.c (layer $theirs)" >&2
			status=1
		fi
	done
done
[ $status -eq 0 ] && echo "layers_test: $(wc -l <"$defs") symbols, every call goes down a layer"
exit $status
