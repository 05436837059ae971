package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The demo itself is tested in internal/demo; this checks the subcommand runs it.
func TestDemoSubcommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"demo"}, &out, &errb); code != 0 {
		t.Fatalf("demo exit %d: %s", code, errb.String())
	}
	if s := out.String(); !strings.Contains(s, "BabelQueue demo on memory://") || !strings.Contains(s, "\nSummary: 2 handled") {
		t.Errorf("demo output:\n%s", s)
	}
}

func TestCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"publish", "memory://"}, 2, "-urn is required"},
		{[]string{"publish", "-urn", "urn:x", "-data", "{", "memory://"}, 2, "-data is not JSON"},
		{[]string{"publish", "-urn", "urn:x"}, 2, "want exactly one broker URL"},
		{[]string{"publish", "-urn", "urn:x", "-data", "[1]", "memory://"}, 1, "not a JSON object"},
		{[]string{"consume", "nats://user:hunter2@127.0.0.1:4222"}, 1, "unknown URL scheme"},
		{[]string{"consume", "-keep", "memory://"}, 2, "-keep needs -n"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		all := out.String() + errb.String()
		if code != tc.code || !strings.Contains(all, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d containing %q", tc.args, code, all, tc.code, tc.want)
		}
		if strings.Contains(all, "hunter2") {
			t.Errorf("%v: output shows the password: %s", tc.args, all)
		}
	}
}

func TestPublishAndVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"publish", "-urn", "urn:babel:x", "-data", `{"a":1}`, "-key", "k", "-header", "traceparent=00-x", "memory://"}, &out, &errb); code != 0 {
		t.Fatalf("publish exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "published urn:babel:x to default (meta.id ") {
		t.Errorf("publish said %q", out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"version"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "memory") {
		t.Errorf("version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"consume", "-n", "1", "-idle", "200ms", "memory://"}, &out, &errb); code != 0 {
		t.Errorf("consume of an idle queue: exit %d %s", code, errb.String())
	}
}
