package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/tinylib/msgp/msgp"

	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/kv"
)

// TestKVEventsWire reads the mock engine's real ZeroMQ messages with a plain SUB socket
// and checks them with an independent msgpack decoder (tinylib/msgp) against vLLM's
// layout: frames (topic, 8-byte big-endian seq, payload), payload [ts, events, rank],
// BlockStored as an 8-element tagged array.
func TestKVEventsWire(t *testing.T) {
	opts := testOptions(t)
	var err error
	opts.KVEvents, err = kvevents.ParseConfig(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:0","topic":"kv-events"}`)
	if err != nil {
		t.Fatal(err)
	}
	s, hs := startServer(t, opts)
	ep, listen := kvevents.ConsumerEndpoint(s.KVEventsEndpoint())
	if listen {
		t.Fatalf("a bound publisher needs a dialling consumer (%s)", s.KVEventsEndpoint())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs := subscribeKVEvents(t, ep)

	// A subscription takes effect asynchronously: send distinct prompts until a batch
	// arrives, then one known prompt whose BlockStored is checked field by field.
	var first zmq4.Msg
	for i := 0; first.Frames == nil; i++ {
		post(t, hs.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, jsonIDs(promptIDs(16+i))))
		select {
		case first = <-msgs:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no KV event message received")
		}
	}
	prompt := make([]uint32, 40) // two full blocks of 16 and 8 more tokens
	for i := range prompt {
		prompt[i] = uint32(50000 + i)
	}
	post(t, hs.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, jsonIDs(prompt)))
	prevSeq := binary.BigEndian.Uint64(first.Frames[1])
	for {
		var m zmq4.Msg
		select {
		case m = <-msgs:
		case <-ctx.Done():
			t.Fatal("BlockStored of the known prompt not received")
		}
		if len(m.Frames) != 3 || string(m.Frames[0]) != "kv-events" || len(m.Frames[1]) != 8 {
			t.Fatalf("frames %q", m.Frames)
		}
		seq := binary.BigEndian.Uint64(m.Frames[1])
		if seq != prevSeq+1 {
			t.Fatalf("seq %d after %d", seq, prevSeq)
		}
		prevSeq = seq
		tree, rest, err := msgp.ReadIntfBytes(m.Frames[2])
		if err != nil || len(rest) != 0 {
			t.Fatalf("independent decode: %v (%d bytes left)", err, len(rest))
		}
		batch, ok := tree.([]any)
		if !ok || len(batch) != 3 {
			t.Fatalf("payload %#v", tree)
		}
		if ts, ok := batch[0].(float64); !ok || ts < 1.7e9 {
			t.Fatalf("ts %#v", batch[0])
		}
		if rank := normalize(batch[2]); rank != uint64(0) {
			t.Fatalf("rank %#v", batch[2])
		}
		for _, ev := range batch[1].([]any) {
			e := normalize(ev).([]any)
			if e[0] != "BlockStored" {
				continue
			}
			if len(e) != 8 || e[4] != uint64(16) || e[5] != nil || e[6] != "GPU" || e[7] != nil {
				t.Fatalf("BlockStored %#v", e)
			}
			var toks []uint32
			for _, x := range e[3].([]any) {
				toks = append(toks, uint32(x.(uint64)))
			}
			if !slices.Equal(toks, prompt[:32]) {
				continue // an earlier request's blocks
			}
			if e[2] != nil || len(e[1].([]any)) != 2 {
				t.Fatalf("known prompt's BlockStored %#v", e)
			}
			// The same message through the package decoder: the router recomputes its
			// hashes from token_ids.
			_, b, err := kvevents.DecodeMessage(m.Frames)
			if err != nil {
				t.Fatal(err)
			}
			for _, dev := range b.Events {
				if dev.Kind == kv.BlockStored && slices.Equal(dev.TokenIDs, prompt[:32]) {
					if got := kv.SequenceHashes(dev.TokenIDs, dev.BlockSize, dev.LoraName); len(got) != 2 {
						t.Fatalf("router hashes %v", got)
					}
					return
				}
			}
			t.Fatal("package decoder lost the BlockStored")
		}
	}
}

// normalize turns the independent decoder's integers into uint64 (non-negative) or int64.
func normalize(v any) any {
	switch x := v.(type) {
	case int64:
		if x >= 0 {
			return uint64(x)
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalize(x[i])
		}
		return out
	}
	return v
}

// subscribeKVEvents dials a ZMQ SUB socket to the engine's KV event endpoint ep (topic
// kv-events) and delivers its messages on the channel returned, until the test ends.
func subscribeKVEvents(t *testing.T, ep string) <-chan zmq4.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { sub.Close() })
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv-events"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial(ep); err != nil {
		t.Fatal(err)
	}
	msgs := make(chan zmq4.Msg, 100)
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	return msgs
}
