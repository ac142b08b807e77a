package pool

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseEndpoints(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string // addresses; nil when an error is expected
		err      string
	}{
		{name: "one", in: "10.0.0.1:8000", want: []string{"10.0.0.1:8000"}},
		{name: "sorted, spaces, empty items", in: " 10.0.0.2:8000, ,10.0.0.1:8001,", want: []string{"10.0.0.1:8001", "10.0.0.2:8000"}},
		{name: "ipv6 canonical", in: "[2001:DB8::0001]:8000", want: []string{"[2001:db8::1]:8000"}},
		{name: "ipv4-mapped written as ipv4", in: "[::ffff:10.0.0.1]:8000", want: []string{"10.0.0.1:8000"}},
		{name: "empty", in: " , ", err: "no endpoint"},
		{name: "hostname", in: "worker-0:8000", err: "not an IP address"},
		{name: "no port", in: "10.0.0.1", err: "missing port"},
		{name: "port zero", in: "10.0.0.1:0", err: "not in 1..65535"},
		{name: "port too high", in: "10.0.0.1:65536", err: "not in 1..65535"},
		{name: "port not a number", in: "10.0.0.1:http", err: "not in 1..65535"},
		{name: "zone", in: "[fe80::1%eth0]:8000", err: "not an IP address"},
		{name: "duplicate", in: "10.0.0.1:8000,10.0.0.1:8000", err: "listed twice"},
		{name: "duplicate once canonical", in: "[::ffff:10.0.0.1]:8000,10.0.0.1:8000", err: "listed twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eps, err := ParseEndpoints(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--endpoints") {
					t.Fatalf("err %v, want one naming --endpoints with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range eps {
				if e.Pod != "" || e.Labels != nil {
					t.Fatalf("static endpoint with pod data: %+v", e)
				}
				got = append(got, e.Address)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestStaticSource(t *testing.T) {
	s, err := NewStatic("10.0.0.2:8000,10.0.0.1:8000")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Ready() {
		t.Fatal("static source not ready")
	}
	eps := s.Endpoints()
	if len(eps) != 2 || eps[0].Address != "10.0.0.1:8000" {
		t.Fatalf("endpoints %+v", eps)
	}
	eps[0].Address = "changed"
	if s.Endpoints()[0].Address != "10.0.0.1:8000" {
		t.Fatal("Endpoints shares its slice with the caller")
	}
	if _, ok := s.Load("10.0.0.1:8000"); ok {
		t.Fatal("static source claims a load")
	}
	if _, err := NewStatic(""); err == nil {
		t.Fatal("empty list accepted")
	}
}

func FuzzParseEndpoints(f *testing.F) {
	for _, s := range []string{"10.0.0.1:8000", "[::1]:9000,10.0.0.2:1", "a:b", "", ",,", "[::ffff:1.2.3.4]:80", "1.2.3.4:65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		eps, err := ParseEndpoints(in)
		if err != nil {
			return
		}
		if len(eps) == 0 {
			t.Fatal("no endpoints without an error")
		}
		var addrs []string
		for _, e := range eps {
			addrs = append(addrs, e.Address)
		}
		if !slices.IsSorted(addrs) || len(slices.Compact(slices.Clone(addrs))) != len(addrs) {
			t.Fatalf("not sorted and unique: %v", addrs)
		}
		// Canonical addresses parse back to themselves.
		again, err := ParseEndpoints(strings.Join(addrs, ","))
		if err != nil {
			t.Fatalf("canonical list %v rejected: %v", addrs, err)
		}
		if !reflect.DeepEqual(again, eps) {
			t.Fatalf("round trip %v != %v", again, eps)
		}
	})
}
