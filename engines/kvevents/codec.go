package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

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
		w.arrayLen(8)
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

// DecodePayload decodes one msgpack event batch in either form (see the package
// documentation). Batch.Seq is left 0; DataParallelRank is -1 when the engine sent nil
// or nothing. Event types it does not know are skipped.
func DecodePayload(payload []byte) (kv.Batch, error) {
	if len(payload) > MaxPayloadBytes {
		return kv.Batch{}, fmt.Errorf("kvevents: payload of %d bytes exceeds %d", len(payload), MaxPayloadBytes)
	}
	r := newReader(payload)
	b, err := r.batch()
	if err != nil {
		return kv.Batch{}, fmt.Errorf("kvevents: decode payload: %w", err)
	}
	if r.br.Len() != 0 {
		return kv.Batch{}, fmt.Errorf("kvevents: decode payload: %d trailing bytes after the batch", r.br.Len())
	}
	return b, nil
}

type reader struct {
	br *bytes.Reader
	d  *msgpack.Decoder
}

func newReader(p []byte) *reader {
	br := bytes.NewReader(p)
	return &reader{br: br, d: msgpack.NewDecoder(br)}
}

func (r *reader) peek() (byte, error) {
	c, err := r.d.PeekCode()
	if err != nil {
		return 0, errTruncated(err)
	}
	return c, nil
}

// errTruncated names running out of input plainly; other errors pass through.
func errTruncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("truncated input")
	}
	return err
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

// length checks a container or string length against the bytes left: every element
// takes at least minBytes bytes, so a longer claim is malformed (and must not allocate).
func (r *reader) length(n, minBytes int) error {
	if n < 0 || n*minBytes > r.br.Len() {
		return fmt.Errorf("length %d exceeds the %d bytes left", n, r.br.Len())
	}
	return nil
}

func (r *reader) arrayLen(what string) (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if !isArrayCode(c) {
		return 0, fmt.Errorf("%s: want array, got %s", what, describe(c))
	}
	n, err := r.d.DecodeArrayLen()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, errTruncated(err))
	}
	if err := r.length(n, 1); err != nil {
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
	return true, r.d.DecodeNil()
}

func (r *reader) int64(what string) (int64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if !isIntCode(c) {
		return 0, fmt.Errorf("%s: want integer, got %s", what, describe(c))
	}
	if c == msgpcode.Uint64 {
		u, err := r.d.DecodeUint64()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, errTruncated(err))
		}
		if u > math.MaxInt64 {
			return 0, fmt.Errorf("%s: %d out of range", what, u)
		}
		return int64(u), nil
	}
	n, err := r.d.DecodeInt64()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, errTruncated(err))
	}
	return n, nil
}

func (r *reader) float(what string) (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := r.d.DecodeFloat64()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, errTruncated(err))
		}
		return f, nil
	case isIntCode(c):
		n, err := r.int64(what)
		return float64(n), err
	}
	return 0, fmt.Errorf("%s: want float, got %s", what, describe(c))
}

func (r *reader) str(what string) (string, error) {
	c, err := r.peek()
	if err != nil {
		return "", err
	}
	if !isStrCode(c) {
		return "", fmt.Errorf("%s: want string, got %s", what, describe(c))
	}
	n, err := r.d.DecodeBytesLen()
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, errTruncated(err))
	}
	if err := r.length(n, 1); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	buf := make([]byte, n)
	if err := r.d.ReadFull(buf); err != nil {
		return "", fmt.Errorf("%s: %w", what, errTruncated(err))
	}
	return string(buf), nil
}

func (r *reader) strOrNil(what string) (string, error) {
	if null, err := r.isNil(); err != nil || null {
		return "", err
	}
	return r.str(what)
}

