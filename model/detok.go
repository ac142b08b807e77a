package model

import "unicode/utf8"

func (d *Detokenizer) push(ids []uint32) string {
	buf := d.pending
	for _, id := range ids {
		if d.skipSpecial && d.tok.IsSpecial(id) {
			continue
		}
		if b, ok := d.tok.TokenBytes(id); ok {
			buf = append(buf, b...)
		}
	}
	// Keep an incomplete character at the end; everything before it is decided: whole
	// characters, and ill-formed bytes that no later byte can complete (U+FFFD).
	keep := partialTail(buf)
	ready := buf[:len(buf)-keep]
	var out string
	if validPrefix(ready) == len(ready) {
		out = string(ready)
	} else {
		out = string(appendValidUTF8(make([]byte, 0, len(ready)+utf8.UTFMax), ready))
	}
	d.pending = append(d.pending[:0], buf[len(buf)-keep:]...)
	return out
}

func (d *Detokenizer) flush() string {
	out := string(appendValidUTF8(nil, d.pending))
	d.pending = d.pending[:0]
	return out
}
