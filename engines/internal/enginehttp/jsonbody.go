package enginehttp

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// The writers below build JSON request bodies by hand, so that token-id arrays, the bulk
// of a request, are written without reflection. They append to b and return it.

// Key appends member name k of the object being written, with the comma before it unless
// the object was just opened ('{' is b's last byte). b must not be empty.
func Key(b []byte, k string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = String(b, k)
	return append(b, ':')
}

// String appends s as a JSON string.
func String(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // cannot fail for a string
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// IDs appends a JSON array of token ids.
func IDs(b []byte, ids []uint32) []byte {
	b = slices.Grow(b, 2+len(ids)*7) // ids below 10^6 and a comma each; appendID grows past
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendID(b, id)
	}
	return append(b, ']')
}

// digitPairs holds "00" to "99".
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// appendID appends v in decimal: strconv.AppendUint's digits (TestAppendID), two at a
// time, written in place without its call for every id.
func appendID(b []byte, v uint32) []byte {
	n := 1
	for p := uint32(10); n < 10 && v >= p; p *= 10 {
		n++
	}
	b = slices.Grow(b, n)
	o := len(b)
	b = b[:o+n]
	d := b[o : o+n]
	j := n
	for v >= 100 {
		q := v / 100
		r := (v - q*100) * 2
		j -= 2
		d[j], d[j+1] = digitPairs[r], digitPairs[r+1]
		v = q
	}
	if v >= 10 {
		d[0], d[1] = digitPairs[v*2], digitPairs[v*2+1]
	} else {
		d[0] = byte('0' + v)
	}
	return b
}

// Int appends member k with the integer v.
func Int(b []byte, k string, v int64) []byte {
	return strconv.AppendInt(Key(b, k), v, 10)
}

// Float appends member k with the number v. Errors: v is NaN or infinite (naming k).
func Float(b []byte, k string, v float64) ([]byte, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("%s: %v is not a finite number", k, v)
	}
	return strconv.AppendFloat(Key(b, k), v, 'g', -1, 64), nil
}

// Extra appends the members of extra whose names own does not claim, in name order, each
// value as encoding/json writes it. Errors: a value encoding/json refuses (naming its
// member).
func Extra(b []byte, extra map[string]any, own map[string]bool) ([]byte, error) {
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if !own[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, err := json.Marshal(extra[k])
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", k, err)
		}
		b = append(Key(b, k), v...)
	}
	return b, nil
}
