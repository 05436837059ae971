package driverkit_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// A driver reads a cluster URL's nodes once and dials through them: the first
// connection goes to the first node that answers, a redial after a loss to the next
// one in turn.
func ExampleDialNodes() {
	u, _ := url.Parse("amqp://user:pass@10.0.0.1:5672,10.0.0.2:5672,10.0.0.3:5672/")
	hosts, _ := driverkit.Hosts(u, "5672")
	nodes := driverkit.NewNodes(hosts)

	down := map[string]bool{"10.0.0.1:5672": true}
	dial := func(_ context.Context, node string) (string, error) {
		if down[node] {
			return "", errors.New("connection refused")
		}
		return "connection to " + node, nil
	}
	conn, _, _ := driverkit.DialNodes(context.Background(), nodes, dial)
	fmt.Println(conn)
	// That node is lost: the next dial starts at the node after it.
	conn, _, _ = driverkit.DialNodes(context.Background(), nodes, dial)
	fmt.Println(conn)
	// Output:
	// connection to 10.0.0.2:5672
	// connection to 10.0.0.3:5672
}
