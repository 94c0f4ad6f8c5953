package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParseHosts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"127.0.0.1:2222", []string{"127.0.0.1:2222"}},
		{"h1:2222,h2:2223", []string{"h1:2222", "h2:2223"}},
		{" h1:2222 , h2:2223 ", []string{"h1:2222", "h2:2223"}},
		{"tfjob-ps-0.default.svc:2222", []string{"tfjob-ps-0.default.svc:2222"}},
		{"my_host:1,localhost:65535", []string{"my_host:1", "localhost:65535"}},
		{"[::1]:2222,[2001:db8::7]:2223", []string{"[::1]:2222", "[2001:db8::7]:2223"}},
		{"[fe80::1%eth0]:2222", []string{"[fe80::1%eth0]:2222"}},
		{"h:2222,h:2223,H2:2222", []string{"h:2222", "h:2223", "H2:2222"}},
	} {
		got, err := ParseHosts(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseHosts(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestParseHostsErrors(t *testing.T) {
	for _, tc := range []struct {
		in     string
		pieces []string
	}{
		{"", []string{"empty list", "127.0.0.1:2222"}},
		{"  ", []string{"empty list"}},
		{"h1:2222,", []string{"entry 2 of 2 is empty", "stray comma"}},
		{",h1:2222", []string{"entry 1 of 2 is empty"}},
		{"h1:1,,h2:2", []string{"entry 2 of 3 is empty"}},
		{"h1:2222,localhost", []string{`entry 2 "localhost" is not host:port`, "missing port", "want e.g. 127.0.0.1:2222"}},
		{":2222", []string{`entry 1 ":2222" has an empty host`}},
		{"h:", []string{"empty port", "1..65535"}},
		{"h:0", []string{"port 0, out of range", "1..65535"}},
		{"h:65536", []string{"port 65536, out of range"}},
		{"h:99999999999999999999", []string{"out of range"}},
		{"h:http", []string{`port "http", which is not a number`}},
		{"h:+22", []string{`port "+22", which is not a number`}},
		{"h:02222", []string{"leading zero", "write 2222"}},
		{"::1:2222", []string{"too many colons", "in brackets, e.g. [::1]:2222"}},
		{"[::1]", []string{"missing port"}},
		{"[example.com]:22", []string{`"example.com" in brackets, which is not an IPv6 address`}},
		{"[127.0.0.1]:22", []string{"not an IPv6 address"}},
		{"grpc://h:2222", []string{`URL scheme "grpc://"`, "bare host:port"}},
		{"h h:1", []string{`' ' in host "h h"`}},
		{"h/x:1", []string{`'/' in host`}},
		{strings.Repeat("a", 254) + ":1", []string{"254-byte host", "at most 253"}},
		{"h:1,h:1", []string{`entries 1 and 2 are both "h:1"`, "distinct"}},
		{"HOST:1,host:1", []string{"entries 1 ", " and 2 "}},
		{"[::1]:1,[0:0::1]:1", []string{"entries 1 \"[::1]:1\" and 2 \"[0:0::1]:1\" are the same address"}},
		// Before, these two ps were caught only at Init, with a message
		// about another layout.
		{"127.0.0.1:7,localhost:7", []string{`entries 1 "127.0.0.1:7" and 2 "localhost:7" are the same address`}},
		{"LocalHost:7,127.0.0.1:7", []string{`entries 1 "LocalHost:7" and 2 "127.0.0.1:7" are the same address`}},
		{"1.2.3.4:1,[::ffff:1.2.3.4]:1", []string{"entries 1 ", " and 2 "}},
	} {
		_, err := ParseHosts(tc.in)
		t.Run(fmt.Sprintf("%.40s", tc.in), func(t *testing.T) { wantErr(t, err, "", tc.pieces...) })
	}
}
