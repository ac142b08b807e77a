package main

import (
	"context"
	"sort"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// memStore is an append-only, in-memory float series store that Prometheus' query
// engine reads through storage.Queryable. A recorded run is a few hundred series of a
// few hundred samples: no compression or index is needed. (Prometheus' own tsdb would do,
// but it brings its remote-storage dependencies, cloud SDKs included, into go.mod.)
type memStore struct {
	byKey  map[string]int
	series []memSeries
}

type memSeries struct {
	lset labels.Labels
	smp  []chunks.Sample
}

func newMemStore() *memStore { return &memStore{byKey: map[string]int{}} }

// add appends one sample; samples of a series must come in time order.
func (s *memStore) add(l labels.Labels, t int64, v float64) {
	k := l.String()
	i, ok := s.byKey[k]
	if !ok {
		i = len(s.series)
		s.byKey[k] = i
		s.series = append(s.series, memSeries{lset: l})
	}
	s.series[i].smp = append(s.series[i].smp, fsample{t: t, f: v})
}

// Querier implements storage.Queryable.
func (s *memStore) Querier(mint, maxt int64) (storage.Querier, error) {
	return &memQuerier{s: s, mint: mint, maxt: maxt}, nil
}

type memQuerier struct {
	s          *memStore
	mint, maxt int64
}

func (q *memQuerier) Select(_ context.Context, sortSeries bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	var out []storage.Series
	for _, sr := range q.s.series {
		if !matches(sr.lset, ms) {
			continue
		}
		lo := sort.Search(len(sr.smp), func(i int) bool { return sr.smp[i].T() >= q.mint })
		hi := sort.Search(len(sr.smp), func(i int) bool { return sr.smp[i].T() > q.maxt })
		if lo < hi {
			out = append(out, storage.NewListSeries(sr.lset, sr.smp[lo:hi]))
		}
	}
	if sortSeries {
		sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels(), out[j].Labels()) < 0 })
	}
	return &sliceSet{s: out, i: -1}
}

func matches(l labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(l.Get(m.Name)) {
			return false
		}
	}
	return true
}

func (q *memQuerier) LabelValues(_ context.Context, name string, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	for _, sr := range q.s.series {
		if v := sr.lset.Get(name); v != "" && matches(sr.lset, ms) {
			seen[v] = true
		}
	}
	return sortedKeys(seen), nil, nil
}

func (q *memQuerier) LabelNames(_ context.Context, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	for _, sr := range q.s.series {
		if matches(sr.lset, ms) {
			sr.lset.Range(func(l labels.Label) { seen[l.Name] = true })
		}
	}
	return sortedKeys(seen), nil, nil
}

func (q *memQuerier) Close() error { return nil }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type sliceSet struct {
	s []storage.Series
	i int
}

func (s *sliceSet) Next() bool                        { s.i++; return s.i < len(s.s) }
func (s *sliceSet) At() storage.Series                { return s.s[s.i] }
func (s *sliceSet) Err() error                        { return nil }
func (s *sliceSet) Warnings() annotations.Annotations { return nil }

// fsample is one float sample.
type fsample struct {
	t int64
	f float64
}

func (s fsample) T() int64                      { return s.t }
func (s fsample) ST() int64                     { return 0 }
func (s fsample) F() float64                    { return s.f }
func (s fsample) H() *histogram.Histogram       { return nil }
func (s fsample) FH() *histogram.FloatHistogram { return nil }
func (s fsample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s fsample) Copy() chunks.Sample           { return s }
