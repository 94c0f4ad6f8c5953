package wire

import (
	"encoding/binary"
)

// Preface returns the client's preface.
func Preface() []byte { return PrefaceVersion(DataVersion) }

// PrefaceVersion returns the client's preface asking for version v.
func PrefaceVersion(v int) []byte {
	b := make([]byte, PrefaceLen)
	copy(b, DataMagic)
	binary.LittleEndian.PutUint16(b[4:], uint16(v))
	return b
}

// CheckPreface checks a client preface and returns the version it asks for.
func CheckPreface(b []byte) (version int, err error) {
	if len(b) != PrefaceLen || string(b[:4]) != DataMagic {
		return 0, frameErr("preface %q does not start with %q", b, DataMagic)
	}
	for _, x := range b[6:] {
		if x != 0 {
			return 0, frameErr("preface %q: reserved bytes are not zero", b)
		}
	}
	return int(binary.LittleEndian.Uint16(b[4:])), nil
}

// Hello is the server's answer to a preface.
type Hello struct {
	Version, Status      int
	Slots, MaxCachedKeys int
}

// Put writes h into b (HelloLen bytes).
func (h Hello) Put(b []byte) {
	copy(b, DataMagic)
	binary.LittleEndian.PutUint16(b[4:], uint16(h.Version))
	binary.LittleEndian.PutUint16(b[6:], uint16(h.Status))
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Slots))
	binary.LittleEndian.PutUint32(b[12:], uint32(h.MaxCachedKeys))
}

// ParseHello reads a server hello.
func ParseHello(b []byte) (Hello, error) {
	if len(b) != HelloLen || string(b[:4]) != DataMagic {
		return Hello{}, frameErr("hello %q does not start with %q", b, DataMagic)
	}
	return Hello{
		Version:       int(binary.LittleEndian.Uint16(b[4:])),
		Status:        int(binary.LittleEndian.Uint16(b[6:])),
		Slots:         int(binary.LittleEndian.Uint32(b[8:])),
		MaxCachedKeys: int(binary.LittleEndian.Uint32(b[12:])),
	}, nil
}
