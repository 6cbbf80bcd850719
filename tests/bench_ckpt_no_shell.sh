#!/bin/sh
# No shell (issue 35 item 3). dtensor bench ckpt once removed its folder with
# system("rm -rf '<dir>/...'"): a quote in --dir ran a command and `x' 'y` removed `x`. Now the
# bench makes its own folder under --dir and removes only that, so with hostile --dir names a
# neighbouring folder and a file the user left in --dir survive, no command runs, and nothing
# of the bench is left. Then scripts/check-no-shell.sh passes on the tree (tests/ included) and
# fails on a tree with a planted system() or popen() call in tools/ or tests/.
# Usage: bench_ckpt_no_shell.sh PATH/TO/dtensor PATH/TO/source-root
set -u
tool=$1
root=$2
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

work=$(mktemp -d /tmp/dt_test_no_shell_XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
mkdir x && echo keep > x/keep
for dir in "x' 'y" "a'; touch pwned; echo '" 'b"$(touch pwned2)"'; do
  mkdir -- "$dir" && echo mine > "$dir/mine"
  if ! "$tool" bench ckpt --size 64K --reps 1 --dir "$dir" > out.txt 2> err.txt; then
    fail "bench ckpt --dir \"$dir\" failed: $(cat err.txt)"
  fi
  grep -q '^world 4, ' out.txt || fail "bench ckpt --dir \"$dir\" printed no world 4 line"
  [ "$(cat "$dir/mine")" = mine ] || fail "the user's file in --dir \"$dir\" was touched"
  left=$(ls -A -- "$dir" | grep -v '^mine$')
  [ -z "$left" ] || fail "bench ckpt left $left in --dir \"$dir\""
done
[ "$(cat x/keep 2>/dev/null)" = keep ] || fail "the folder x beside --dir \"x' 'y\" was removed"
[ ! -e pwned ] && [ ! -e pwned2 ] || fail "a quote in --dir ran a command"

# A missing --dir is refused with a message that names it.
if "$tool" bench ckpt --size 64K --reps 1 --dir missing/sub > out.txt 2> err.txt; then
  fail "bench ckpt --dir missing/sub succeeded"
fi
grep -q "missing/sub" err.txt || fail "the error does not name --dir: $(cat err.txt)"

bash "$root/scripts/check-no-shell.sh" "$root" > out.txt || fail "check-no-shell: $(cat out.txt)"
# A planted call is found in the tool and in the tests alike (tests/ once used a shell too).
for where in tools tests; do
  for call in 'system("ls");' 'FILE *p = popen("ls", "r");'; do
    rm -rf tree && mkdir -p tree/src "tree/$where"
    printf 'void f(void) {\n  %s\n}\n' "$call" > "tree/$where/planted.c"
    printf 'int file_system(void);\nint g(void) { return file_system(); }\n' > tree/src/ok.c
    if bash "$root/scripts/check-no-shell.sh" tree > out.txt; then
      fail "check-no-shell passed a tree calling $call in $where/"
    fi
    grep -q "$where/planted.c:2" out.txt ||
      fail "check-no-shell did not name the call: $(cat out.txt)"
    grep -q 'ok.c' out.txt && fail "check-no-shell flagged file_system()"
  done
done

[ "$failures" -eq 0 ] && echo "bench_ckpt_no_shell: all checks passed"
exit "$failures"
