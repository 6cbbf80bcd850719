#!/bin/sh
# The whole C programs the documentation shows compile as written and print what the text
# beside them says: README.md's short example (its `tensor(...)` line) and docs/training.md's
# tensor-parallel training loop (its two losses) and its optimizer state saved without a mesh
# (the two lines it prints). The code and the expected text are both read
# from the documents, so an edit to either that breaks the other fails here.
# Usage: doc_snippets.sh SOURCE_DIR CC LIBDTENSOR_SO WORK_DIR
set -u
src=$1 cc=$2 lib=$3 work=$4
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
mkdir -p "$work" && cd "$work" || exit 1

# The first ```c block after the heading that starts with $2, from file $1.
block_after() {
  awk -v h="$2" 'index($0, h) == 1 { f = 1 } f && /^```c$/ { g = 1; next } g && /^```$/ { exit } g { print }' "$1"
}

# check NAME DOC HEADING EXPECTED...: compile the block, run it, look for each expected line.
check() {
  name=$1 doc=$2 heading=$3
  shift 3
  block_after "$src/$doc" "$heading" > "$work/$name.c"
  if [ ! -s "$work/$name.c" ]; then
    fail "$doc: no \`\`\`c block after '$heading'"
    return
  fi
  if ! "$cc" -std=c11 -Wall -Wextra -Werror -I"$src/include" "$work/$name.c" "$lib" \
      -Wl,-rpath,"$(dirname "$lib")" -o "$work/$name" 2> "$work/$name.err"; then
    fail "$doc ('$heading') does not compile:"
    cat "$work/$name.err" >&2
    return
  fi
  if ! "$work/$name" > "$work/$name.out" 2>&1; then
    fail "$doc ('$heading') exits non-zero:"
    cat "$work/$name.out" >&2
    return
  fi
  for want in "$@"; do
    grep -qxF "$want" "$work/$name.out" || fail "$doc ('$heading') prints no line '$want' (got: $(cat "$work/$name.out"))"
  done
}

# The expected text, as the documents state it (the backquoted text after "prints").
readme_out=$(grep -o 'It prints `tensor([^`]*`' "$src/README.md" | sed 's/^It prints `//; s/`$//')
[ -n "$readme_out" ] || fail "README.md: no 'It prints \`tensor(...)\`' sentence"
check readme_quick README.md "## A short example" "$readme_out"

tp_out=$(grep -o 'It prints `step 0 loss [0-9.]*` and `step 1 loss [0-9.]*`' "$src/docs/training.md")
tp0=$(echo "$tp_out" | sed 's/^It prints `\([^`]*\)`.*/\1/')
tp1=$(echo "$tp_out" | sed 's/.*and `\([^`]*\)`$/\1/')
[ -n "$tp_out" ] || fail "docs/training.md: no 'It prints \`step 0 loss ...\` and \`step 1 loss ...\`' sentence"
check training_tp docs/training.md "## Tensor parallelism: a training loop" "$tp0" "$tp1"

# The optimizer state of a program without a mesh, and the lr read after a step (the next
# step's). It writes its checkpoint into ./optim_ckpt, inside the work folder (the cd above).
optim_out=$(grep -o 'It prints `step 1 used lr [^`]*` and `resumed after [^`]*`' "$src/docs/training.md")
optim0=$(echo "$optim_out" | sed 's/^It prints `\([^`]*\)`.*/\1/')
optim1=$(echo "$optim_out" | sed 's/.*and `\([^`]*\)`$/\1/')
[ -n "$optim_out" ] || fail "docs/training.md: no 'It prints \`step 1 used lr ...\` and \`resumed ...\`' sentence"
check optim_no_mesh docs/training.md "### Saving the optimizer state without a mesh" "$optim0" \
  "$optim1"

[ "$failures" -eq 0 ] && echo "doc snippets: ok"
exit "$failures"
