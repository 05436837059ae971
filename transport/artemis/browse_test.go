package artemis_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestBrowseKit runs the browse kit against the real Artemis: a copy-mode receiver
// shows the queue in order and takes nothing.
func TestBrowseKit(t *testing.T) {
	transporttest.RunBrowse(t, kitConfig(t, true), transporttest.BrowseOptions{})
}
