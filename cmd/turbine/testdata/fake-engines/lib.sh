# Shared by the stand-in engine executables of this folder (sourced, not run).
#
# Environment:
#   TURBINE_MOCKER_BIN     the turbine binary whose `mocker` subcommand plays the engine
#                          (required by the engines that serve)
#   FAKE_ENGINE_ARGS_DIR   when set, each start writes <dir>/<name>.<pid>.env (the
#                          CUDA_VISIBLE_DEVICES it was given) and then <dir>/<name>.<pid>.argv
#                          (its argv, one argument per line, argv[0] first)
#   FAKE_ENGINE_SPEEDUP    the mock engine's --speedup-ratio (default 10)

# record NAME ARGV...: writes the start's environment and argv files.
record() {
	local name=$1
	shift
	[ -n "${FAKE_ENGINE_ARGS_DIR:-}" ] || return 0
	local f="$FAKE_ENGINE_ARGS_DIR/$name.$$"
	printf 'CUDA_VISIBLE_DEVICES=%s\n' "${CUDA_VISIBLE_DEVICES-<unset>}" >"$f.env"
	printf '%s\n' "$@" >"$f.argv.tmp"
	mv "$f.argv.tmp" "$f.argv"
}

# fail MESSAGE: refuses an invocation the real engine would not get from turbine.
fail() {
	echo "fake engine $0: $1" >&2
	exit 2
}

# run_mocker ARGS...: replaces this process with the mock engine. Requests run to their
# max_tokens (a huge mean output length), so that a test can cancel one mid-stream; the
# debug log level makes aborts visible in the worker's log ("request aborted").
run_mocker() {
	exec "${TURBINE_MOCKER_BIN:?set TURBINE_MOCKER_BIN to the turbine binary}" mocker "$@" \
		--speedup-ratio "${FAKE_ENGINE_SPEEDUP:-10}" --mean-output-tokens 1000000 \
		--log-level debug --log-format json
}
