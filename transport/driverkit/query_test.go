package driverkit

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

func query(t *testing.T, raw string) Query {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParseQuery("x", u)
	if err != nil {
		t.Fatalf("ParseQuery(%s): %v", raw, err)
	}
	return q
}

func TestParseDurationGrammar(t *testing.T) {
	cases := []struct {
		in   string
		unit time.Duration
		want time.Duration
		bad  bool
	}{
		{"1500ms", time.Second, 1500 * time.Millisecond, false},
		{"1m30s", time.Second, 90 * time.Second, false},
		{"60", time.Second, time.Minute, false},
		{"0.5", time.Second, 500 * time.Millisecond, false},
		{"250", time.Millisecond, 250 * time.Millisecond, false},
		{" 2s ", time.Second, 2 * time.Second, false},
		{"0", time.Second, 0, false},
		{"-1", time.Second, 0, true},
		{"-5s", time.Second, 0, true},
		{"NaN", time.Second, 0, true},
		{"inf", time.Second, 0, true},
		{"1e300", time.Second, 0, true},
		{"ten", time.Second, 0, true},
		{"10 s", time.Second, 0, true},
		{"", time.Second, 0, true},
	}
	for _, c := range cases {
		got, err := parseDuration(c.in, c.unit)
		if c.bad {
			if err == nil {
				t.Errorf("parseDuration(%q) = %s, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseDuration(%q, %s) = %s, %v; want %s", c.in, c.unit, got, err, c.want)
		}
	}
}

func TestQueryDurationNamesTheParameter(t *testing.T) {
	q := query(t, "redis://h/0?retry_after=soon&linger=2ms&big=2h")
	_, ok, err := q.Duration("retry_after", time.Second, time.Millisecond, 0)
	var bad *transport.BadURLError
	if !ok || !errors.As(err, &bad) || bad.Param != "retry_after" || !errors.Is(err, transport.ErrBadURL) {
		t.Fatalf("bad duration: ok=%v err=%v, want a BadURLError naming retry_after", ok, err)
	}
	if !strings.Contains(err.Error(), `"soon"`) || !strings.Contains(err.Error(), "seconds") {
		t.Fatalf("error does not say the value and the unit: %v", err)
	}
	if d, ok, err := q.Duration("linger", time.Millisecond, 0, time.Minute); err != nil || !ok || d != 2*time.Millisecond {
		t.Fatalf("linger = %s %v %v", d, ok, err)
	}
	if _, _, err := q.Duration("big", time.Second, 0, time.Hour); err == nil || !strings.Contains(err.Error(), "1h0m0s") {
		t.Fatalf("out of range: %v, want an error with the bounds", err)
	}
	if d, ok, err := q.Duration("absent", time.Second, 0, 0); d != 0 || ok || err != nil {
		t.Fatalf("absent = %s %v %v", d, ok, err)
	}
}

func TestQueryBoolIntString(t *testing.T) {
	q := query(t, "x://h?a=YES&b=off&c=maybe&n=7&m=70&s=&v=x")
	for name, want := range map[string]bool{"a": true, "b": false} {
		if got, ok, err := q.Bool(name); err != nil || !ok || got != want {
			t.Errorf("Bool(%s) = %v %v %v", name, got, ok, err)
		}
	}
	if _, _, err := q.Bool("c"); err == nil {
		t.Error("Bool(maybe) accepted")
	}
	if n, ok, err := q.Int("n", 0, 10); err != nil || !ok || n != 7 {
		t.Errorf("Int(n) = %d %v %v", n, ok, err)
	}
	if _, _, err := q.Int("m", 0, 10); err == nil || !strings.Contains(err.Error(), "from 0 to 10") {
		t.Errorf("Int out of range: %v", err)
	}
	if _, ok, err := q.NonEmpty("s"); !ok || err == nil {
		t.Errorf("NonEmpty(empty) = %v %v, want an error", ok, err)
	}
	if v, ok := q.String("v"); !ok || v != "x" {
		t.Errorf("String(v) = %q %v", v, ok)
	}
	if q.Has("zzz") {
		t.Error("Has(zzz)")
	}
}

func TestParseQueryRefusesRepeats(t *testing.T) {
	u, _ := url.Parse("x://h?a=1&a=2")
	_, err := ParseQuery("x", u)
	var bad *transport.BadURLError
	if !errors.As(err, &bad) || bad.Param != "a" {
		t.Fatalf("repeated parameter: %v", err)
	}
}
