package metrics

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/babelqueue-go/babelqueue"
)

// ownHistograms are the Observer's two histograms kept by a [Prometheus] itself, in
// lock-free cells, and handed to its exporter by a producer when it is scraped: a
// measurement is a bucket search and a few atomic operations, where the SDK's
// synchronous histogram checks and hashes the attribute set again for every record.
// Every Observer given the Prometheus's provider records here, so two Observers of one
// label set add to one series, as two instruments of one name do in the SDK.
type ownHistograms struct {
	start time.Time

	mu               sync.Mutex
	duration, age    *histogram // nil until the first Observer
	durationB, ageB  []float64
	descDur, descAge string
}

// use returns the duration and age histograms, made with the bounds of the first
// Observer; an Observer that asks other bounds gets an error (the SDK would export two
// conflicting streams of one name).
func (hs *ownHistograms) use(durationB, ageB []float64, descDur, descAge string) (*histogram, *histogram, error) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.duration == nil {
		hs.duration = newHistogram(durationB)
		hs.age = newHistogram(ageB)
		hs.durationB, hs.ageB = hs.duration.bounds, hs.age.bounds
		hs.descDur, hs.descAge = descDur, descAge
		return hs.duration, hs.age, nil
	}
	if !slices.Equal(hs.durationB, sortedBounds(durationB)) || !slices.Equal(hs.ageB, sortedBounds(ageB)) {
		return nil, nil, fmt.Errorf("metrics: the Prometheus's histograms already have other bucket bounds (an Observer before this one set them)")
	}
	return hs.duration, hs.age, nil
}

// Produce reports the histograms as the SDK's cumulative explicit-bucket histograms
// of the Observer's scope. It is the [sdkmetric.Producer] of the exporter.
func (hs *ownHistograms) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	hs.mu.Lock()
	duration, age, descDur, descAge := hs.duration, hs.age, hs.descDur, hs.descAge
	hs.mu.Unlock()
	if duration == nil {
		return nil, nil
	}
	now := time.Now()
	return []metricdata.ScopeMetrics{{
		Scope: instrumentation.Scope{Name: ScopeName, Version: babelqueue.Version},
		Metrics: []metricdata.Metrics{
			duration.metric(nameDuration, descDur, hs.start, now),
			age.metric(nameAge, descAge, hs.start, now),
		},
	}}, nil
}

// histogram is one explicit-bucket histogram: a cell per label set.
type histogram struct {
	bounds []float64
	cells  cow[labels, *hcell]
}

func sortedBounds(b []float64) []float64 {
	b = slices.Clone(b)
	slices.Sort(b)
	return b
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: sortedBounds(bounds)}
}

// cell is the cell of the series with labels l.
func (h *histogram) cell(l labels) *hcell {
	return h.cells.get(l, func() *hcell {
		c := &hcell{h: h, attrs: l.set(), counts: make([]atomic.Uint64, len(h.bounds)+1)}
		c.min.Store(math.Float64bits(math.Inf(1)))
		c.max.Store(math.Float64bits(math.Inf(-1)))
		return c
	})
}

// hcell is one series: the bucket counts, the sum, the minimum and the maximum, each
// updated atomically. A scrape during a record may see the record's bucket counted and
// its sum not yet added (one measurement apart, never lost).
type hcell struct {
	h             *histogram
	attrs         attribute.Set
	counts        []atomic.Uint64 // len(bounds)+1: (-inf, b0], (b0, b1], ..., (bn, +inf)
	sum, min, max atomic.Uint64   // float64 bits
}

// record adds v, as the SDK's histogram does: the bucket is the first whose upper
// bound is at least v.
func (c *hcell) record(v float64) {
	c.counts[sort.SearchFloat64s(c.h.bounds, v)].Add(1)
	for {
		old := c.sum.Load()
		if c.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			break
		}
	}
	for {
		old := c.min.Load()
		if v >= math.Float64frombits(old) || c.min.CompareAndSwap(old, math.Float64bits(v)) {
			break
		}
	}
	for {
		old := c.max.Load()
		if v <= math.Float64frombits(old) || c.max.CompareAndSwap(old, math.Float64bits(v)) {
			break
		}
	}
}

func (h *histogram) metric(name, desc string, start, now time.Time) metricdata.Metrics {
	var points []metricdata.HistogramDataPoint[float64]
	for _, c := range h.cells.all() {
		dp := metricdata.HistogramDataPoint[float64]{
			Attributes:   c.attrs,
			StartTime:    start,
			Time:         now,
			Bounds:       slices.Clone(h.bounds),
			BucketCounts: make([]uint64, len(c.counts)),
		}
		for i := range c.counts {
			dp.BucketCounts[i] = c.counts[i].Load()
			dp.Count += dp.BucketCounts[i]
		}
		if dp.Count == 0 {
			continue
		}
		dp.Sum = math.Float64frombits(c.sum.Load())
		if lo, hi := math.Float64frombits(c.min.Load()), math.Float64frombits(c.max.Load()); lo <= hi {
			dp.Min, dp.Max = metricdata.NewExtrema(lo), metricdata.NewExtrema(hi)
		}
		points = append(points, dp)
	}
	return metricdata.Metrics{
		Name: name, Description: desc, Unit: "s",
		Data: metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality, DataPoints: points},
	}
}
