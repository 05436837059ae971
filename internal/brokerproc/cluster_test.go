package brokerproc

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLockCluster: while a test holds a cluster, another taker of its lock (another
// test binary's LockCluster) is refused; once the test ends, the lock is free.
func TestLockCluster(t *testing.T) {
	name := "locktest-" + filepath.Base(t.TempDir())
	path := filepath.Join(os.TempDir(), "babelqueue-cluster-"+name+".lock")
	t.Cleanup(func() { _ = os.Remove(path) })
	try := func() error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	t.Run("holder", func(t *testing.T) {
		LockCluster(t, name)
		if err := try(); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Fatalf("lock taken beside the holder: %v", err)
		}
	})
	if err := try(); err != nil {
		t.Fatalf("lock still held after the holder ended: %v", err)
	}
}
