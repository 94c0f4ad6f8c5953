package sparsedata

import (
	"errors"
	"fmt"
	"strconv"
)

// Kinds of malformed input, wrapped by every *ParseError.
var (
	ErrSyntax      = errors.New("sparse: malformed line")
	ErrKeyRange    = errors.New("sparse: feature index out of range")
	ErrLineTooLong = errors.New("sparse: line too long")
)

// maxTokenInError bounds how much of a bad token an error quotes.
const maxTokenInError = 64

// ParseError reports a malformed line: where it is, the token at fault and
// what was expected there.
type ParseError struct {
	File  string // file name as the reader was given it; may be empty
	Line  int64  // 1-based line number within File; 0 if unknown
	Token string // the offending token (truncated); empty if the whole line is at fault
	Msg   string // what is wrong, e.g. "value is not a number"
	Err   error  // ErrSyntax, ErrKeyRange or ErrLineTooLong
}

// NewParseError returns a ParseError for token tok (copied and truncated)
// of kind kind; the reader fills in File and Line.
func NewParseError(kind error, tok []byte, format string, args ...any) *ParseError {
	t := tok
	suffix := ""
	if len(t) > maxTokenInError {
		t, suffix = t[:maxTokenInError], "..."
	}
	return &ParseError{Token: string(t) + suffix, Msg: fmt.Sprintf(format, args...), Err: kind}
}

// Error formats e as "file:line: token "tok": msg".
func (e *ParseError) Error() string {
	b := make([]byte, 0, len(e.File)+len(e.Token)+len(e.Msg)+32)
	if e.File != "" {
		b = append(b, e.File...)
		b = append(b, ':')
	}
	if e.Line > 0 {
		b = strconv.AppendInt(b, e.Line, 10)
		b = append(b, ':')
	}
	if len(b) > 0 {
		b = append(b, ' ')
	}
	if e.Token != "" {
		b = append(b, "token "...)
		b = strconv.AppendQuote(b, e.Token)
		b = append(b, ": "...)
	}
	b = append(b, e.Msg...)
	return string(b)
}

// Unwrap returns the kind of error, for errors.Is.
func (e *ParseError) Unwrap() error { return e.Err }
