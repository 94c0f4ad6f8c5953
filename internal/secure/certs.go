package secure

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// CAKeyFile is the CA's private key in a directory `paramserv certs`
// writes. Tasks never read it; keep it out of the pods (the Secret manifest
// leaves it out).
const CAKeyFile = "ca.key"

// SecretFile is the Kubernetes Secret manifest `paramserv certs` writes.
const SecretFile = "secret.yaml"

// CertsConfig says what MakeCerts makes.
type CertsConfig struct {
	PS, Workers []string // each task's address (host:port) or host
	Out         string   // the directory, made if missing
	Valid       time.Duration
	SecretName  string // the Secret manifest's name
	Force       bool   // replace an existing CA key
	Now         time.Time
}

// ErrCAExists is returned by MakeCerts when Out already holds a CA key and
// Force is not set.
var ErrCAExists = errors.New("secure: the directory already holds a CA key")

// MakeCerts makes a CA (ECDSA P-256) and one certificate and key per task,
// signed by it, naming the task's host (a DNS name or an IP address) and
// usable as server and client, and a Kubernetes Secret manifest holding
// every file but the CA key. It returns the files written.
func MakeCerts(cfg CertsConfig) ([]string, error) {
	if len(cfg.PS) == 0 || len(cfg.Workers) == 0 {
		return nil, fmt.Errorf("want at least one ps and one worker; have %d ps and %d workers", len(cfg.PS), len(cfg.Workers))
	}
	if cfg.Valid <= 0 {
		return nil, fmt.Errorf("validity %v: want a positive duration", cfg.Valid)
	}
	if cfg.Now.IsZero() {
		cfg.Now = time.Now()
	}
	if cfg.SecretName == "" {
		cfg.SecretName = "paramserv-tls"
	}
	caKeyPath := filepath.Join(cfg.Out, CAKeyFile)
	if _, err := os.Stat(caKeyPath); err == nil && !cfg.Force {
		return nil, fmt.Errorf("%w: %s (a new CA invalidates every certificate it signed; give --force to replace it)", ErrCAExists, caKeyPath)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "paramserv CA", Organization: []string{"paramserv"}},
		NotBefore:             cfg.Now.Add(-time.Hour),
		NotAfter:              cfg.Now.Add(cfg.Valid),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{CAFile: pemBlock("CERTIFICATE", caDER)}
	keyDER, err := x509.MarshalPKCS8PrivateKey(caKey)
	if err != nil {
		return nil, err
	}
	files[CAKeyFile] = pemBlock("PRIVATE KEY", keyDER)
	for _, job := range []struct {
		name  string
		addrs []string
	}{{"ps", cfg.PS}, {"worker", cfg.Workers}} {
		for i, addr := range job.addrs {
			host := hostOf(addr)
			if host == "" {
				return nil, fmt.Errorf("%s %d: address %q has no host", job.name, i, addr)
			}
			crt, key, err := issue(caCert, caKey, job.name, i, host, cfg)
			if err != nil {
				return nil, err
			}
			files[CertFile(job.name, i)], files[KeyFile(job.name, i)] = crt, key
		}
	}
	files[SecretFile] = secretManifest(cfg.SecretName, files)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	// The CA key last: a run that fails midway leaves no CA key that
	// would make the next run need --force.
	sort.SliceStable(names, func(i, j int) bool { return names[j] == CAKeyFile && names[i] != CAKeyFile })
	var written []string
	for _, n := range names {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(n, ".key") || n == SecretFile {
			mode = 0o600
		}
		path := filepath.Join(cfg.Out, n)
		if err := writeFile(path, files[n], mode); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// issue makes the certificate of task job/index: its Common Name
// JOB-INDEX and its URI TaskURI name the task, which decides the roles its
// holder may take (docs/SECURITY.md); its DNS name or IP address, host.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, job string, index int, host string, cfg CertsConfig) (crt, key []byte, err error) {
	name := fmt.Sprintf("%s-%d", job, index)
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	t := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"paramserv"}},
		NotBefore:    cfg.Now.Add(-time.Hour),
		NotAfter:     cfg.Now.Add(cfg.Valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{TaskURI(job, index)},
	}
	if ip := net.ParseIP(host); ip != nil {
		t.IPAddresses = []net.IP{ip}
	} else {
		t.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, t, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kd), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return strings.Trim(addr, "[]")
}

// secretManifest is a Kubernetes Secret of every file but the CA key (and
// itself), to mount as --tls_dir in every pod.
func secretManifest(name string, files map[string][]byte) []byte {
	var names []string
	for n := range files {
		if n != CAKeyFile && n != SecretFile {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "# Made by paramserv certs: the CA certificate and every task's certificate\n# and key (not the CA key). Mount it in every pod and pass its mount path as --tls_dir.\n")
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  labels:\n    app.kubernetes.io/name: paramserv\ntype: Opaque\ndata:\n", name)
	for _, n := range names {
		fmt.Fprintf(&b, "  %s: %s\n", n, base64.StdEncoding.EncodeToString(files[n]))
	}
	return []byte(b.String())
}
