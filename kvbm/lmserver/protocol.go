package lmserver

import (
	"encoding/binary"
	"errors"
)

// Command is a request's command word (docs/reference.md §9.4).
type Command int32

// Commands of protocol v1.
const (
	CmdPut    Command = 1 // header, then Length bytes; no reply
	CmdGet    Command = 2 // reply header, then the bytes on a hit
	CmdExist  Command = 3 // reply header only
	CmdList   Command = 4 // implemented by neither LMCache side; answered CodeFail
	CmdHealth Command = 5 // reply header with CodeOK
)

// Code is a reply's status word.
type Code int32

// Reply codes.
const (
	CodeOK   Code = 200
	CodeFail Code = 400
)

// Fmt is LMCache's MemoryFormat: the layout of a chunk's bytes.
type Fmt int32

// Memory formats LMCache sends (others pass through unchanged).
const (
	FmtKV2LTD Fmt = 1 // [2, layers, tokens, hidden]
	FmtKV2TD  Fmt = 3 // [2, tokens, hidden]
	FmtBinary Fmt = 4 // opaque bytes (compressed serdes)
	FmtKVMLA  Fmt = 6 // [layers, tokens, latent]
)

// Dtype is LMCache's element type code.
type Dtype int32

// Element types (LMCache's DTYPE_TO_INT; others pass through unchanged).
const (
	DtypeNone    Dtype = 0
	DtypeHalf    Dtype = 1
	DtypeFP16    Dtype = 2
	DtypeBF16    Dtype = 3
	DtypeFP32    Dtype = 4
	DtypeFP64    Dtype = 5
	DtypeU8      Dtype = 6
	DtypeFP8E4M3 Dtype = 7
	DtypeFP8E5M2 Dtype = 8
)

// Frame sizes in bytes.
const (
	KeyLen          = 150              // the key field, space-padded
	RequestLen      = 9*4 + KeyLen     // 186: a request header
	ReplyLen        = 9 * 4            // 36: a reply header
	MetaLen         = 8 * 4            // 32: the descriptor stored with each block
	remoteMetaLen   = 7 * 4            // 28: LMCache's RemoteMetadata (length, fmt, dtype, shape)
	v0RequestLen    = 2*4 + KeyLen     // 158: the 2024 protocol's "ii150s" header
	versionProbeLen = 3 * 4            // bytes needed to tell v0 from v1
	maxFmt          = Fmt(1<<16 - 1)   // a v1 fmt is small; larger words are not fmt
	maxDtype        = Dtype(1<<16 - 1) // likewise for dtype
)

// Errors of the framing.
var (
	ErrShortFrame = errors.New("lmserver: short frame")
	ErrV0Header   = errors.New("lmserver: v0 request header (158-byte \"ii150s\"); this server speaks v1 (186 bytes)")
	ErrBadHeader  = errors.New("lmserver: malformed request header")
	ErrBadLength  = errors.New("lmserver: negative or oversized length")
	ErrKeyTooLong = errors.New("lmserver: key longer than 150 bytes")
	ErrEmptyKey   = errors.New("lmserver: empty key") // the client refuses to send one
)

// Desc describes a chunk: LMCache's memory format, element type, shape (unused trailing
// dimensions 0) and location code (0 from LMCache's connector). The server stores it with
// the block and echoes it on GET.
type Desc struct {
	Fmt      Fmt
	Dtype    Dtype
	Shape    [4]int32
	Location int32
}

// Request is a decoded request header. Length is the byte count of the body that follows
// a PUT (0 for other commands). Key has its padding stripped.
type Request struct {
	Command Command
	Length  int32
	Desc
	Key string
}

// Reply is a decoded reply header. Length is the byte count that follows a GET hit.
type Reply struct {
	Code   Code
	Length int32
	Desc
}

// defaultDesc is what LMCache's reference server puts in a reply that carries no chunk
// (a miss, EXIST, HEALTH): MemoryFormat(1), float16, shape (0,0,0,0), location 0.
var defaultDesc = Desc{Fmt: FmtKV2LTD, Dtype: DtypeFP16}

var le = binary.LittleEndian

// AppendRequest appends r's 186-byte header to dst: nine little-endian int32s, then the
// key right-padded with spaces to 150 bytes. ErrKeyTooLong when the key is over 150 bytes.
func AppendRequest(dst []byte, r Request) ([]byte, error) {
	if len(r.Key) > KeyLen {
		return dst, ErrKeyTooLong
	}
	dst = le.AppendUint32(dst, uint32(r.Command))
	dst = le.AppendUint32(dst, uint32(r.Length))
	dst = le.AppendUint32(dst, uint32(r.Fmt))
	dst = le.AppendUint32(dst, uint32(r.Dtype))
	dst = le.AppendUint32(dst, uint32(r.Location))
	for _, s := range r.Shape {
		dst = le.AppendUint32(dst, uint32(s))
	}
	dst = append(dst, r.Key...)
	for i := len(r.Key); i < KeyLen; i++ {
		dst = append(dst, ' ')
	}
	return dst, nil
}

