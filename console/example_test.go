package console_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// A console for one broker, serving on loopback until interrupted. Beyond loopback
// it needs a login: console.WithToken or console.WithBasicAuth.
func ExampleConsole_ListenAndServe() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	tr, err := transport.Open(ctx, "memory://")
	if err != nil {
		log.Fatal(err)
	}
	c, err := console.New([]console.Broker{{
		URL:       "memory://",
		Transport: tr,
		Queues:    []console.Queue{{Name: "orders"}, {Name: "payments"}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.ListenAndServe(ctx, "127.0.0.1:8080", func(a net.Addr) { log.Printf("console on http://%s/", a) })
	if err != nil {
		log.Fatal(err)
	}
}

// The console is an http.Handler: mount it in a server of your own. Its pages and
// JSON endpoints answer at the root of the handler.
func ExampleNew() {
	tr := memory.New()
	c, err := console.New([]console.Broker{{Name: "local", Transport: tr, Queues: []console.Queue{{Name: "orders"}}}},
		console.WithReadOnly())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(c)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/api/overview")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	// Output: 200 application/json; charset=utf-8
}
