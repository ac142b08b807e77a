package gateway

import (
	"fmt"
	"unicode/utf8"
)

// maxEchoedNameBytes bounds a request-supplied name (a model, a Content-Encoding) where
// an answer or a log line repeats it: a body may hold megabytes of `model`, and neither
// a 404 nor a log line should carry them.
const maxEchoedNameBytes = 256

// clipName returns name when it is at most maxEchoedNameBytes long, else its first
// bytes up to that limit, cut at a UTF-8 rune boundary, followed by "… (N bytes)" with
// the whole name's length.
func clipName(name string) string {
	if len(name) <= maxEchoedNameBytes {
		return name
	}
	cut := maxEchoedNameBytes
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", name[:cut], len(name))
}
