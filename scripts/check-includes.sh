#!/usr/bin/env bash
# Prints the cycles between files of src/ and fails if there is any ("a file only calls down",
# docs/design.md). The graph has an edge from file A to file B when
#   - A includes B (#include "dir/b.h"), or
#   - A uses a non-static function or variable that B (a .c file) defines; in a header only
#     uses inside braces (inline functions: code that lives in the header) count, since a
#     prototype declares and does not call, and a macro is pasted into the file that uses it.
# Files that reach each other through these edges form a cycle; each is printed with the edges
# that close it. Usage: scripts/check-includes.sh [src-dir]. Exit status 1 if cycles exist.
# With DT_EDGES_OUT=path it also writes every edge, one "from to why" line each (what
# scripts/check-layers.sh reads to check the folder-level order).
set -euo pipefail
src="${1:-$(dirname "$0")/../src}"
cd "$src"
files=$(find . -name '*.c' -o -name '*.h' | sed 's|^\./||' | LC_ALL=C sort)

# shellcheck disable=SC2086
awk -v edges_out="${DT_EDGES_OUT:-}" '
  # Definitions: a line at column 0 naming dt_... (a function definition, or a variable with
  # external linkage), not static, not a prototype, in a .c file.
  function strip(line) {
    # Comments (the state carries over lines), then string and character literals.
    out = ""
    while (line != "") {
      if (in_comment) {
        i = index(line, "*/")
        if (i == 0) return out
        line = substr(line, i + 2)
        in_comment = 0
        continue
      }
      i = index(line, "/*"); j = index(line, "//")
      if (j > 0 && (i == 0 || j < i)) { out = out substr(line, 1, j - 1); return out }
      if (i == 0) { out = out line; break }
      out = out substr(line, 1, i - 1) " "
      line = substr(line, i + 2)
      in_comment = 1
    }
    gsub(/"([^"\\]|\\.)*"/, "\"\"", out)
    gsub(/\x27([^\x27\\]|\\.)*\x27/, "0", out)
    return out
  }
  FNR == 1 { in_comment = 0; depth = 0; file = FILENAME; is_c = file ~ /\.c$/; nfiles++ }
  {
    if (!in_comment && match($0, /^#[ \t]*include[ \t]*"[^"]+"/)) {
      inc = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", inc); sub(/"$/, "", inc)
      include[file] = include[file] " " inc
      next
    }
    line = strip($0)
    # Definitions in a .c file, at column 0 and not static: a function (the first dt_ name
    # followed by "(" on a line that is not a prototype) or a variable (the name before an
    # optional [size] and = value and the closing ";", or an initializer that opens "{").
    if (is_c && line ~ /^[A-Za-z_]/ && line !~ /^(static|typedef|extern|#)/) {
      name = ""
      if (line !~ /;[ \t]*$/ && match(line, /dt_[A-Za-z0-9_]+[ \t]*\(/)) {
        name = substr(line, RSTART, RLENGTH); sub(/[ \t]*\($/, "", name)
      } else if (line !~ /\(/ && (match(line, /dt__[A-Za-z0-9_]+[ \t]*(\[[^]]*\])?[ \t]*(=.*)?;[ \t]*$/) ||
                                     match(line, /dt__[A-Za-z0-9_]+[ \t]*(\[[^]]*\])?[ \t]*=[ \t]*\{[ \t]*$/))) {
        name = substr(line, RSTART, RLENGTH); sub(/[^A-Za-z0-9_].*$/, "", name)
      }
      if (name != "") {
        if (!(name in definer)) definer[name] = file
        defined_here[file, name] = 1
      }
    }
    rest = line
    counts = is_c || (depth > 0 && line !~ /^#/)
    # A header line that opens a body: what follows the brace is code.
    if (!counts && line !~ /^#/ && (b = index(line, "{")) > 0) { counts = 1; rest = substr(line, b + 1) }
    while (counts && match(rest, /dt_[A-Za-z0-9_]+/)) {
      used[file] = used[file] " " substr(rest, RSTART, RLENGTH)
      rest = substr(rest, RSTART + RLENGTH)
    }
    n = gsub(/\{/, "{", line); m = gsub(/\}/, "}", line); depth += n - m
  }
  END {
    # Nodes and edges.
    for (f in include) {
      k = split(include[f], a, " ")
      for (x = 1; x <= k; x++) if (a[x] != "") edge[f, a[x]] = "includes"
    }
    for (f in used) {
      k = split(used[f], a, " ")
      for (x = 1; x <= k; x++) {
        s = a[x]
        if (s in definer && definer[s] != f && !((f, s) in defined_here) && !((f, definer[s]) in edge))
          edge[f, definer[s]] = "uses " s
      }
    }
    if (edges_out != "") {
      for (e in edge) { split(e, p, SUBSEP); printf "%s %s %s\n", p[1], p[2], edge[e] > edges_out }
      close(edges_out)
    }
    # Reachability by Floyd-Warshall over the files that have edges.
    for (e in edge) { split(e, p, SUBSEP); node[p[1]] = 1; node[p[2]] = 1; reach[p[1], p[2]] = 1 }
    nn = 0; for (v in node) names[++nn] = v
    for (k = 1; k <= nn; k++) { vk = names[k]
      for (i = 1; i <= nn; i++) { vi = names[i]; if (!((vi, vk) in reach)) continue
        for (j = 1; j <= nn; j++) { vj = names[j]; if ((vk, vj) in reach) reach[vi, vj] = 1 } } }
    cycles = 0
    for (i = 1; i <= nn; i++) {
      vi = names[i]; if (vi in done || !((vi, vi) in reach)) continue
      group = ""
      for (j = 1; j <= nn; j++) { vj = names[j]
        if (vj == vi || ((vi, vj) in reach && (vj, vi) in reach)) { done[vj] = 1; group = group " " vj; member[vj] = cycles + 1 } }
      cycles++
      printf "cycle %d:%s\n", cycles, group
      for (e in edge) { split(e, p, SUBSEP)
        if (member[p[1]] == cycles && member[p[2]] == cycles) printf "  %s -> %s (%s)\n", p[1], p[2], edge[e] }
    }
    if (cycles) { printf "%d cycle(s) between files of src/: a file should only call down\n", cycles; exit 1 }
    print "no cycles between files of src/"
  }
' $files
