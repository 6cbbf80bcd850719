#!/bin/sh
# dtensor bench dispatch runs at uneven and large world sizes (issue 43 item 7): 3 and 8 rank
# threads (3 split 512 rows unevenly; 2 x 4 has shards of different local shapes), and 4096 on
# the fake backend alone, each printing its rows as JSON; 4097 is refused by name.
set -eu
tool=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for w in 3 8 4096; do
  "$tool" bench dispatch --world "$w" --json > "$out/$w.json"
  rows=$(grep -c "\"world\":$w," "$out/$w.json" || true)
  if [ "$rows" -lt 6 ]; then
    echo "bench dispatch --world $w printed $rows rows:"
    cat "$out/$w.json"
    exit 1
  fi
done
grep -q '"backend":"fake","device":"cpu","world":4096,"mesh":\[2,2048\]' "$out/4096.json" || {
  echo "no 2-D fake rows at world 4096"
  exit 1
}
if "$tool" bench dispatch --world 4097 > "$out/bad" 2>&1; then
  echo "--world 4097 was accepted"
  exit 1
fi
grep -q "world must be 1..4096" "$out/bad"
echo "bench dispatch: worlds 3, 8 and 4096 ran"
