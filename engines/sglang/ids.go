package sglang

import (
	"fmt"
	"math"
)

// idList reads a JSON array of token ids without decoding the ids it skips: with
// cumulative streaming each chunk repeats every id sent before, and only the tail is new.
//
// It returns the ids after the first skip, the array's length and the id at position
// skip-1 (0 when skip is 0). Errors: not an array of integers in 0..2^32-1.
func idList(raw []byte, skip int) (tail []uint32, n int, before uint32, err error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, 0, 0, fmt.Errorf("output_ids: want an array, got %.40q", raw)
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return nil, 0, 0, trailing(raw, i+1)
	}
	for {
		var v uint64
		start := i
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			v = v*10 + uint64(raw[i]-'0')
			if v > math.MaxUint32 {
				return nil, 0, 0, fmt.Errorf("output_ids[%d]: out of range", n)
			}
			i++
		}
		if i == start || (raw[start] == '0' && i-start > 1) {
			return nil, 0, 0, fmt.Errorf("output_ids[%d]: want a token id", n)
		}
		switch {
		case n < skip-1:
		case n == skip-1:
			before = uint32(v)
		default:
			tail = append(tail, uint32(v))
		}
		n++
		i = skipSpace(raw, i)
		if i >= len(raw) {
			return nil, 0, 0, fmt.Errorf("output_ids: unterminated array")
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case ']':
			return tail, n, before, trailing(raw, i+1)
		default:
			return nil, 0, 0, fmt.Errorf("output_ids[%d]: unexpected %q", n, raw[i])
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func trailing(b []byte, i int) error {
	if skipSpace(b, i) != len(b) {
		return fmt.Errorf("output_ids: data after the array")
	}
	return nil
}
