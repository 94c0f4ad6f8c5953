package secure

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// The token handshake (see the package doc): the ps speaks first.
const (
	tokenMagic   = "PSA1"
	challengeLen = 32
	macLen       = sha256.Size
)

var (
	errNoChallenge = errors.New("the ps did not open with a token challenge")
	errRefused     = errors.New("the ps closed the connection instead of proving the token back")
	errBadProof    = errors.New("the proof does not match the token")
	errPSProof     = errors.New("the ps's proof does not match this task's token")
)

func proof(token []byte, who string, sc, cc []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("paramserv " + who))
	m.Write(sc)
	m.Write(cc)
	return m.Sum(nil)
}

// serverToken runs the ps's side on rw, a connection that has sent nothing
// the ps has read yet.
func serverToken(rw io.ReadWriter, token []byte) error {
	var hello [len(tokenMagic) + challengeLen]byte
	copy(hello[:], tokenMagic)
	sc := hello[len(tokenMagic):]
	if _, err := rand.Read(sc); err != nil {
		return err
	}
	if _, err := rw.Write(hello[:]); err != nil {
		return err
	}
	var answer [challengeLen + macLen]byte
	if _, err := io.ReadFull(rw, answer[:]); err != nil {
		return err
	}
	cc, mac := answer[:challengeLen], answer[challengeLen:]
	if !hmac.Equal(mac, proof(token, "client", sc, cc)) {
		return errBadProof
	}
	_, err := rw.Write(proof(token, "server", sc, cc))
	return err
}

// clientToken runs the client's side on rw.
func clientToken(rw io.ReadWriter, token []byte) error {
	var hello [len(tokenMagic) + challengeLen]byte
	if _, err := io.ReadFull(rw, hello[:]); err != nil {
		return fmt.Errorf("%w: %v", errNoChallenge, err)
	}
	if string(hello[:len(tokenMagic)]) != tokenMagic {
		return fmt.Errorf("%w: it sent %q", errNoChallenge, hello[:len(tokenMagic)])
	}
	sc := hello[len(tokenMagic):]
	var answer [challengeLen + macLen]byte
	cc := answer[:challengeLen]
	if _, err := rand.Read(cc); err != nil {
		return err
	}
	copy(answer[challengeLen:], proof(token, "client", sc, cc))
	if _, err := rw.Write(answer[:]); err != nil {
		return err
	}
	var back [macLen]byte
	if _, err := io.ReadFull(rw, back[:]); err != nil {
		return fmt.Errorf("%w (%v)", errRefused, err)
	}
	if !hmac.Equal(back[:], proof(token, "server", sc, cc)) {
		return errPSProof
	}
	return nil
}
