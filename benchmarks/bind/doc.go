// Package bind measures typed handlers on large bodies with the default decoder
// (encoding/json) and with a drop-in faster one given to babelqueue.WithUnmarshal
// (github.com/goccy/go-json), beside the same decoding done on a bare channel. It is a
// module of its own so that the root module keeps to the standard library:
//
//	cd benchmarks/bind && go test -run '^$' -bench . -benchmem -benchtime 300x -count 3
package bind
