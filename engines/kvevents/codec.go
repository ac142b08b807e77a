package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/turbine-llm/turbine/kv"
)

// Event type tags on the wire (the msgspec struct names of vLLM's event classes).
const (
	TagBlockStored      = "BlockStored"
	TagBlockRemoved     = "BlockRemoved"
	TagAllBlocksCleared = "AllBlocksCleared"
)

// MaxPayloadBytes bounds a payload the decoder accepts (64 MiB).
const MaxPayloadBytes = 64 << 20

// maxDepth bounds the nesting of unknown values the decoder skips.
const maxDepth = 32

// SeqFrameLen is the length in bytes of the sequence-number frame.
const SeqFrameLen = 8

// EncodePayload returns the msgpack payload of b in the array form
// [ts, [events...], data_parallel_rank] (rank nil when b.DataParallelRank < 0).
// b.Seq is not part of the payload (it travels in its own frame).
//
// Errors: an event of unknown kind, or a BlockStored with BlockSize <= 0 or whose
// TokenIDs do not hold exactly BlockSize tokens per block.
func EncodePayload(b kv.Batch) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := encodeBatch(enc, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EncodeMessage returns the three ZeroMQ frames of b: topic, 8-byte big-endian b.Seq,
// and the payload of EncodePayload.
func EncodeMessage(topic string, b kv.Batch) ([][]byte, error) {
	payload, err := EncodePayload(b)
	if err != nil {
		return nil, err
	}
	seq := make([]byte, SeqFrameLen)
	binary.BigEndian.PutUint64(seq, b.Seq)
	return [][]byte{[]byte(topic), seq, payload}, nil
}

func encodeBatch(enc *msgpack.Encoder, b kv.Batch) error {
	for i := range b.Events {
		if err := validateEvent(&b.Events[i]); err != nil {
			return fmt.Errorf("kvevents: encode event %d: %w", i, err)
		}
	}
	w := errWriter{enc: enc}
	w.arrayLen(3)
	w.float64(b.Timestamp)
	w.arrayLen(len(b.Events))
	for i := range b.Events {
		encodeEvent(&w, &b.Events[i])
	}
	if b.DataParallelRank < 0 {
		w.nil()
	} else {
		w.int(int64(b.DataParallelRank))
	}
	if w.err != nil {
		return fmt.Errorf("kvevents: encode: %w", w.err)
	}
	return nil
}

func validateEvent(e *kv.Event) error {
	switch e.Kind {
	case kv.BlockStored:
		if e.BlockSize <= 0 {
			return fmt.Errorf("BlockStored with block size %d", e.BlockSize)
		}
		if len(e.TokenIDs) != len(e.EngineHashes)*e.BlockSize {
			return fmt.Errorf("BlockStored with %d token ids for %d blocks of %d tokens",
				len(e.TokenIDs), len(e.EngineHashes), e.BlockSize)
		}
	case kv.BlockRemoved, kv.AllBlocksCleared:
	default:
		return fmt.Errorf("unknown event kind %d", e.Kind)
	}
	return nil
}

func encodeEvent(w *errWriter, e *kv.Event) {
	switch e.Kind {
	case kv.BlockStored:
		if e.CacheSalt != "" && !e.HasParent {
			w.arrayLen(9) // and extra_keys
		} else {
			w.arrayLen(8)
		}
		w.str(TagBlockStored)
		w.hashes(e.EngineHashes)
		if e.HasParent {
			w.uint(e.ParentHash)
		} else {
			w.nil()
		}
		w.arrayLen(len(e.TokenIDs))
		for _, t := range e.TokenIDs {
			w.uint(uint64(t))
		}
		w.int(int64(e.BlockSize))
		w.nil() // lora_id: Turbine names adapters; the deprecated integer id is not known.
		w.strOrNil(e.Medium)
		w.strOrNil(e.LoraName)
		if e.CacheSalt != "" && !e.HasParent {
			encodeExtraKeys(w, e)
		}
	case kv.BlockRemoved:
		w.arrayLen(3)
		w.str(TagBlockRemoved)
		w.hashes(e.EngineHashes)
		w.strOrNil(e.Medium)
	case kv.AllBlocksCleared:
		w.arrayLen(1)
		w.str(TagAllBlocksCleared)
	}
}

// encodeExtraKeys writes vLLM's extra_keys of a salted BlockStored that starts a
// sequence: one entry per block, the first [lora_name, cache_salt] (without lora_name for
// the base model), the others [lora_name] or nil, as vLLM's block hashing keys them
// (docs/reference.md §1).
func encodeExtraKeys(w *errWriter, e *kv.Event) {
	w.arrayLen(len(e.EngineHashes))
	for i := range e.EngineHashes {
		switch {
		case i == 0 && e.LoraName != "":
			w.arrayLen(2)
			w.str(e.LoraName)
			w.str(e.CacheSalt)
		case i == 0:
			w.arrayLen(1)
			w.str(e.CacheSalt)
		case e.LoraName != "":
			w.arrayLen(1)
			w.str(e.LoraName)
		default:
			w.nil()
		}
	}
}

// errWriter keeps the first encoder error so the layout code above reads straight.
type errWriter struct {
	enc *msgpack.Encoder
	err error
}

func (w *errWriter) do(err error) {
	if w.err == nil {
		w.err = err
	}
}
func (w *errWriter) arrayLen(n int)     { w.do(w.enc.EncodeArrayLen(n)) }
func (w *errWriter) float64(f float64)  { w.do(w.enc.EncodeFloat64(f)) }
func (w *errWriter) nil()               { w.do(w.enc.EncodeNil()) }
func (w *errWriter) int(n int64)        { w.do(w.enc.EncodeInt(n)) }
func (w *errWriter) uint(n uint64)      { w.do(w.enc.EncodeUint(n)) }
func (w *errWriter) str(s string)       { w.do(w.enc.EncodeString(s)) }
func (w *errWriter) hashes(hs []uint64) { w.arrayLen(len(hs)); w.uints(hs) }
func (w *errWriter) uints(hs []uint64) {
	for _, h := range hs {
		w.uint(h)
	}
}
func (w *errWriter) strOrNil(s string) {
	if s == "" {
		w.nil()
	} else {
		w.str(s)
	}
}

// DecodeMessage decodes the three frames of one ZeroMQ message (topic, 8-byte big-endian
// sequence number, msgpack payload) into the topic and the batch, Seq included.
func DecodeMessage(frames [][]byte) (topic string, b kv.Batch, err error) {
	if len(frames) != 3 {
		return "", kv.Batch{}, fmt.Errorf("kvevents: message has %d frames, want 3 (topic, seq, payload)", len(frames))
	}
	if len(frames[1]) != SeqFrameLen {
		return "", kv.Batch{}, fmt.Errorf("kvevents: sequence frame has %d bytes, want %d", len(frames[1]), SeqFrameLen)
	}
	b, err = DecodePayload(frames[2])
	if err != nil {
		return "", kv.Batch{}, err
	}
	b.Seq = binary.BigEndian.Uint64(frames[1])
	return string(frames[0]), b, nil
}

func isIntCode(c byte) bool {
	if msgpcode.IsFixedNum(c) {
		return true
	}
	switch c {
	case msgpcode.Uint8, msgpcode.Uint16, msgpcode.Uint32, msgpcode.Uint64,
		msgpcode.Int8, msgpcode.Int16, msgpcode.Int32, msgpcode.Int64:
		return true
	}
	return false
}

func isArrayCode(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMapCode(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

func isStrCode(c byte) bool {
	return msgpcode.IsFixedString(c) || c == msgpcode.Str8 || c == msgpcode.Str16 || c == msgpcode.Str32
}

func isBinCode(c byte) bool {
	return c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32
}

func describe(c byte) string {
	switch {
	case c == msgpcode.Nil:
		return "nil"
	case isIntCode(c):
		return "integer"
	case isArrayCode(c):
		return "array"
	case isMapCode(c):
		return "map"
	case isStrCode(c):
		return "string"
	case isBinCode(c):
		return "bytes"
	case c == msgpcode.Float || c == msgpcode.Double:
		return "float"
	case c == msgpcode.True || c == msgpcode.False:
		return "bool"
	default:
		return fmt.Sprintf("msgpack code 0x%02x", c)
	}
}

// DecodePayload decodes one msgpack event batch in either form (see the package
// documentation). Batch.Seq is left 0; DataParallelRank is -1 when the engine sent nil
// or nothing. Event types it does not know are skipped.
//
// The events' EngineHashes share one backing array, and so do their TokenIDs (each
// capped at its own length, so appending to one never writes into another). Nothing
// refers to payload after the call. Safe for concurrent use.
func DecodePayload(payload []byte) (kv.Batch, error) {
	if len(payload) > MaxPayloadBytes {
		return kv.Batch{}, fmt.Errorf("kvevents: payload of %d bytes exceeds %d", len(payload), MaxPayloadBytes)
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	r := reader{p: payload, sc: sc}
	b, err := r.batch()
	if err != nil {
		return kv.Batch{}, fmt.Errorf("kvevents: decode payload: %w", err)
	}
	if r.left() != 0 {
		return kv.Batch{}, fmt.Errorf("kvevents: decode payload: %d trailing bytes after the batch", r.left())
	}
	return b, nil
}

// span locates an event's hashes or token ids in the scratch buffers while a batch is
// decoded; n < 0 means the field is absent (a nil slice in the event).
type span struct{ off, n int }

var absent = span{n: -1}

// scratch collects the hashes and token ids of a batch as it is decoded, so that the
// batch can then hold them in one exactly sized slice each. Kept in a pool.
type scratch struct {
	hashes []uint64
	tokens []uint32
	refs   []eventRefs // one per decoded (kept) event
}

type eventRefs struct{ hashes, tokens span }

// maxPooledTokens bounds the scratch kept for reuse (token ids; hashes scale with it).
const maxPooledTokens = 1 << 20

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (sc *scratch) release() {
	if cap(sc.tokens) > maxPooledTokens || cap(sc.hashes) > maxPooledTokens || cap(sc.refs) > maxPooledTokens {
		return
	}
	sc.hashes, sc.tokens, sc.refs = sc.hashes[:0], sc.tokens[:0], sc.refs[:0]
	scratchPool.Put(sc)
}

// reader decodes msgpack straight from the payload bytes: no copies, no boxing.
type reader struct {
	p  []byte
	i  int // next byte
	sc *scratch
}

var errTruncatedInput = errors.New("truncated input")

func (r *reader) left() int { return len(r.p) - r.i }

func (r *reader) peek() (byte, error) {
	if r.i >= len(r.p) {
		return 0, errTruncatedInput
	}
	return r.p[r.i], nil
}

// take consumes n bytes and returns them (aliasing the payload).
func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, errTruncatedInput
	}
	b := r.p[r.i : r.i+n : r.i+n]
	r.i += n
	return b, nil
}

// uintN consumes an n-byte (1, 2, 4 or 8) big-endian unsigned integer.
func (r *reader) uintN(n int) (uint64, error) {
	b, err := r.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
	return binary.BigEndian.Uint64(b), nil
}

// intBits consumes an integer whose code c (already checked with isIntCode) is next and
// returns its 64 bits: zero-extended for unsigned codes, sign-extended for signed ones.
func (r *reader) intBits(c byte) (uint64, error) {
	if msgpcode.IsFixedNum(c) {
		r.i++
		return uint64(int64(int8(c))), nil // positive fixnums are < 0x80
	}
	r.i++
	switch c {
	case msgpcode.Uint8:
		return r.uintN(1)
	case msgpcode.Uint16:
		return r.uintN(2)
	case msgpcode.Uint32:
		return r.uintN(4)
	case msgpcode.Uint64:
		return r.uintN(8)
	case msgpcode.Int8:
		v, err := r.uintN(1)
		return uint64(int64(int8(v))), err
	case msgpcode.Int16:
		v, err := r.uintN(2)
		return uint64(int64(int16(v))), err
	case msgpcode.Int32:
		v, err := r.uintN(4)
		return uint64(int64(int32(v))), err
	}
	return r.uintN(8) // Int64
}

// length checks a container or string length against the bytes left: every element
// takes at least minBytes bytes, so a longer claim is malformed (and must not allocate).
func (r *reader) length(n, minBytes int) error {
	if n < 0 || uint64(n)*uint64(minBytes) > uint64(r.left()) {
		return fmt.Errorf("length %d exceeds the %d bytes left", n, r.left())
	}
	return nil
}

// containerLen consumes the header of an array or map whose code c is next.
func (r *reader) containerLen(c byte) (int, error) {
	r.i++
	var n uint64
	var err error
	switch c {
	case msgpcode.Array16, msgpcode.Map16:
		n, err = r.uintN(2)
	case msgpcode.Array32, msgpcode.Map32:
		n, err = r.uintN(4)
	default: // fixarray, fixmap
		n = uint64(c & 0x0f)
	}
	return int(n), err
}

// bytesLen consumes the header of a string or bytes value whose code c is next.
func (r *reader) bytesLen(c byte) (int, error) {
	r.i++
	var n uint64
	var err error
	switch c {
	case msgpcode.Str8, msgpcode.Bin8:
		n, err = r.uintN(1)
	case msgpcode.Str16, msgpcode.Bin16:
		n, err = r.uintN(2)
	case msgpcode.Str32, msgpcode.Bin32:
		n, err = r.uintN(4)
	default: // fixstr
		n = uint64(c & msgpcode.FixedStrMask)
	}
	return int(n), err
}

func (r *reader) arrayLen(what string) (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if !isArrayCode(c) {
		return 0, fmt.Errorf("%s: want array, got %s", what, describe(c))
	}
	n, err := r.containerLen(c)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if err := r.length(n, 1); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// mapLen consumes the header of the map whose code c is next and checks its length.
func (r *reader) mapLen(what string, c byte) (int, error) {
	n, err := r.containerLen(c)
	if err != nil {
		return 0, err
	}
	if err := r.length(n, 2); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// isNil consumes a nil if one is next.
func (r *reader) isNil() (bool, error) {
	c, err := r.peek()
	if err != nil {
		return false, err
	}
	if c != msgpcode.Nil {
		return false, nil
	}
	r.i++
	return true, nil
}

func (r *reader) int64(what string) (int64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if !isIntCode(c) {
		return 0, fmt.Errorf("%s: want integer, got %s", what, describe(c))
	}
	u, err := r.intBits(c)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if c == msgpcode.Uint64 && u > math.MaxInt64 {
		return 0, fmt.Errorf("%s: %d out of range", what, u)
	}
	return int64(u), nil
}

func (r *reader) float(what string) (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c == msgpcode.Float:
		r.i++
		u, err := r.uintN(4)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
		return float64(math.Float32frombits(uint32(u))), nil
	case c == msgpcode.Double:
		r.i++
		u, err := r.uintN(8)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
		return math.Float64frombits(u), nil
	case isIntCode(c):
		n, err := r.int64(what)
		return float64(n), err
	}
	return 0, fmt.Errorf("%s: want float, got %s", what, describe(c))
}

// strBytes consumes a string and returns its bytes (aliasing the payload).
func (r *reader) strBytes(what string) ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	if !isStrCode(c) {
		return nil, fmt.Errorf("%s: want string, got %s", what, describe(c))
	}
	n, err := r.bytesLen(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := r.length(n, 1); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return r.take(n)
}

func (r *reader) str(what string) (string, error) {
	b, err := r.strBytes(what)
	if err != nil {
		return "", err
	}
	return intern(b), nil
}

// intern returns the common values of string fields without allocating.
func intern(b []byte) string {
	switch string(b) {
	case "":
		return ""
	case "GPU":
		return "GPU"
	case "CPU":
		return "CPU"
	case "CPU_PINNED":
		return "CPU_PINNED"
	case "DISK":
		return "DISK"
	case TagBlockStored:
		return TagBlockStored
	case TagBlockRemoved:
		return TagBlockRemoved
	case TagAllBlocksCleared:
		return TagAllBlocksCleared
	}
	return string(b)
}

func (r *reader) strOrNil(what string) (string, error) {
	if null, err := r.isNil(); err != nil || null {
		return "", err
	}
	return r.str(what)
}

// elemName names element i of what in an error (what alone when i < 0).
func elemName(what string, i int) string {
	if i < 0 {
		return what
	}
	return fmt.Sprintf("%s[%d]", what, i)
}

// hash reads one engine block hash: an integer of any width and sign (two's complement
// for negatives), or bytes (the big-endian value's low 64 bits). Errors name element i
// of what (what alone when i < 0).
func (r *reader) hash(what string, i int) (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case isIntCode(c):
		return r.intBits(c)
	case isBinCode(c) || isStrCode(c):
		n, err := r.bytesLen(c)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", elemName(what, i), err)
		}
		if n == 0 {
			return 0, fmt.Errorf("%s: empty bytes", elemName(what, i))
		}
		if err := r.length(n, 1); err != nil {
			return 0, fmt.Errorf("%s: %w", elemName(what, i), err)
		}
		buf, _ := r.take(n)
		if len(buf) > 8 {
			buf = buf[len(buf)-8:]
		}
		var h uint64
		for _, x := range buf {
			h = h<<8 | uint64(x)
		}
		return h, nil
	}
	return 0, fmt.Errorf("%s: want integer or bytes, got %s", elemName(what, i), describe(c))
}

// hashes decodes an array of block hashes into the scratch buffer.
func (r *reader) hashes(what string) (span, error) {
	n, err := r.arrayLen(what)
	if err != nil {
		return absent, err
	}
	sc := r.sc
	off := len(sc.hashes)
	sc.hashes = slices.Grow(sc.hashes, n)[:off+n]
	dst := sc.hashes[off:]
	p, i := r.p, r.i
	for k := range dst {
		// Fast path: the uint64 form msgspec writes for hashes of 2^63 and above (most
		// 64-bit hashes); every other form goes through hash.
		if i+9 <= len(p) && p[i] == msgpcode.Uint64 {
			dst[k] = binary.BigEndian.Uint64(p[i+1 : i+9])
			i += 9
			continue
		}
		r.i = i
		if dst[k], err = r.hash(what, k); err != nil {
			return absent, err
		}
		i = r.i
	}
	r.i = i
	return span{off, n}, nil
}

// tokens decodes an array of token ids into the scratch buffer.
func (r *reader) tokens(what string) (span, error) {
	n, err := r.arrayLen(what)
	if err != nil {
		return absent, err
	}
	sc := r.sc
	off := len(sc.tokens)
	sc.tokens = slices.Grow(sc.tokens, n)[:off+n]
	dst := sc.tokens[off:]
	p, i := r.p, r.i
	for k := 0; k < len(dst); k++ {
		// Fast path for the forms token ids take (uint16, uint32, positive fixnum) while
		// 5 bytes are left. uint16 and uint32 share one branch-free decode, as
		// vocabularies over 65,536 tokens mix the two at random.
		if i+5 <= len(p) {
			c := p[i]
			if w := uint(c) - uint(msgpcode.Uint16); w <= 1 { // 0: uint16, 1: uint32
				dst[k] = binary.BigEndian.Uint32(p[i+1:i+5]) >> (16 - 16*w)
				i += 3 + 2*int(w)
				continue
			}
			if c <= 0x7f {
				dst[k] = uint32(c)
				i++
				continue
			}
		}
		r.i = i
		v, err := r.int64(what)
		if err != nil {
			return absent, fmt.Errorf("%s[%d]: %w", what, k, err)
		}
		if v < 0 || v > math.MaxUint32 {
			return absent, fmt.Errorf("%s[%d]: token id %d out of range", what, k, v)
		}
		dst[k] = uint32(v)
		i = r.i
	}
	r.i = i
	return span{off, n}, nil
}

// skip discards one value of any type, bounding the nesting depth.
func (r *reader) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("values nested deeper than %d", maxDepth)
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	switch {
	case isArrayCode(c):
		n, err := r.arrayLen("skipped array")
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case isMapCode(c):
		n, err := r.mapLen("skipped map", c)
		if err != nil {
			return err
		}
		for i := 0; i < 2*n; i++ {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case isStrCode(c) || isBinCode(c):
		n, err := r.bytesLen(c)
		if err != nil {
			return err
		}
		_, err = r.take(n)
		return err
	case msgpcode.IsFixedNum(c) || c == msgpcode.Nil || c == msgpcode.True || c == msgpcode.False:
		r.i++
		return nil
	}
	r.i++
	var n int // bytes after the code
	switch c {
	case msgpcode.Uint8, msgpcode.Int8:
		n = 1
	case msgpcode.Uint16, msgpcode.Int16:
		n = 2
	case msgpcode.Uint32, msgpcode.Int32, msgpcode.Float:
		n = 4
	case msgpcode.Uint64, msgpcode.Int64, msgpcode.Double:
		n = 8
	case msgpcode.FixExt1:
		n = 1 + 1
	case msgpcode.FixExt2:
		n = 1 + 2
	case msgpcode.FixExt4:
		n = 1 + 4
	case msgpcode.FixExt8:
		n = 1 + 8
	case msgpcode.FixExt16:
		n = 1 + 16
	case msgpcode.Ext8, msgpcode.Ext16, msgpcode.Ext32:
		w := 1 << (c - msgpcode.Ext8) // length field: 1, 2 or 4 bytes
		l, err := r.uintN(w)
		if err != nil {
			return err
		}
		n = 1 + int(l) // type byte and data
	default:
		return fmt.Errorf("unknown %s", describe(c))
	}
	_, err = r.take(n)
	return err
}

func (r *reader) batch() (kv.Batch, error) {
	b := kv.Batch{DataParallelRank: -1}
	c, err := r.peek()
	if err != nil {
		return b, err
	}
	switch {
	case isArrayCode(c):
		n, err := r.arrayLen("batch")
		if err != nil {
			return b, err
		}
		if n < 2 {
			return b, fmt.Errorf("batch: array of %d elements, want [ts, events, data_parallel_rank]", n)
		}
		if b.Timestamp, err = r.float("batch ts"); err != nil {
			return b, err
		}
		if b.Events, err = r.events(); err != nil {
			return b, err
		}
		if n >= 3 {
			if b.DataParallelRank, err = r.rank(); err != nil {
				return b, err
			}
		}
		for i := 3; i < n; i++ {
			if err := r.skip(1); err != nil {
				return b, fmt.Errorf("batch field %d: %w", i, err)
			}
		}
		return b, nil
	case isMapCode(c):
		n, err := r.mapLen("batch", c)
		if err != nil {
			return b, err
		}
		var haveTS, haveEvents bool
		for i := 0; i < n; i++ {
			key, err := r.strBytes("batch key")
			if err != nil {
				return b, err
			}
			switch string(key) {
			case "ts":
				b.Timestamp, err = r.float("batch ts")
				haveTS = true
			case "events":
				b.Events, err = r.events()
				haveEvents = true
			case "data_parallel_rank":
				b.DataParallelRank, err = r.rank()
			default:
				err = r.skip(1)
			}
			if err != nil {
				return b, err
			}
		}
		if !haveTS || !haveEvents {
			return b, errors.New(`batch: map without "ts" or "events"`)
		}
		return b, nil
	}
	return b, fmt.Errorf("batch: want array or map, got %s", describe(c))
}

func (r *reader) rank() (int, error) {
	if null, err := r.isNil(); err != nil || null {
		return -1, err
	}
	v, err := r.int64("data_parallel_rank")
	if err != nil {
		return -1, err
	}
	if v < 0 || v > math.MaxInt32 {
		return -1, fmt.Errorf("data_parallel_rank %d out of range", v)
	}
	return int(v), nil
}

// minEventBytes is the size of the smallest event the decoder keeps
// (["AllBlocksCleared"]); it bounds the events slice a length claim can allocate.
const minEventBytes = 2 + len(TagAllBlocksCleared)

func (r *reader) events() ([]kv.Event, error) {
	n, err := r.arrayLen("events")
	if err != nil {
		return nil, err
	}
	sc := r.sc
	sc.hashes, sc.tokens, sc.refs = sc.hashes[:0], sc.tokens[:0], sc.refs[:0] // a map batch may repeat "events"
	evs := make([]kv.Event, 0, min(n, r.left()/minEventBytes))
	for i := 0; i < n; i++ {
		evs = append(evs, kv.Event{})
		refs, known, err := r.event(&evs[len(evs)-1])
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		if known {
			sc.refs = append(sc.refs, refs)
		} else {
			evs = evs[:len(evs)-1]
		}
	}
	// Move the kept events' hashes and token ids into one exactly sized slice each.
	var nh, nt int
	for _, rf := range sc.refs {
		nh += max(rf.hashes.n, 0)
		nt += max(rf.tokens.n, 0)
	}
	hs := exactCopy(sc.hashes, nh)
	ts := exactCopy(sc.tokens, nt)
	nh, nt = 0, 0
	for i, rf := range sc.refs {
		if h := rf.hashes; h.n >= 0 {
			evs[i].EngineHashes = hs[nh : nh+h.n : nh+h.n]
			if len(hs) != len(sc.hashes) {
				copy(evs[i].EngineHashes, sc.hashes[h.off:h.off+h.n])
			}
			nh += h.n
		}
		if t := rf.tokens; t.n >= 0 {
			evs[i].TokenIDs = ts[nt : nt+t.n : nt+t.n]
			if len(ts) != len(sc.tokens) {
				copy(evs[i].TokenIDs, sc.tokens[t.off:t.off+t.n])
			}
			nt += t.n
		}
	}
	return evs, nil
}

// exactCopy returns a new slice of n elements (capacity possibly larger); when n == len(s) (every decoded value is
// kept, the usual case) it holds a copy of s, else the caller fills it.
func exactCopy[E any](s []E, n int) []E {
	switch {
	case n == 0:
		return make([]E, 0) // non-nil: a field that was present stays non-nil when empty
	case n == len(s):
		return append([]E(nil), s...) // not zeroed first
	}
	return make([]E, n)
}

// event decodes one event, its hashes and token ids left in the scratch buffers at
// refs; known is false for a well-formed event of a type this package does not know
// (skipped).
func (r *reader) event(e *kv.Event) (refs eventRefs, known bool, err error) {
	c, err := r.peek()
	if err != nil {
		return refs, false, err
	}
	switch {
	case isArrayCode(c):
		refs, known, err = r.arrayEvent(e)
	case isMapCode(c):
		refs, known, err = r.mapEvent(e, c)
	default:
		return refs, false, fmt.Errorf("want array or map, got %s", describe(c))
	}
	if err != nil || !known {
		return refs, known, err
	}
	return refs, true, checkDecoded(e, refs)
}

func checkDecoded(e *kv.Event, refs eventRefs) error {
	switch e.Kind {
	case kv.BlockStored:
		if e.BlockSize <= 0 {
			return fmt.Errorf("BlockStored: block_size %d", e.BlockSize)
		}
		nh, nt := max(refs.hashes.n, 0), max(refs.tokens.n, 0)
		if nt != nh*e.BlockSize {
			return fmt.Errorf("BlockStored: %d token_ids for %d blocks of %d tokens", nt, nh, e.BlockSize)
		}
	}
	return nil
}

func (r *reader) arrayEvent(e *kv.Event) (refs eventRefs, known bool, err error) {
	refs = eventRefs{absent, absent}
	n, err := r.arrayLen("event")
	if err != nil {
		return refs, false, err
	}
	if n == 0 {
		return refs, false, errors.New("empty event array")
	}
	tag, err := r.strBytes("event tag")
	if err != nil {
		return refs, false, err
	}
	fields := n - 1
	var want int // fields this package reads for the tag
	switch string(tag) {
	case TagBlockStored:
		e.Kind, want = kv.BlockStored, 4 // hashes, parent, token_ids, block_size required
	case TagBlockRemoved:
		e.Kind, want = kv.BlockRemoved, 1 // hashes required
	case TagAllBlocksCleared:
		e.Kind, want = kv.AllBlocksCleared, 0
	default:
		for i := 0; i < fields; i++ {
			if err := r.skip(1); err != nil {
				return refs, false, fmt.Errorf("%s field %d: %w", tag, i+1, err)
			}
		}
		return refs, false, nil
	}
	if fields < want {
		return refs, false, fmt.Errorf("%s: %d fields, want at least %d", tag, fields, want)
	}
	read := 0
	switch e.Kind {
	case kv.BlockStored:
		if refs.hashes, err = r.hashes("block_hashes"); err != nil {
			return refs, false, err
		}
		if e.HasParent, e.ParentHash, err = r.parent(); err != nil {
			return refs, false, err
		}
		if refs.tokens, err = r.tokens("token_ids"); err != nil {
			return refs, false, err
		}
		bs, err := r.int64("block_size")
		if err != nil {
			return refs, false, err
		}
		if bs <= 0 || bs > math.MaxInt32 {
			return refs, false, fmt.Errorf("block_size %d out of range", bs)
		}
		e.BlockSize = int(bs)
		read = 4
		if fields > read { // lora_id: int|nil, not used
			if err := r.skip(1); err != nil {
				return refs, false, fmt.Errorf("lora_id: %w", err)
			}
			read++
		}
		if fields > read {
			if e.Medium, err = r.strOrNil("medium"); err != nil {
				return refs, false, err
			}
			read++
		}
		if fields > read {
			if e.LoraName, e.CacheSalt, err = r.loraNameSlot(); err != nil {
				return refs, false, err
			}
			read++
		}
		if fields > read {
			salt, err := r.extraKeysSlot(e.LoraName)
			if err != nil {
				return refs, false, err
			}
			if salt != "" {
				e.CacheSalt = salt
			}
			read++
		}
		for ; fields > read; read++ { // later fields; SGLang's metadata map may come last
			salt, err := r.metadataOrSkip()
			if err != nil {
				return refs, false, fmt.Errorf("%s field %d: %w", tag, read+1, err)
			}
			if salt != "" {
				e.CacheSalt = salt
			}
		}
		if e.HasParent {
			e.CacheSalt = "" // a continuation inherits its parent's salt
		}
	case kv.BlockRemoved:
		if refs.hashes, err = r.hashes("block_hashes"); err != nil {
			return refs, false, err
		}
		read = 1
		if fields > read {
			if e.Medium, err = r.strOrNil("medium"); err != nil {
				return refs, false, err
			}
			read++
		}
	}
	for i := read; i < fields; i++ {
		if err := r.skip(1); err != nil {
			return refs, false, fmt.Errorf("%s field %d: %w", tag, i+1, err)
		}
	}
	return refs, true, nil
}

// loraNameSlot reads element 7 of a BlockStored array: vLLM's lora_name (a string or
// nil), or the metadata map of SGLang's BlockStoredWithMetadata ({"cache_salt": str},
// sent by SGLang versions that appended it straight after medium when a request has a
// cache_salt), whose salt it returns: SGLang has no adapter name there, so the name is
// "".
func (r *reader) loraNameSlot() (lora, salt string, err error) {
	c, err := r.peek()
	if err != nil {
		return "", "", err
	}
	if isMapCode(c) {
		salt, err := r.metadataOrSkip()
		return "", salt, err
	}
	lora, err = r.strOrNil("lora_name")
	return lora, "", err
}

// metadataOrSkip reads a BlockStored element after those this package names: SGLang's
// metadata map, whose cache_salt (a string) it returns, or anything else, which it
// skips ("" returned).
func (r *reader) metadataOrSkip() (string, error) {
	c, err := r.peek()
	if err != nil {
		return "", err
	}
	if !isMapCode(c) {
		return "", r.skip(1)
	}
	start := r.i
	if err := r.skip(1); err != nil { // the whole map is there
		return "", fmt.Errorf("BlockStored metadata: %w", err)
	}
	end := r.i
	defer func() { r.i = end }()
	r.i = start
	n, err := r.mapLen("BlockStored metadata", c)
	if err != nil {
		return "", err
	}
	salt := ""
	for i := 0; i < n; i++ {
		key, err := r.strBytes("BlockStored metadata key")
		if err != nil {
			return "", err
		}
		if string(key) != "cache_salt" {
			if err := r.skip(1); err != nil {
				return "", err
			}
			continue
		}
		if salt, err = r.strOrNil("cache_salt"); err != nil {
			return "", err
		}
	}
	return salt, nil
}

// extraKeysSlot reads element 8 of a BlockStored array, vLLM's extra_keys: nil, or one
// entry per block (nil or an array of keys). The first block's keys are its adapter's
// name (when lora is not ""), multimodal keys and the request's cache salt, in that
// order (vLLM's generate_block_hash_extra_keys); the salt is returned when, past the
// adapter's name, a single string is left. Multimodal keys leave "" (such blocks'
// tokens are placeholders the router cannot hash anyway).
func (r *reader) extraKeysSlot(lora string) (string, error) {
	if null, err := r.isNil(); err != nil || null {
		return "", err
	}
	n, err := r.arrayLen("extra_keys")
	if err != nil {
		return "", err
	}
	salt := ""
	for i := 0; i < n; i++ {
		if i > 0 {
			if err := r.skip(1); err != nil {
				return "", fmt.Errorf("extra_keys: %w", err)
			}
			continue
		}
		if null, err := r.isNil(); err != nil || null {
			if err != nil {
				return "", err
			}
			continue
		}
		k, err := r.arrayLen("extra_keys entry")
		if err != nil {
			return "", err
		}
		var strs []string
		other := false
		for j := 0; j < k; j++ {
			c, err := r.peek()
			if err != nil {
				return "", err
			}
			if !isStrCode(c) {
				other = true
				if err := r.skip(1); err != nil {
					return "", err
				}
				continue
			}
			v, err := r.str("extra key")
			if err != nil {
				return "", err
			}
			strs = append(strs, v)
		}
		if lora != "" && len(strs) > 0 && strs[0] == lora {
			strs = strs[1:]
		}
		if !other && len(strs) == 1 {
			salt = strs[0]
		}
	}
	return salt, nil
}

func (r *reader) parent() (bool, uint64, error) {
	if null, err := r.isNil(); err != nil || null {
		return false, 0, err
	}
	h, err := r.hash("parent_block_hash", -1)
	return true, h, err
}

func (r *reader) mapEvent(e *kv.Event, c byte) (refs eventRefs, known bool, err error) {
	refs = eventRefs{absent, absent}
	n, err := r.mapLen("event map", c)
	if err != nil {
		return refs, false, err
	}
	var tag string
	var haveHashes, haveTokens, haveBS bool
	for i := 0; i < n; i++ {
		key, err := r.strBytes("event key")
		if err != nil {
			return refs, false, err
		}
		switch string(key) {
		case "type":
			tag, err = r.str("event type")
		case "block_hashes":
			refs.hashes, err = r.hashes("block_hashes")
			haveHashes = true
		case "parent_block_hash":
			e.HasParent, e.ParentHash, err = r.parent()
		case "token_ids":
			refs.tokens, err = r.tokens("token_ids")
			haveTokens = true
		case "block_size":
			var bs int64
			bs, err = r.int64("block_size")
			if err == nil && (bs <= 0 || bs > math.MaxInt32) {
				err = fmt.Errorf("block_size %d out of range", bs)
			}
			e.BlockSize = int(bs)
			haveBS = true
		case "medium":
			e.Medium, err = r.strOrNil("medium")
		case "lora_name":
			e.LoraName, err = r.strOrNil("lora_name")
		case "extra_keys": // after lora_name, in vLLM's field order
			e.CacheSalt, err = r.extraKeysSlot(e.LoraName)
		default:
			err = r.skip(1)
		}
		if err != nil {
			return refs, false, err
		}
	}
	switch tag {
	case TagBlockStored:
		if !haveHashes || !haveTokens || !haveBS {
			return refs, false, errors.New("BlockStored map without block_hashes, token_ids or block_size")
		}
		e.Kind = kv.BlockStored
		if e.HasParent {
			e.CacheSalt = ""
		}
	case TagBlockRemoved:
		if !haveHashes {
			return refs, false, errors.New("BlockRemoved map without block_hashes")
		}
		e.Kind = kv.BlockRemoved
		e.BlockSize, e.HasParent, e.ParentHash, e.LoraName, e.CacheSalt = 0, false, 0, "", ""
		refs.tokens = absent
	case TagAllBlocksCleared:
		*e, refs = kv.Event{Kind: kv.AllBlocksCleared}, eventRefs{absent, absent}
	case "":
		return refs, false, errors.New(`event map without "type"`)
	default:
		*e = kv.Event{}
		return refs, false, nil
	}
	return refs, true, nil
}
