package kvbm

import (
	"strconv"
	"strings"
)

// blockKeyPrefix starts every key Turbine's own engines (the mock engine) store a KV block
// under: "turbine@<model>@<sequence hash, 16 lower-case hex digits>".
const blockKeyPrefix = "turbine@"

// BlockKey is the key a block of model with the router's sequence hash seqHash
// (kv/hash.go, docs/reference.md §2) is stored under.
func BlockKey(model string, seqHash uint64) string {
	var b strings.Builder
	b.Grow(len(blockKeyPrefix) + len(model) + 17)
	b.WriteString(blockKeyPrefix)
	b.WriteString(model)
	b.WriteByte('@')
	h := strconv.FormatUint(seqHash, 16)
	for i := len(h); i < 16; i++ {
		b.WriteByte('0')
	}
	b.WriteString(h)
	return b.String()
}

// ParseBlockKey is BlockKey's inverse: ok is false for any other key (an LMCache chunk
// key, say), which the store holds as opaque bytes and the inventory does not publish.
func ParseBlockKey(key string) (model string, seqHash uint64, ok bool) {
	if !strings.HasPrefix(key, blockKeyPrefix) {
		return "", 0, false
	}
	rest := key[len(blockKeyPrefix):]
	at := strings.LastIndexByte(rest, '@')
	if at <= 0 || len(rest)-at-1 != 16 {
		return "", 0, false
	}
	h, err := strconv.ParseUint(rest[at+1:], 16, 64)
	if err != nil || strings.ToLower(rest[at+1:]) != rest[at+1:] {
		return "", 0, false
	}
	return rest[:at], h, true
}
