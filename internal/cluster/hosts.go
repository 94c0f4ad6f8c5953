package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// maxHostLen is the longest host name accepted, as in DNS.
const maxHostLen = 253

// ParseHosts parses a comma-separated list of host:port addresses, such as
// "h1:2222,h2:2223", as --ps_hosts and --worker_hosts take it. Spaces around
// an entry are dropped. An empty list, an empty entry, an entry that is not
// host:port (see the package doc) or an address listed twice is an *Error
// that numbers the entry from 1.
func ParseHosts(list string) ([]string, error) {
	return parseHosts("", list)
}

func parseHosts(src, list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, errorf(src, "empty list (want comma-separated host:port, e.g. 127.0.0.1:2222,127.0.0.1:2223)")
	}
	parts := strings.Split(list, ",")
	hosts := make([]string, 0, len(parts))
	seen := make(map[string]int, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, errorf(src, "entry %d of %d is empty (a stray comma?); want host:port entries separated by single commas", i+1, len(parts))
		}
		key, why := checkHostPort(p)
		if why != "" {
			return nil, errorf(src, "entry %d %q %s", i+1, p, why)
		}
		if j, dup := seen[key]; dup {
			if hosts[j] != p {
				return nil, errorf(src, "entries %d %q and %d %q are the same address (want a distinct host:port for every task)", j+1, hosts[j], i+1, p)
			}
			return nil, errorf(src, "entries %d and %d are both %q (want a distinct host:port for every task)", j+1, i+1, p)
		}
		seen[key] = i
		hosts = append(hosts, p)
	}
	return hosts, nil
}

// checkHostPort checks one address. When it is good, key identifies it for
// duplicate detection (lower-case host or canonical IP, and port) and why is
// "". Otherwise why completes the sentence "entry 2 "x" ...", saying what was
// wrong and what is wanted.
func checkHostPort(s string) (key, why string) {
	const want = "want e.g. 127.0.0.1:2222"
	if s == "" {
		return "", "is empty (want host:port, e.g. 127.0.0.1:2222)"
	}
	if i := strings.Index(s, "://"); i >= 0 {
		return "", fmt.Sprintf("has a URL scheme %q (want bare host:port, e.g. 127.0.0.1:2222)", s[:i+3])
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		reason := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			reason = ae.Err
		}
		hint := want
		if !strings.HasPrefix(s, "[") && strings.Count(s, ":") > 1 {
			hint = "an IPv6 address goes in brackets, e.g. [::1]:2222"
		}
		return "", fmt.Sprintf("is not host:port (%s; %s)", reason, hint)
	}
	if host == "" {
		return "", "has an empty host (" + want + ")"
	}
	if len(host) > maxHostLen {
		return "", fmt.Sprintf("has a %d-byte host (want at most %d)", len(host), maxHostLen)
	}
	hostKey := strings.ToLower(host)
	if s[0] == '[' {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return "", fmt.Sprintf("has %q in brackets, which is not an IPv6 address (brackets are for IPv6 only, e.g. [::1]:2222)", host)
		}
		hostKey = a.Unmap().String()
	} else {
		for _, r := range host {
			if !isHostChar(r) {
				return "", fmt.Sprintf("has %q in host %q (want a hostname or IPv4 address: letters, digits, '.', '-', '_')", r, host)
			}
		}
		if a, err := netip.ParseAddr(host); err == nil {
			hostKey = a.String()
		}
		if hostKey == "localhost" || strings.HasSuffix(hostKey, ".localhost") {
			// localhost is the loopback address by every resolver
			// (RFC 6761): localhost:P and 127.0.0.1:P are one task's port.
			hostKey = "127.0.0.1"
		}
	}
	if why := checkPort(port); why != "" {
		return "", why
	}
	return hostKey + " " + port, ""
}

func isHostChar(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' ||
		r == '.' || r == '-' || r == '_'
}

// checkPort wants a decimal number in 1..65535 written without a sign or
// leading zeros, so that one port has one spelling.
func checkPort(port string) string {
	if port == "" {
		return "has an empty port (want a number 1..65535)"
	}
	for _, r := range port {
		if r < '0' || r > '9' {
			return fmt.Sprintf("has port %q, which is not a number (want 1..65535)", port)
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("has port %s, out of range (want 1..65535)", port)
	}
	if port[0] == '0' {
		return fmt.Sprintf("has port %q with a leading zero (write %d)", port, n)
	}
	return ""
}