// hash reads one engine block hash: an integer of any width and sign (two's complement
// for negatives), or bytes (the big-endian value's low 64 bits).
func (r *reader) hash(what string) (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case isIntCode(c):
		if c == msgpcode.Uint64 {
			u, err := r.d.DecodeUint64()
			return u, errTruncated(err)
		}
		n, err := r.d.DecodeInt64()
		return uint64(n), errTruncated(err)
	case isBinCode(c) || isStrCode(c):
		n, err := r.d.DecodeBytesLen()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, errTruncated(err))
		}
		if n == 0 {
			return 0, fmt.Errorf("%s: empty bytes", what)
		}
		if err := r.length(n, 1); err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
		buf := make([]byte, n)
		if err := r.d.ReadFull(buf); err != nil {
			return 0, fmt.Errorf("%s: %w", what, errTruncated(err))
		}
		var h uint64
		if len(buf) > 8 {
			buf = buf[len(buf)-8:]
		}
		for _, x := range buf {
			h = h<<8 | uint64(x)
		}
		return h, nil
	}
	return 0, fmt.Errorf("%s: want integer or bytes, got %s", what, describe(c))
}

func (r *reader) hashes(what string) ([]uint64, error) {
	n, err := r.arrayLen(what)
	if err != nil {
		return nil, err
	}
	hs := make([]uint64, n)
	for i := range hs {
		if hs[i], err = r.hash(fmt.Sprintf("%s[%d]", what, i)); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

func (r *reader) tokens(what string) ([]uint32, error) {
	n, err := r.arrayLen(what)
	if err != nil {
		return nil, err
	}
	ts := make([]uint32, n)
	for i := range ts {
		v, err := r.int64(what)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", what, i, err)
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("%s[%d]: token id %d out of range", what, i, v)
		}
		ts[i] = uint32(v)
	}
	return ts, nil
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
		n, err := r.d.DecodeMapLen()
		if err != nil {
			return errTruncated(err)
		}
		if err := r.length(n, 2); err != nil {
			return fmt.Errorf("skipped map: %w", err)
		}
		for i := 0; i < 2*n; i++ {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := r.d.Skip(); err != nil {
		return errTruncated(err)
	}
	return nil
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
		n, err := r.d.DecodeMapLen()
		if err != nil {
			return b, errTruncated(err)
		}
		if err := r.length(n, 2); err != nil {
			return b, fmt.Errorf("batch: %w", err)
		}
		var haveTS, haveEvents bool
		for i := 0; i < n; i++ {
			key, err := r.str("batch key")
			if err != nil {
				return b, err
			}
			switch key {
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

func (r *reader) events() ([]kv.Event, error) {
	n, err := r.arrayLen("events")
	if err != nil {
		return nil, err
	}
	evs := make([]kv.Event, 0, n)
	for i := 0; i < n; i++ {
		e, known, err := r.event()
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		if known {
			evs = append(evs, e)
		}
	}
	return evs, nil
}

// event decodes one event; known is false for a well-formed event of a type this
// package does not know (skipped).
func (r *reader) event() (e kv.Event, known bool, err error) {
	c, err := r.peek()
	if err != nil {
		return e, false, err
	}
	switch {
	case isArrayCode(c):
		e, known, err = r.arrayEvent()
	case isMapCode(c):
		e, known, err = r.mapEvent()
	default:
		return e, false, fmt.Errorf("want array or map, got %s", describe(c))
	}
	if err != nil || !known {
		return e, known, err
	}
	return e, true, checkDecoded(&e)
}

func checkDecoded(e *kv.Event) error {
	switch e.Kind {
	case kv.BlockStored:
		if e.BlockSize <= 0 {
			return fmt.Errorf("BlockStored: block_size %d", e.BlockSize)
		}
		if len(e.TokenIDs) != len(e.EngineHashes)*e.BlockSize {
			return fmt.Errorf("BlockStored: %d token_ids for %d blocks of %d tokens",
				len(e.TokenIDs), len(e.EngineHashes), e.BlockSize)
		}
	}
	return nil
}

func (r *reader) arrayEvent() (e kv.Event, known bool, err error) {
	n, err := r.arrayLen("event")
	if err != nil {
		return e, false, err
	}
	if n == 0 {
		return e, false, errors.New("empty event array")
	}
	tag, err := r.str("event tag")
	if err != nil {
		return e, false, err
	}
	fields := n - 1
	var want int // fields this package reads for the tag
	switch tag {
	case TagBlockStored:
		e.Kind, want = kv.BlockStored, 4 // hashes, parent, token_ids, block_size required
	case TagBlockRemoved:
		e.Kind, want = kv.BlockRemoved, 1 // hashes required
	case TagAllBlocksCleared:
		e.Kind, want = kv.AllBlocksCleared, 0
	default:
		for i := 0; i < fields; i++ {
			if err := r.skip(1); err != nil {
				return e, false, fmt.Errorf("%s field %d: %w", tag, i+1, err)
			}
		}
		return e, false, nil
	}
	if fields < want {
		return e, false, fmt.Errorf("%s: %d fields, want at least %d", tag, fields, want)
	}
	read := 0
	switch e.Kind {
	case kv.BlockStored:
		if e.EngineHashes, err = r.hashes("block_hashes"); err != nil {
			return e, false, err
		}
		if e.HasParent, e.ParentHash, err = r.parent(); err != nil {
			return e, false, err
		}
		if e.TokenIDs, err = r.tokens("token_ids"); err != nil {
			return e, false, err
		}
		bs, err := r.int64("block_size")
		if err != nil {
			return e, false, err
		}
		if bs <= 0 || bs > math.MaxInt32 {
			return e, false, fmt.Errorf("block_size %d out of range", bs)
		}
		e.BlockSize = int(bs)
		read = 4
		if fields > read { // lora_id: int|nil, not used
			if err := r.skip(1); err != nil {
				return e, false, fmt.Errorf("lora_id: %w", err)
			}
			read++
		}
		if fields > read {
			if e.Medium, err = r.strOrNil("medium"); err != nil {
				return e, false, err
			}
			read++
		}
		if fields > read {
			if e.LoraName, err = r.strOrNil("lora_name"); err != nil {
				return e, false, err
			}
			read++
		}
	case kv.BlockRemoved:
		if e.EngineHashes, err = r.hashes("block_hashes"); err != nil {
			return e, false, err
		}
		read = 1
		if fields > read {
			if e.Medium, err = r.strOrNil("medium"); err != nil {
				return e, false, err
			}
			read++
		}
	}
	for i := read; i < fields; i++ {
		if err := r.skip(1); err != nil {
			return e, false, fmt.Errorf("%s field %d: %w", tag, i+1, err)
		}
	}
	return e, true, nil
}

func (r *reader) parent() (bool, uint64, error) {
	if null, err := r.isNil(); err != nil || null {
		return false, 0, err
	}
	h, err := r.hash("parent_block_hash")
	return true, h, err
}

func (r *reader) mapEvent() (e kv.Event, known bool, err error) {
	n, err := r.d.DecodeMapLen()
	if err != nil {
		return e, false, errTruncated(err)
	}
	if err := r.length(n, 2); err != nil {
		return e, false, fmt.Errorf("event map: %w", err)
	}
	var tag string
	var haveHashes, haveTokens, haveBS bool
	for i := 0; i < n; i++ {
		key, err := r.str("event key")
		if err != nil {
			return e, false, err
		}
		switch key {
		case "type":
			tag, err = r.str("event type")
		case "block_hashes":
			e.EngineHashes, err = r.hashes("block_hashes")
			haveHashes = true
		case "parent_block_hash":
			e.HasParent, e.ParentHash, err = r.parent()
		case "token_ids":
			e.TokenIDs, err = r.tokens("token_ids")
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
		default:
			err = r.skip(1)
		}
		if err != nil {
			return e, false, err
		}
	}
	switch tag {
	case TagBlockStored:
		if !haveHashes || !haveTokens || !haveBS {
			return e, false, errors.New("BlockStored map without block_hashes, token_ids or block_size")
		}
		e.Kind = kv.BlockStored
	case TagBlockRemoved:
		if !haveHashes {
			return e, false, errors.New("BlockRemoved map without block_hashes")
		}
		e.Kind = kv.BlockRemoved
		e.TokenIDs, e.BlockSize, e.HasParent, e.ParentHash, e.LoraName = nil, 0, false, 0, ""
	case TagAllBlocksCleared:
		e = kv.Event{Kind: kv.AllBlocksCleared}
	case "":
		return e, false, errors.New(`event map without "type"`)
	default:
		return kv.Event{}, false, nil
	}
	return e, true, nil
}
