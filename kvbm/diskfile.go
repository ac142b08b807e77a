package kvbm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"
)

// The disk tier's file format (docs/reference.md §9.1). One file per block, named
// "<first 16 bytes of sha256(key), hex>-<generation, 16 hex digits>.kvb", holding a
// 56-byte header, then the key, the meta and the data:
//
//	offset size field
//	0      4    magic "TKVB"
//	4      4    version (1), little-endian like every field
//	8      4    key length
//	12     4    meta length
//	16     8    data length
//	24     8    generation (unique per written file; the highest wins at Open)
//	32     8    priority (int64)
//	40     8    xxh3-64 of meta then data
//	48     8    xxh3-64 of bytes 0..48 then the key
//
// A file is written as "tmp-*.kvt" in the same directory and renamed into place, so a
// ".kvb" file is always complete unless the machine (not the process) crashed with
// Config.Sync off; its body checksum is verified on every read regardless.

const (
	fileMagic      = "TKVB"
	fileVersion    = 1
	fileExt        = ".kvb"
	tempPattern    = "tmp-*.kvt"
	tempExt        = ".kvt"
	maxFileKey     = 1 << 16
	maxFileMeta    = 1 << 24
	maxFileData    = 1 << 40
	fileNameHexLen = 32
)

// Errors of the disk format.
var (
	errBadHeader = errors.New("kvbm: bad block file header")
	errBadBody   = errors.New("kvbm: block file checksum mismatch")
)

// fileHeader is a block file's header, less its own checksum.
type fileHeader struct {
	KeyLen, MetaLen uint32
	DataLen         uint64
	Gen             uint64
	Prio            int64
	BodySum         uint64
}

// size is the whole file's size.
func (h fileHeader) size() int64 {
	return fileHeaderSize + int64(h.KeyLen) + int64(h.MetaLen) + int64(h.DataLen)
}

// encodeHeader appends the header and key to dst.
func encodeHeader(dst []byte, h fileHeader, key string) []byte {
	var b [fileHeaderSize]byte
	copy(b[0:4], fileMagic)
	binary.LittleEndian.PutUint32(b[4:], fileVersion)
	binary.LittleEndian.PutUint32(b[8:], h.KeyLen)
	binary.LittleEndian.PutUint32(b[12:], h.MetaLen)
	binary.LittleEndian.PutUint64(b[16:], h.DataLen)
	binary.LittleEndian.PutUint64(b[24:], h.Gen)
	binary.LittleEndian.PutUint64(b[32:], uint64(h.Prio))
	binary.LittleEndian.PutUint64(b[40:], h.BodySum)
	binary.LittleEndian.PutUint64(b[48:], headerSum(b[:48], key))
	dst = append(dst, b[:]...)
	return append(dst, key...)
}

func headerSum(b []byte, key string) uint64 {
	hs := xxh3.New()
	_, _ = hs.Write(b)
	_, _ = hs.WriteString(key)
	return hs.Sum64()
}

func bodySum(meta, data []byte) uint64 {
	hs := xxh3.New()
	_, _ = hs.Write(meta)
	_, _ = hs.Write(data)
	return hs.Sum64()
}

// parseHeader parses the start of a block file: b holds at least the header and, when
// the header parses, the key (fileHeaderSize + KeyLen bytes; a shorter b is an error).
// It checks the magic, the version, the lengths' bounds and the header checksum, and
// returns the header and the key. Errors wrap errBadHeader.
func parseHeader(b []byte) (fileHeader, string, error) {
	var h fileHeader
	if len(b) < fileHeaderSize {
		return h, "", fmt.Errorf("%w: %d bytes", errBadHeader, len(b))
	}
	if string(b[0:4]) != fileMagic {
		return h, "", fmt.Errorf("%w: magic %q", errBadHeader, b[0:4])
	}
	if v := binary.LittleEndian.Uint32(b[4:]); v != fileVersion {
		return h, "", fmt.Errorf("%w: version %d", errBadHeader, v)
	}
	h.KeyLen = binary.LittleEndian.Uint32(b[8:])
	h.MetaLen = binary.LittleEndian.Uint32(b[12:])
	h.DataLen = binary.LittleEndian.Uint64(b[16:])
	h.Gen = binary.LittleEndian.Uint64(b[24:])
	h.Prio = int64(binary.LittleEndian.Uint64(b[32:]))
	h.BodySum = binary.LittleEndian.Uint64(b[40:])
	if h.KeyLen == 0 || h.KeyLen > maxFileKey || h.MetaLen > maxFileMeta || h.DataLen > maxFileData {
		return h, "", fmt.Errorf("%w: lengths key %d meta %d data %d", errBadHeader, h.KeyLen, h.MetaLen, h.DataLen)
	}
	if len(b) < fileHeaderSize+int(h.KeyLen) {
		return h, "", fmt.Errorf("%w: key truncated", errBadHeader)
	}
	key := string(b[fileHeaderSize : fileHeaderSize+int(h.KeyLen)])
	if binary.LittleEndian.Uint64(b[48:]) != headerSum(b[:48], key) {
		return h, "", fmt.Errorf("%w: header checksum", errBadHeader)
	}
	return h, key, nil
}

