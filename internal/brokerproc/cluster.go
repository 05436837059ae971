package brokerproc

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// LockCluster makes t the only test using the cluster name of scripts/brokers.sh
// (kafka-cluster, say) until it ends: an exclusive lock on a file in the temporary
// directory, taken in turns by every test binary that calls it. go test runs the test
// binaries of several packages at once; a fault test that kills a cluster's nodes must
// not do it under another package's test of the same cluster. It waits up to 15
// minutes for the lock, then fails t.
func LockCluster(t testing.TB, name string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "babelqueue-cluster-"+name+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Minute)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		_ = f.Close()
		t.Fatalf("lock of cluster %s: %v", name, err)
	}
	t.Cleanup(func() { _ = f.Close() }) // closing the file releases the lock
}
