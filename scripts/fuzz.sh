#!/usr/bin/env bash
# fuzz.sh runs every native Go fuzz target of the module for a short fixed
# time and prints each target's execution count.
#
# Targets are the Fuzz functions of the test files `go list` selects;
# each runs on its own, since -fuzz takes one target of one package. Each
# package's instrumented test binary is built once (`go test -c -fuzz .`),
# two packages at a time before the first target runs,
# and run for each of its targets from the package's directory, with the
# flags `go test -run '^$' -fuzz '^Name$' -fuzztime $FUZZTIME pkg` gives
# it, so the corpus and the cache are the ones go test uses. `make test`
# runs it after the unit tests, which already ran every seed corpus.
#
# Environment:
#   FUZZTIME  time per target (default 5s; any -fuzztime value, e.g. 30s
#             or 10000x)
#   FUZZ_RUN  only run targets whose "pkg.Name" matches this extended
#             regular expression (default: all)
#
# Exit status: 1 if any target failed (a crasher is written to the
# package's testdata/fuzz/<Name>/ by the go tool), else 0. A target that
# fails only with the fuzz engine's own race at the end of -fuzztime
# (go.dev/issue/75804, in Go before 1.27) runs once more, and fails if
# that run fails too.
set -euo pipefail

FUZZTIME="${FUZZTIME:-5s}"
FUZZ_RUN="${FUZZ_RUN:-}"
GO="${GO:-go}"

cd "$(dirname "$0")/.."

log() { printf 'fuzz: %s\n' "$*" >&2; }

# List "pkg Name" pairs: the Fuzz functions of the test files that go
# list selects for this platform. (go test -list would compile and link
# every package's test binary only to print names.)
targets=()
while read -r pkg dir files; do
	for f in $files; do
		while IFS= read -r name; do
			targets+=("$pkg $dir $name")
		done < <(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*\*testing\.F\).*/\1/p' "$dir/$f")
	done
done < <("$GO" list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./...)

if [ "${#targets[@]}" -eq 0 ]; then
	log "no fuzz targets found"
	exit 1
fi

bindir="$(mktemp -d)"
trap 'rm -rf "$bindir"' EXIT
fuzzcache="$("$GO" env GOCACHE)/fuzz"

# binary PKG prints the path of PKG's fuzz test binary, building it the
# first time; it fails, printing the build's output, when the build does.
binary() {
	local bin="$bindir/${1//\//_}.test"
	if ! [ -x "$bin" ]; then
		"$GO" test -c -fuzz . -o "$bin" "$1" 2>&1 || return 1
	fi
	printf '%s\n' "$bin"
}

# prebuild builds the fuzz test binaries of the packages PKG..., two at
# a time (go test takes -fuzz for one package only), and names each as
# binary does; a package whose build fails is left to binary, which
# builds it again and reports the build's output.
prebuild() {
	printf '%s\n' "$@" | xargs -P 2 -I{} sh -c \
		'"$1" test -c -fuzz . -o "$2/$(printf %s "$3" | tr / _).test" "$3" >/dev/null 2>&1 || true' \
		prebuild "$GO" "$bindir" {}
}

# fuzz_one PKG DIR NAME fuzzes one target for FUZZTIME and prints what the
# test binary (or its build) said.
fuzz_one() {
	local bin
	bin="$(binary "$1")" || { printf '%s\n' "$bin"; return 1; }
	(cd "$2" && "$bin" -test.run '^$' -test.fuzz "^${3}\$" -test.fuzztime "$FUZZTIME" \
		-test.fuzzcachedir "$fuzzcache/$1" -test.paniconexit0 2>&1)
}

# deadline_race reports whether a failed run's output is the fuzz engine's
# own race at the end of a -fuzztime duration (Go before 1.27,
# go.dev/issue/75804): the target "fails" with the bare error "context
# deadline exceeded" and no input was found. A real finding always says
# "Failing input written to", and a panic or t.Error prints more than the
# one error line.
deadline_race() {
	grep -q 'context deadline exceeded' <<<"$1" &&
		! grep -q 'Failing input written' <<<"$1" &&
		! grep -qE 'panic:|_test\.go:[0-9]+:' <<<"$1"
}

selected() {
	[ -z "$FUZZ_RUN" ] || grep -Eq "$FUZZ_RUN" <<<"$1"
}

start=$SECONDS
pkgs=()
for t in "${targets[@]}"; do
	read -r pkg dir name <<<"$t"
	if selected "$pkg.$name" && ! [[ " ${pkgs[*]} " == *" $pkg "* ]]; then
		pkgs+=("$pkg")
	fi
done
if [ "${#pkgs[@]}" -gt 1 ]; then
	prebuild "${pkgs[@]}"
fi

failed=0
ran=0
for t in "${targets[@]}"; do
	read -r pkg dir name <<<"$t"
	if ! selected "$pkg.$name"; then
		continue
	fi
	ran=$((ran + 1))
	t0=$SECONDS
	note=""
	if out=$(fuzz_one "$pkg" "$dir" "$name"); then
		status=ok
	elif deadline_race "$out"; then
		# The toolchain's race at the end of -fuzztime (see deadline_race):
		# nothing was found, so run the target once more.
		note=" (rerun after the fuzz engine's end-of-time race, go.dev/issue/75804)"
		if out=$(fuzz_one "$pkg" "$dir" "$name"); then
			status=ok
		else
			status=FAIL
		fi
	else
		status=FAIL
	fi
	if [ "$status" = FAIL ]; then
		failed=$((failed + 1))
	fi
	execs=$(grep -o 'execs: [0-9]*' <<<"$out" | tail -n 1 | awk '{print $2}' || true)
	if [ -z "$execs" ] && [ "$status" = ok ]; then
		# The time ran out while the seed corpus was being run for
		# baseline coverage: nothing was mutated.
		baseline=$(grep -o 'baseline coverage: [0-9]*/[0-9]*' <<<"$out" | tail -n 1 | awk '{print $3}' || true)
		note="$note (only ${baseline:-?} seed entries run for baseline coverage; raise FUZZTIME to mutate)"
	fi
	printf 'fuzz: %-4s %s %s: %s execs in %s (%ds with build)%s\n' \
		"$status" "$pkg" "$name" "${execs:-0}" "$FUZZTIME" "$((SECONDS - t0))" "$note"
	if [ "$status" = FAIL ]; then
		grep -v '^fuzz: elapsed' <<<"$out" | tail -n 30 >&2
	fi
done
log "$ran targets, $failed failed, ${FUZZTIME} each, $((SECONDS - start))s in total"
[ "$failed" -eq 0 ]
