package tour_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/examples/tour"
)

func TestDemoShowsEverySettlement(t *testing.T) {
	var out bytes.Buffer
	if err := tour.Run(context.Background(), &out, nil); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"handled   order 1042 on its first delivery",
		"handled   order 1043 on retry (attempts=1)",
		"reason=failed  attempts=3",
		"reason=poison",
		`"order_id":1045,"note":"no URN here","dead_letter":{"reason":"poison"`,
		"2 handled, 2 retried, 1 dead-lettered as failed, 1 poison dead-lettered at once; 0 left on the queue",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
}

func TestDemoRejectsUnknownFlags(t *testing.T) {
	var out bytes.Buffer
	if err := tour.Run(context.Background(), &out, []string{"-nope"}); err == nil {
		t.Fatal("demo -nope: no error")
	}
}
