package enginehttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Shape is one JSON form in which an engine reports an error, in an error answer or in
// an error frame of a stream. Each engine lists the shapes it sends, in the order it
// reads them.
type Shape int

const (
	// ErrorObject is {"error": {"message", "type", "param"}}: OpenAI's form (vLLM,
	// SGLang's _create_error_response and stream error frames). It matches when the
	// message is not empty.
	ErrorObject Shape = iota + 1
	// ErrorText is {"error": "<text>"}: trtllm-serve's request validation failures.
	ErrorText
	// TopLevel is {"message", "type"} at the top level: ErrorResponse {"object":
	// "error", "message", "type", "code"} of SGLang and trtllm-serve, and older vLLM. It
	// matches when the message is not empty.
	TopLevel
	// Detail is FastAPI's {"detail": ...}, any value but null, printed with fmt.Sprint.
	Detail
	// ErrorMessageField is {"success": false, "error_message": "<text>"}: SGLang's
	// LoRAUpdateOutput (its LoRA adapter load and unload answers). It matches when the
	// message is not empty.
	ErrorMessageField
)

// ErrorFields are what an error body says. Param is only read from ErrorObject.
type ErrorFields struct {
	Message, Type, Param string
}

// DecodeError reads an error body by the first of shapes that matches. When none does,
// or b is not a JSON object of that form, Message is b's text with surrounding space
// trimmed.
func DecodeError(b []byte, shapes ...Shape) ErrorFields {
	var body struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Detail  any             `json:"detail"`
		ErrMsg  string          `json:"error_message"`
	}
	if json.Unmarshal(b, &body) == nil {
		for _, s := range shapes {
			if s == ErrorMessageField && body.ErrMsg != "" {
				return ErrorFields{Message: body.ErrMsg}
			}
			if f, ok := s.read(body.Error, body.Message, body.Type, body.Detail); ok {
				return f
			}
		}
	}
	return ErrorFields{Message: strings.TrimSpace(string(b))}
}

// read returns the fields of shape s from a decoded body.
func (s Shape) read(errField json.RawMessage, message, typ string, detail any) (ErrorFields, bool) {
	switch s {
	case ErrorObject:
		var inner struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
		}
		if len(errField) == 0 || json.Unmarshal(errField, &inner) != nil || inner.Message == "" {
			return ErrorFields{}, false
		}
		f := ErrorFields{Message: inner.Message, Type: inner.Type}
		if inner.Param != nil {
			f.Param = *inner.Param
		}
		return f, true
	case ErrorText:
		var text string
		if len(errField) == 0 || errField[0] != '"' || json.Unmarshal(errField, &text) != nil {
			return ErrorFields{}, false
		}
		return ErrorFields{Message: text}, true
	case TopLevel:
		return ErrorFields{Message: message, Type: typ}, message != ""
	case Detail:
		return ErrorFields{Message: fmt.Sprint(detail)}, detail != nil
	}
	return ErrorFields{}, false
}

// DecodeAnswer is DecodeError for the body of a non-200 answer with that status: an empty
// message becomes the status's text. Status 0 (an error frame in a stream) has none.
func DecodeAnswer(status int, b []byte, shapes ...Shape) ErrorFields {
	f := DecodeError(b, shapes...)
	if f.Message == "" {
		f.Message = http.StatusText(status)
	}
	return f
}

// ErrorMessage is the text of an engine's error: "<name>: engine answered <status>
// <type>: <message>", "an error frame" in place of a status 0 (an error in the middle of
// a stream), no type when it is empty.
func ErrorMessage(name string, status int, typ, message string) string {
	s := name + ": engine answered"
	if status != 0 {
		s += " " + strconv.Itoa(status)
	} else {
		s += " an error frame"
	}
	if typ != "" {
		s += " " + typ
	}
	return s + ": " + message
}
