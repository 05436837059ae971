//go:build unix

package bind_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// order is the data of transporttest.LargeBodies.
type order = transporttest.LargeOrder

// The decoder given to WithUnmarshal must bind what encoding/json binds: the bench body,
// and the cases where decoders most often differ.
func TestGoJSONBindsWhatEncodingJSONBinds(t *testing.T) {
	for _, data := range []string{
		string(mustData(t, transporttest.LargeBodies(1, 4, "bench")[0])),
		`{"order_id":1,"items":[{"sku":"a\u00e9\ud83d\ude00","note":null,"qty":-3,"ratio":1e-7}],"unknown":{"x":[1,2]}}`,
		`{"ORDER_ID":2,"Items":null}`,
	} {
		var std, fast order
		stdErr := json.Unmarshal([]byte(data), &std)
		fastErr := gojson.Unmarshal([]byte(data), &fast)
		if (stdErr == nil) != (fastErr == nil) || !reflect.DeepEqual(std, fast) {
			t.Errorf("%.60s…: encoding/json %+v (%v), go-json %+v (%v)", data, std, stdErr, fast, fastErr)
		}
	}
	var o order
	if err := gojson.Unmarshal([]byte(`{"order_id":"7"}`), &o); err == nil {
		t.Error("go-json bound a string into an int")
	}
}

func mustData(t *testing.T, body []byte) []byte {
	t.Helper()
	env, err := envelope.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	return env.Data
}

// BenchmarkTypedLargeBody: 64 KiB envelopes waiting on memory://, one worker, a typed
// handler (babelqueue.Handle) binding the data with encoding/json ("std") and with
// go-json given to WithUnmarshal ("go-json"); the baselines decode the envelope and bind
// its data with the same decoder on a bare channel. cpu-µs/KiB is the process's CPU per
// KiB of body.
func BenchmarkTypedLargeBody(b *testing.B) {
	const kib = 64
	decoders := []struct {
		name      string
		unmarshal func([]byte, any) error
	}{{"std", json.Unmarshal}, {"go-json", gojson.Unmarshal}}
	for _, dec := range decoders {
		b.Run("runtime/"+dec.name, func(b *testing.B) {
			in := transporttest.LargeBodies(b.N, kib, "bench")
			tr := memory.New()
			app, err := babelqueue.New(tr, babelqueue.WithQueue("bench"), babelqueue.WithUnmarshal(dec.unmarshal),
				babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				b.Fatal(err)
			}
			for _, body := range in {
				tr.Inject("bench", memory.Stored{Body: body})
			}
			var n atomic.Int64
			done := make(chan struct{})
			babelqueue.Handle(app, "urn:babel:orders:created", func(_ context.Context, o order, _ *babelqueue.Message) error {
				if len(o.Items) == 0 {
					b.Error("no items bound")
				}
				if n.Add(1) == int64(len(in)) {
					close(done)
				}
				return nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			cpu := transporttest.ProcessCPU()
			b.ReportAllocs()
			b.ResetTimer()
			go func() { errc <- app.Run(ctx) }()
			<-done
			b.StopTimer()
			transporttest.ReportCPUPerKiB(b, cpu, in)
			cancel()
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		})
		b.Run("baseline/"+dec.name, func(b *testing.B) {
			in := transporttest.LargeBodies(b.N, kib, "bench")
			cpu := transporttest.ProcessCPU()
			b.ReportAllocs()
			b.ResetTimer()
			ch := make(chan []byte, 64)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for body := range ch {
					env, err := envelope.Decode(body)
					if err != nil {
						panic(err)
					}
					var o order
					if err := dec.unmarshal(env.Data, &o); err != nil || len(o.Items) == 0 {
						panic(err)
					}
				}
			}()
			for _, body := range in {
				ch <- body
			}
			close(ch)
			<-done
			b.StopTimer()
			transporttest.ReportCPUPerKiB(b, cpu, in)
		})
	}
}
