package gateway

import (
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"strings"
)

// acceptedEncodings is the Accept-Encoding of a 415 answer (RFC 7694): the request
// content codings readBody decodes.
const acceptedEncodings = "gzip, deflate"

// contentCoding reads a request's Content-Encoding header lines: "" when the body is
// not encoded (no header, or only "identity"), "gzip" (also "x-gzip") or "deflate"
// (the zlib format, RFC 9110 §8.4.1.2). Other codings, and more than one coding applied
// in turn, get KindUnsupportedEncoding (415), naming the header's value clipped to
// maxEchoedNameBytes. Coding names are case-insensitive.
func contentCoding(values []string) (string, *APIError) {
	coding := ""
	for _, v := range values {
		for _, c := range strings.Split(v, ",") {
			switch c = strings.ToLower(strings.TrimSpace(c)); c {
			case "", "identity":
				continue
			case "x-gzip":
				c = "gzip"
			}
			if c != "gzip" && c != "deflate" || coding != "" {
				return "", newError(KindUnsupportedEncoding, "",
					"The request's Content-Encoding %s is not supported: send the body uncompressed, or compressed with gzip or deflate.",
					clipName(strings.Join(values, ", ")))
			}
			coding = c
		}
	}
	return coding, nil
}

// decodeEncodedBody reads the body r (already bounded to limit bytes as received, by
// http.MaxBytesReader) encoded with coding ("gzip" or "deflate") and returns the
// decoded bytes. Errors: KindBodyTooLarge when the body as received, or decoded, is
// larger than limit bytes (decoding stops there: a small body that inflates to
// gigabytes costs limit bytes of memory); KindInvalidEncoding when it is not valid data
// of its coding (corrupt, truncated, a wrong checksum, trailing bytes that are not a
// gzip member).
func decodeEncodedBody(coding string, r io.Reader, limit int64) (body []byte, aerr *APIError) {
	defer func() {
		if aerr != nil {
			// Read what is left of the body as received (at most limit bytes): a server
			// that answers with unread request data on the connection resets it, and the
			// client (one that waited for 100 Continue, say) sees no answer at all.
			_, _ = io.Copy(io.Discard, r)
		}
	}()
	var dec io.Reader
	var err error
	switch coding {
	case "gzip":
		dec, err = gzip.NewReader(r)
	case "deflate":
		dec, err = zlib.NewReader(r)
	default:
		return nil, newError(KindUnsupportedEncoding, "", "The request's Content-Encoding %s is not supported.", clipName(coding))
	}
	if err == nil {
		body, err = io.ReadAll(io.LimitReader(dec, limit+1))
		if err == nil {
			if int64(len(body)) > limit {
				return nil, newError(KindBodyTooLarge, "", "The request body is larger than the limit of %d bytes once decoded (Content-Encoding %s).", limit, coding)
			}
			return body, nil
		}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, newError(KindBodyTooLarge, "", "The request body is larger than the limit of %d bytes.", limit)
	}
	e := newError(KindInvalidEncoding, "", "The request body is not valid %s data (its Content-Encoding): %v.", coding, err)
	e.Cause = err
	return nil, e
}
