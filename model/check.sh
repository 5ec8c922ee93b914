#!/usr/bin/env bash
# Runs every SPIN model of model/ as its header says (see model/README.md):
#
#   /* check: safety [-Ddefs] */            full search, assertions and
#                                            invalid end states: no error
#   /* check: ltl NAME [-Ddefs] */          the LTL property NAME under
#                                            weak fairness: no error
#   /* bug: BUG_X safety [-Ddefs] */        with -DBUG_X SPIN must report
#   /* bug: BUG_X ltl NAME [-Ddefs] */      an error and write a trail
#
# Every search is exhaustive (no bitstate hashing, -DBITSTATE is never
# used); a search cut short by the depth bound, or one that ran out of
# memory, is a failure. The trail of each bug is replayed (spin -t) and its
# last steps printed, so that a CI log shows what the checker found.
#
# Usage: model/check.sh [MODEL.pml ...]   (default: every model/*.pml)
# Env:   MODEL_OUT=dir keeps pan output and trails there (default: a temp
#        dir, removed at the end); MODEL_DEPTH (default 400000) is pan -m.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
depth="${MODEL_DEPTH:-400000}"
if ! command -v spin >/dev/null 2>&1; then
  echo "model: spin is not installed (apt-get install -y spin)" >&2
  exit 2
fi
if [ -n "${MODEL_OUT:-}" ]; then
  out="$MODEL_OUT"
  mkdir -p "$out"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi

models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=("$here"/*.pml)
fi

failed=0
runs=0
start_all=$(date +%s)

# run MODEL KIND LTLNAME WANT DEFS...
#   KIND is safety or ltl; WANT is pass or fail.
run() {
  local model="$1" kind="$2" ltl="$3" want="$4"
  shift 4
  local name
  name="$(basename "$model" .pml)"
  local tag="$name $kind${ltl:+ $ltl}${*:+ $*}"
  local dir="$out/$name.$runs"
  runs=$((runs + 1))
  mkdir -p "$dir"
  cp "$model" "$dir/"
  local t0 t1
  t0=$(date +%s.%N)
  # A bug run stops at its first error: compiling pan fast matters more
  # than pan running fast.
  local opt=-O2
  [ "$want" = fail ] && opt=-O0
  (
    cd "$dir"
    spin -a "$@" "$name.pml" >spin.out 2>&1
    if [ "$kind" = safety ]; then
      gcc -w $opt -DSAFETY -DMEMLIM=8192 -o pan pan.c
      ./pan -m"$depth" >pan.out 2>&1 || true
    else
      gcc -w $opt -DMEMLIM=8192 -o pan pan.c
      ./pan -a -f -N "$ltl" -m"$depth" >pan.out 2>&1 || true
    fi
  ) || {
    echo "FAIL  $tag: spin or gcc failed"
    sed 's/^/      /' "$dir/spin.out" | tail -20
    failed=$((failed + 1))
    return
  }
  t1=$(date +%s.%N)
  local secs errors states dep
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$dir/pan.out" | tail -1)
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$dir/pan.out" | tail -1)
  dep=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$dir/pan.out" | tail -1)
  local stats="states=${states:-?} depth=${dep:-?} ${secs}s"
  if grep -q "max search depth too small\|out of memory\|pan: reached -DMEMLIM" "$dir/pan.out"; then
    if [ "$want" = pass ]; then
      echo "FAIL  $tag: the search was cut short ($stats)"
      grep -m3 "too small\|memory\|MEMLIM" "$dir/pan.out" | sed 's/^/      /'
      failed=$((failed + 1))
      return
    fi
  fi
  if [ -z "$errors" ]; then
    echo "FAIL  $tag: no verdict from pan"
    tail -20 "$dir/pan.out" | sed 's/^/      /'
    failed=$((failed + 1))
    return
  fi
  if [ "$want" = pass ]; then
    if [ "$errors" = 0 ]; then
      echo "ok    $tag: no error ($stats)"
    else
      echo "FAIL  $tag: $errors error(s) ($stats)"
      grep -m3 "assertion violated\|acceptance cycle\|invalid end state\|pan:" "$dir/pan.out" | sed 's/^/      /'
      replay "$dir" "$name" "$@"
      failed=$((failed + 1))
    fi
  else
    if [ "$errors" != 0 ] && [ -f "$dir/$name.pml.trail" ]; then
      local what
      what=$(grep -m1 "assertion violated\|acceptance cycle\|invalid end state\|non-progress" "$dir/pan.out" | sed 's/^ *//; s/pan:[0-9]*: *//')
      echo "ok    $tag: found (${what:-error}; $stats)"
      replay "$dir" "$name" "$@"
    else
      echo "FAIL  $tag: the bug was not found ($stats)"
      failed=$((failed + 1))
    fi
  fi
}

# replay DIR NAME DEFS...: prints the last steps of the trail. A model's
# hidden variables are made visible for the replay (spin -t refuses some
# of them); the transitions, and so the trail, are the same.
replay() {
  local dir="$1" name="$2"
  shift 2
  (
    cd "$dir"
    sed 's/^hidden //' "$name.pml" >"replay.pml"
    cp "$name.pml.trail" "replay.pml.trail"
    spin -t -p -g -l -k replay.pml.trail "$@" replay.pml >trail.txt 2>&1 || true
    local n
    n=$(grep -c "proc" trail.txt || true)
    echo "      trail: $n steps, last ones:"
    sed '/^#processes/,$d' trail.txt | grep -E "proc|assertion|cycle|spin: " | grep -v "^spin: trail ends" | tail -10 | sed 's/^/        /'
  )
}

for model in "${models[@]}"; do
  while IFS= read -r line; do
    set -- $line
    case "$1" in
    check:)
      if [ "$2" = ltl ]; then
        run "$model" ltl "$3" pass "${@:4}"
      else
        run "$model" safety "" pass "${@:3}"
      fi
      ;;
    bug:)
      bug="$2"
      if [ "$3" = ltl ]; then
        run "$model" ltl "$4" fail "-D$bug" "${@:5}"
      else
        run "$model" safety "" fail "-D$bug" "${@:4}"
      fi
      ;;
    esac
  done < <(sed -n -E 's@^/[*] *((check|bug):.*[^ ]) *[*]/ *$@\1@p' "$model")
done

end_all=$(date +%s)
echo "model: $runs runs, $failed failed, $((end_all - start_all))s"
[ "$failed" = 0 ]
