package wire

// ErrorBody makes the frame's body a status code and a message (cut to
// MaxErrorMessage bytes).
func (f *Frame) ErrorBody(code uint32, msg string) {
	if len(msg) > MaxErrorMessage {
		msg = msg[:MaxErrorMessage]
	}
	f.u32(int(code))
	f.meta = append(f.meta, msg...)
}

// ReadErrorBody reads an error reply's body: a status code (never 0, gRPC's
// OK) and a message.
func ReadErrorBody(r *BodyReader) (code uint32, msg string, err error) {
	c, err := r.Uint32("error code")
	if err != nil {
		return 0, "", err
	}
	if c == 0 {
		// gRPC's OK: an error that would read as a success.
		return 0, "", frameErr("error reply with status code 0 (OK)")
	}
	b, err := r.Bytes(nil, int(r.Left), "error message")
	return uint32(c), string(b), err
}
