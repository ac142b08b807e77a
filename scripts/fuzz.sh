#!/usr/bin/env bash
# Runs every fuzz target of the module (or those matching a pattern) for a fixed number
# of executions each, one after the other, and prints a line per target and a summary.
#
#   scripts/fuzz.sh [--execs N] [--parallel P] [--minimize-time T] [--out FILE] [PATTERN]
#
# --execs     executions per target (default 1000000; `task fuzz`), counted by go test's
#             -fuzztime Nx over all its workers
# --parallel  fuzzing workers per target (default: the machine's cores)
# --minimize-time
#             go test's -fuzzminimizetime (default 60s; "1x" keeps new corpus entries
#             as found): a target whose coverage depends on goroutine timing finds
#             "new" inputs all the time, and minimizing each stalls its run for a minute
# --out       also write the per-target results as TSV (package, target, executions,
#             seconds, executions/s, new corpus entries, result)
# PATTERN     an extended regular expression matched against "package.FuzzName"
#
# A failing target leaves its input under the package's testdata/fuzz/<target>/ (go
# test's corpus), so that `go test` replays it from then on; the script goes on with the
# others and exits 1 at the end. Exit 0: every target ran its executions with no failure.
set -euo pipefail
cd "$(dirname "$0")/.."
execs=1000000
parallel=$(nproc)
minimize=60s
out=""
pattern=""
while [ $# -gt 0 ]; do
	case "$1" in
	--execs) execs="$2"; shift 2 ;;
	--parallel) parallel="$2"; shift 2 ;;
	--out) out="$2"; shift 2 ;;
	--minimize-time) minimize="$2"; shift 2 ;;
	-h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
	*) pattern="$1"; shift ;;
	esac
done
case "$execs" in "" | 0 | *[!0-9]*) echo "fuzz.sh: --execs must be a positive integer" >&2; exit 2 ;; esac
case "$parallel" in "" | 0 | *[!0-9]*) echo "fuzz.sh: --parallel must be a positive integer" >&2; exit 2 ;; esac
case "$minimize" in *[0-9]s | *[0-9]x | *[0-9]m) ;; *) echo "fuzz.sh: --minimize-time must be like 60s, 2m or 1x" >&2; exit 2 ;; esac
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"

# Packages that declare fuzz targets, then the targets each lists.
mapfile -t pkgs < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . |
	xargs -n1 dirname | sort -u | sed 's|^\./||')
targets=()
for dir in "${pkgs[@]}"; do
	pkg="./$dir"
	while read -r name; do
		case "$name" in Fuzz*) ;; *) continue ;; esac
		if [ -n "$pattern" ] && ! grep -qE -- "$pattern" <<<"$dir.$name"; then
			continue
		fi
		targets+=("$pkg $name")
	done < <(go test -list '^Fuzz' "$pkg" 2>/dev/null)
done
if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz.sh: no fuzz target matches '${pattern}'" >&2
	exit 2
fi
[ -n "$out" ] && printf 'package\ttarget\texecutions\tseconds\texecs_per_s\tnew_corpus\tresult\n' >"$out"

failed=0
total=0
start=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "fuzz: ${#targets[@]} targets, ${execs} executions each, ${parallel} workers, minimizing for ${minimize}"
for t in "${targets[@]}"; do
	pkg=${t% *}
	name=${t#* }
	t0=$SECONDS
	# -timeout 0: go test's default of 10 minutes would end a slow target's run as a failure.
	if go test -run '^$' -fuzz "^${name}\$" -fuzztime "${execs}x" -fuzzminimizetime "$minimize" -parallel "$parallel" -timeout 0 "$pkg" >"$log" 2>&1; then
		result=ok
	else
		result=FAIL
		failed=$((failed + 1))
	fi
	secs=$((SECONDS - t0))
	# go test's progress lines: "fuzz: elapsed: 3s, execs: 123456 (41152/sec), new interesting: 2 (total: 40)"
	ran=$(grep -oE 'execs: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || true)
	newc=$(grep -oE 'new interesting: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || true)
	ran=${ran:-0}
	newc=${newc:-0}
	rate=0
	[ "$secs" -gt 0 ] && rate=$((ran / secs))
	total=$((total + ran))
	printf '%-4s %-28s %-40s %10s execs %5ss %8s/s\n' "$result" "${pkg#./}" "$name" "$ran" "$secs" "$rate"
	[ -n "$out" ] && printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${pkg#./}" "$name" "$ran" "$secs" "$rate" "$newc" "$result" >>"$out"
	if [ "$result" = FAIL ]; then
		sed 's/^/    /' "$log" | tail -n 40
	fi
done
echo "fuzz: targets ${#targets[@]}, failed ${failed}, executions ${total}, ${execs} asked per target, $((SECONDS - start)) s"
[ "$failed" -eq 0 ]
