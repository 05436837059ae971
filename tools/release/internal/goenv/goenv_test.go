package goenv

import (
	"context"
	"slices"
	"strings"
	"testing"
)

func TestPublicProxies(t *testing.T) {
	got := PublicProxies("file:///x,https://proxy.golang.org/|https://corp.example/proxy,direct,off")
	if want := []string{"https://proxy.golang.org", "https://corp.example/proxy"}; !slices.Equal(got, want) {
		t.Errorf("PublicProxies = %q, want %q", got, want)
	}
}

// Without a public proxy the chain ends in "off": nothing is fetched from a
// repository's host, and our modules are never looked up outside the local proxy.
// GOPRIVATE and GONOPROXY are emptied: either would send our path past every proxy.
func TestEnvironment(t *testing.T) {
	t.Setenv("GOPRIVATE", "github.com/babelqueue-go/*")
	t.Setenv("GONOPROXY", "github.com/babelqueue-go/*")
	t.Setenv("GOFLAGS", "-mod=vendor")
	e, err := New(context.Background(), Config{Scratch: t.TempDir(), LocalProxy: "file:///p", ModulePrefix: "m.test/r", PublicProxy: "off"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.Proxy, "file:///p,file://") || !strings.HasSuffix(e.Proxy, ",off") {
		t.Errorf("GOPROXY = %q", e.Proxy)
	}
	vars := e.Vars()
	for _, want := range []string{"GOWORK=off", "GOPRIVATE=", "GONOPROXY=", "GONOSUMDB=m.test/r", "GOFLAGS=-modcacherw -trimpath", "GOPROXY=" + e.Proxy} {
		if !slices.Contains(vars, want) {
			t.Errorf("the environment lacks %s", want)
		}
	}
	for _, kv := range vars {
		if strings.HasPrefix(kv, "GOPRIVATE=github") || strings.HasPrefix(kv, "GONOPROXY=github") || kv == "GOFLAGS=-mod=vendor" {
			t.Errorf("the user's %s leaked into the environment", kv)
		}
	}
}
