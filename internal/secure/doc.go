// Package secure authenticates every connection between the tasks of a job:
// mutual TLS, a shared token, or both, for gRPC and the binary data path
// alike.
//
// A ps serves both protocols on one port (server/mux.go reads a
// connection's first four bytes to tell them apart). Policy.Listener wraps
// the ps's listener before that mux, so every connection it hands out has
// proved itself before the mux reads a byte of a request: the handshake
// runs lazily on the connection's first Read, on the mux's goroutine for
// that connection (never in the accept loop), within HandshakeTimeout. A
// connection that fails is closed, nothing of it is parsed, and the peer is
// logged once, then at most once a minute per peer with a count
// (refusals.go). Policy.Dialer wraps a worker's dial function the same way,
// so client.Options.Dial, trainer.Config.Dial and session.Config.Dial carry
// it to both of the client's protocols.
//
// With TLS (Files.Cert, Key and CA, or Files.Dir with the names that
// `paramserv certs` writes: ca.crt, ps-0.crt, ps-0.key, worker-1.crt, ...)
// both sides speak TLS 1.3 only and verify the peer against the CA: a ps
// requires and verifies a client certificate; a client checks the ps's
// certificate names the host it dialled. Go's TLS 1.3 chooses AES-GCM
// where the CPU has AES instructions.
//
// With a token (Files.TokenFile, the same file on every task), after TLS if
// any, the ps sends "PSA1" and a 32-byte random challenge; the client
// answers with its own 32-byte challenge and HMAC-SHA256(token, "paramserv
// client" || both challenges); the ps checks it in constant time and proves
// itself back with HMAC-SHA256(token, "paramserv server" || both
// challenges). The token never crosses the wire. Without TLS the bytes
// after the handshake are neither encrypted nor protected from someone on
// the path who can rewrite packets; the token keeps out those who can only
// connect.
package secure
