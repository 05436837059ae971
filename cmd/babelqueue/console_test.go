package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestConsoleCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"console"}, 2, "want at least one broker URL"},
		{[]string{"console", "memory://"}, 2, "name its queues"},
		{[]string{"console", "-listen", "0.0.0.0:0", "memory://#orders"}, 2, "needs a login"},
		{[]string{"console", "-token", "t", "-basic", "u:p", "memory://#orders"}, 2, "not both"},
		{[]string{"console", "-basic", "nopassword", "memory://#orders"}, 2, "user:password"},
		{[]string{"console", "nats://user:hunter2@127.0.0.1:4222#orders"}, 1, "unknown URL scheme"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		all := out.String() + errb.String()
		if code != tc.code || !strings.Contains(all, tc.want) || strings.Contains(all, "hunter2") {
			t.Errorf("%v: exit %d, output %q; want exit %d containing %q", tc.args, code, all, tc.code, tc.want)
		}
	}
}

// TestConsoleCommandServes runs the command on a free loopback port, loads the
// overview, and stops it with its context.
func TestConsoleCommandServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr transporttest.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "-listen", "127.0.0.1:0", "-interval", "100ms", "memory://#orders,payments"}, io.Discard, &stderr)
	}()
	addr := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/)`)
	deadline := time.Now().Add(10 * time.Second)
	var base string
	for base == "" {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the console did not say where it listens: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "orders.dlq") || !strings.Contains(string(body), "payments.dlq") {
		t.Errorf("overview: %d\n%s", resp.StatusCode, body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the console did not stop with its context")
	}
}
