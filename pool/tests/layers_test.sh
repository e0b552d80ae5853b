#!/bin/sh
# The pool's sources form no circle: each object file calls only into files of a lower layer
# (the order pool/src/pool.h gives). Reads the symbols libmqttpool's objects define and use.
# usage: layers_test.sh OBJECT_DIR
set -eu
dir=$1
# layer: file
layers='0 op
0 logic
0 corr
1 conn
2 io
2 api
2 stats
3 create
3 legacy'
defs=$(mktemp)
trap 'rm -f "$defs"' EXIT
for o in "$dir"/*.c.o; do
	f=$(basename "$o" .c.o)
	nm --defined-only -g "$o" | awk -v f="$f" '$3 ~ /^mqp_/ {print $3, f}'
done >"$defs"
[ -s "$defs" ] || { echo "layers_test: no objects in $dir" >&2; exit 1; }
status=0
for o in "$dir"/*.c.o; do
	f=$(basename "$o" .c.o)
	mine=$(echo "$layers" | awk -v f="$f" '$2 == f {print $1}')
	[ -n "$mine" ] || { echo "layers_test: $f.c has no layer in this test (and pool.h)" >&2; status=1; continue; }
	for s in $(nm --undefined-only "$o" | awk '$2 ~ /^mqp_/ {print $2}'); do
		g=$(awk -v s="$s" '$1 == s {print $2}' "$defs")
		[ -n "$g" ] || continue
		theirs=$(echo "$layers" | awk -v g="$g" '$2 == g {print $1}')
		if [ "$theirs" -ge "$mine" ]; then
			echo "layers_test: $f.c (layer $mine) calls $s in $g.c (layer $theirs)" >&2
			status=1
		fi
	done
done
[ $status -eq 0 ] && echo "layers_test: $(wc -l <"$defs") symbols, every call goes down a layer"
exit $status
