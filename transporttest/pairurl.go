package transporttest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// PairURL is [BrokerURL] for a primary/backup pair, whose URL lists every node
// (artemis://h1:5681,h2:5682) and whose passive backup takes no connections: it returns
// the URL in the environment variable name once at least one of its nodes answers.
// Under CI=true a pair none of whose nodes answers fails the test; elsewhere it skips
// it, telling how to start the cluster (scripts/brokers.sh up cluster).
func PairURL(t testing.TB, name, cluster string) string {
	t.Helper()
	raw := os.Getenv(name)
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...) + fmt.Sprintf("; start it with `scripts/brokers.sh up %s` and `eval \"$(scripts/brokers.sh env %s)\"`", cluster, cluster)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: integration tests never skip)", msg)
		}
		t.Skip(msg)
	}
	if raw == "" {
		fail("%s: %s is not set", cluster, name)
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		fail("%s: %s does not parse", cluster, name)
		return ""
	}
	var errs []string
	for _, h := range strings.Split(u.Host, ",") {
		conn, err := net.DialTimeout("tcp", h, 3*time.Second)
		if err == nil {
			_ = conn.Close()
			return raw
		}
		errs = append(errs, err.Error())
	}
	fail("no node of %s at %s answers: %s", cluster, transport.Redact(raw), strings.Join(errs, "; "))
	return ""
}