// fileName is the name of generation gen of key's block file.
func fileName(key string, gen uint64) string {
	sum := sha256.Sum256([]byte(key))
	var b [fileNameHexLen + 1 + 16 + len(fileExt)]byte
	hex.Encode(b[:fileNameHexLen], sum[:fileNameHexLen/2])
	b[fileNameHexLen] = '-'
	g := strconv.AppendUint(nil, gen, 16)
	for i := 0; i < 16-len(g); i++ {
		b[fileNameHexLen+1+i] = '0'
	}
	copy(b[fileNameHexLen+1+16-len(g):], g)
	copy(b[fileNameHexLen+1+16:], fileExt)
	return string(b[:])
}

// blockFile is the part of *os.File the writer uses (a seam for fault injection).
type blockFile interface {
	io.Writer
	Sync() error
	Close() error
	Name() string
}

func osCreateTemp(dir, pattern string) (blockFile, error) { return os.CreateTemp(dir, pattern) }

// writeBlockFile writes generation gen of a block to dir crash-safely: a temporary file,
// optionally fsynced, renamed into place (and the directory fsynced when sync). On any
// error the temporary file is removed and nothing is left behind.
func writeBlockFile(create func(dir, pattern string) (blockFile, error), dir string, sync bool, key string, gen uint64, prio int, meta, data []byte) (err error) {
	h := fileHeader{KeyLen: uint32(len(key)), MetaLen: uint32(len(meta)), DataLen: uint64(len(data)), Gen: gen, Prio: int64(prio), BodySum: bodySum(meta, data)}
	head := encodeHeader(make([]byte, 0, fileHeaderSize+len(key)+len(meta)), h, key)
	head = append(head, meta...)
	f, err := create(dir, tempPattern)
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(head); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if sync {
		if err = f.Sync(); err != nil {
			return err
		}
	}
	if err = f.Close(); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err = os.Rename(tmp, filepath.Join(dir, fileName(key, gen))); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if sync {
		if d, derr := os.Open(dir); derr == nil {
			_ = d.Sync()
			_ = d.Close()
		}
	}
	return nil
}

// readBlockFile reads the block file at path, expected to hold key in size bytes, and
// verifies it. meta and data share one allocation.
func readBlockFile(path, key string, size int64) (meta, data []byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, size)
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, nil, err
	}
	h, k, err := parseHeader(buf)
	if err != nil {
		return nil, nil, err
	}
	if k != key || h.size() != size {
		return nil, nil, fmt.Errorf("%w: holds %q (%d bytes)", errBadHeader, k, h.size())
	}
	m0 := fileHeaderSize + int64(h.KeyLen)
	d0 := m0 + int64(h.MetaLen)
	meta, data = buf[m0:d0:d0], buf[d0:]
	if bodySum(meta, data) != h.BodySum {
		return nil, nil, errBadBody
	}
	return meta, data, nil
}

// scannedFile is a valid block file found at Open.
type scannedFile struct {
	name    string
	key     string
	h       fileHeader
	modTime int64 // unix nanoseconds
}

// scanBlockFile validates the block file name in dir: its header, its size and its name.
func scanBlockFile(dir, name string) (scannedFile, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return scannedFile{}, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return scannedFile{}, err
	}
	buf := make([]byte, fileHeaderSize, fileHeaderSize+256)
	if _, err := io.ReadFull(f, buf); err != nil {
		return scannedFile{}, fmt.Errorf("%w: %v", errBadHeader, err)
	}
	kl := binary.LittleEndian.Uint32(buf[8:])
	if kl > maxFileKey {
		return scannedFile{}, fmt.Errorf("%w: key length %d", errBadHeader, kl)
	}
	buf = append(buf, make([]byte, kl)...)
	if _, err := io.ReadFull(f, buf[fileHeaderSize:]); err != nil {
		return scannedFile{}, fmt.Errorf("%w: %v", errBadHeader, err)
	}
	h, key, err := parseHeader(buf)
	if err != nil {
		return scannedFile{}, err
	}
	if fi.Size() != h.size() {
		return scannedFile{}, fmt.Errorf("%w: %d bytes, header says %d", errBadHeader, fi.Size(), h.size())
	}
	if fileName(key, h.Gen) != name {
		return scannedFile{}, fmt.Errorf("%w: name %s does not match its key and generation", errBadHeader, name)
	}
	return scannedFile{name: name, key: key, h: h, modTime: fi.ModTime().UnixNano()}, nil
}

// isBlockFileName reports whether name looks like a block file's (not validated).
func isBlockFileName(name string) bool {
	return len(name) == fileNameHexLen+1+16+len(fileExt) && strings.HasSuffix(name, fileExt)
}