// IsV0 reports whether the first 12 bytes of a request (b, at least 12 bytes) are a v0
// header: there the int32 at offset 8 is the start of the key (ASCII text), where v1 has
// a small fmt.
func IsV0(b []byte) bool {
	if len(b) < versionProbeLen {
		return false
	}
	if f := Fmt(le.Uint32(b[8:])); f >= 0 && f <= maxFmt {
		return false
	}
	for _, c := range b[8:12] {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// ParseRequest decodes a 186-byte request header (b may be longer; the rest is ignored).
// The key is stripped of surrounding ASCII whitespace, as the reference server's
// key.decode().strip() does. Errors: ErrShortFrame, ErrV0Header, ErrBadHeader (fmt or
// dtype not a small non-negative number), ErrBadLength (negative length). Unknown
// commands and empty keys are not errors here: the server answers them.
func ParseRequest(b []byte) (Request, error) {
	if len(b) < RequestLen {
		return Request{}, ErrShortFrame
	}
	if IsV0(b) {
		return Request{}, ErrV0Header
	}
	var r Request
	r.Command = Command(le.Uint32(b[0:]))
	r.Length = int32(le.Uint32(b[4:]))
	r.Fmt = Fmt(le.Uint32(b[8:]))
	r.Dtype = Dtype(le.Uint32(b[12:]))
	r.Location = int32(le.Uint32(b[16:]))
	for i := range r.Shape {
		r.Shape[i] = int32(le.Uint32(b[20+4*i:]))
	}
	if r.Fmt < 0 || r.Fmt > maxFmt || r.Dtype < 0 || r.Dtype > maxDtype {
		return r, ErrBadHeader
	}
	if r.Length < 0 {
		return r, ErrBadLength
	}
	r.Key = string(trimSpace(b[36:RequestLen]))
	return r, nil
}

// trimSpace strips ASCII whitespace (Python's str.strip() on ASCII) from both ends.
func trimSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	return b
}

// AppendReply appends r's 36-byte header to dst: code, length, fmt, dtype, shape0..3,
// location, each a little-endian int32.
func AppendReply(dst []byte, r Reply) []byte {
	dst = le.AppendUint32(dst, uint32(r.Code))
	dst = le.AppendUint32(dst, uint32(r.Length))
	dst = le.AppendUint32(dst, uint32(r.Fmt))
	dst = le.AppendUint32(dst, uint32(r.Dtype))
	for _, s := range r.Shape {
		dst = le.AppendUint32(dst, uint32(s))
	}
	return le.AppendUint32(dst, uint32(r.Location))
}

// ParseReply decodes a 36-byte reply header. ErrShortFrame when b is shorter;
// ErrBadLength for a negative length.
func ParseReply(b []byte) (Reply, error) {
	if len(b) < ReplyLen {
		return Reply{}, ErrShortFrame
	}
	var r Reply
	r.Code = Code(le.Uint32(b[0:]))
	r.Length = int32(le.Uint32(b[4:]))
	r.Fmt = Fmt(le.Uint32(b[8:]))
	r.Dtype = Dtype(le.Uint32(b[12:]))
	for i := range r.Shape {
		r.Shape[i] = int32(le.Uint32(b[16+4*i:]))
	}
	r.Location = int32(le.Uint32(b[32:]))
	if r.Length < 0 {
		return r, ErrBadLength
	}
	return r, nil
}

// AppendMeta appends the 32-byte descriptor the server stores with a block of length
// bytes: LMCache's 28-byte RemoteMetadata (length, fmt, dtype, shape0..3, as its redis://
// connector stores under "<key>metadata"), then location; little-endian int32s.
func AppendMeta(dst []byte, length int32, d Desc) []byte {
	dst = le.AppendUint32(dst, uint32(length))
	dst = le.AppendUint32(dst, uint32(d.Fmt))
	dst = le.AppendUint32(dst, uint32(d.Dtype))
	for _, s := range d.Shape {
		dst = le.AppendUint32(dst, uint32(s))
	}
	return le.AppendUint32(dst, uint32(d.Location))
}

// ParseMeta decodes a stored descriptor. A 28-byte RemoteMetadata (no location) gives
// location 0. ok is false when meta is shorter than 28 bytes (a block stored by another
// protocol); the caller then describes the block as opaque bytes (BinaryDesc).
func ParseMeta(meta []byte) (d Desc, ok bool) {
	if len(meta) < remoteMetaLen {
		return Desc{}, false
	}
	d.Fmt = Fmt(le.Uint32(meta[4:]))
	d.Dtype = Dtype(le.Uint32(meta[8:]))
	for i := range d.Shape {
		d.Shape[i] = int32(le.Uint32(meta[12+4*i:]))
	}
	if len(meta) >= MetaLen {
		d.Location = int32(le.Uint32(meta[28:]))
	}
	return d, true
}

// BinaryDesc describes n opaque bytes: FmtBinary, uint8, shape [n,0,0,0] (LMCache's
// convention for a bytes object).
func BinaryDesc(n int32) Desc {
	return Desc{Fmt: FmtBinary, Dtype: DtypeU8, Shape: [4]int32{n}}
}
