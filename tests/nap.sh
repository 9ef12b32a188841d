# shellcheck shell=bash
# Sourced by tests/vm/lib.sh and tests/fabric/lib.sh (code that runs in the VM).
# nap SECS: wait SECS on a FIFO nobody writes to (read's timeout), in the shell itself. Under
# TCG a `sleep` costs about 45 ms of CPU to start: a loop polling with `sleep 0.05` kept about
# half of a guest CPU busy (200 of them: 8.8 s of CPU in 19 s, against 0.4 s in 10.5 s with
# nap), and the fabric's agents and `on` poll for the whole run.
nap() {
	if [[ -z ${NAP_FD:-} ]]; then
		local fifo
		fifo=$(mktemp -u /run/nap.XXXXXX)
		mkfifo "$fifo"
		exec {NAP_FD}<>"$fifo"
		rm -f "$fifo"
	fi
	read -rt "$1" -u "$NAP_FD" _ || true
}
