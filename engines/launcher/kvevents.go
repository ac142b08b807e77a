package launcher

import (
	"context"
	"encoding/json"

	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/kv"
)

// KVEventsConfig is vLLM's --kv-events-config JSON (docs/reference.md §1).
type KVEventsConfig struct {
	EnableKVCacheEvents bool   `json:"enable_kv_cache_events"`
	Publisher           string `json:"publisher"`
	Endpoint            string `json:"endpoint"`
	Topic               string `json:"topic"`
}

// sglangKVEventsConfig is SGLang's --kv-events-config JSON
// (python/sglang/srt/disaggregation/kv_events.py, KVEventsConfig): no enable key; a
// "zmq" publisher is on.
type sglangKVEventsConfig struct {
	Publisher string `json:"publisher"`
	Endpoint  string `json:"endpoint"`
	Topic     string `json:"topic"`
}

// KVEventsTopic is the topic Turbine asks engines to publish KV events on.
const KVEventsTopic = "kv-events"

// vllmKVEventsJSON renders vLLM's --kv-events-config for a ZMQ publisher at endpoint.
func vllmKVEventsJSON(endpoint string) string {
	b, _ := json.Marshal(KVEventsConfig{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: endpoint, Topic: KVEventsTopic})
	return string(b)
}

// sglangKVEventsJSON renders SGLang's --kv-events-config for a ZMQ publisher at endpoint.
func sglangKVEventsJSON(endpoint string) string {
	b, _ := json.Marshal(sglangKVEventsConfig{Publisher: "zmq", Endpoint: endpoint, Topic: KVEventsTopic})
	return string(b)
}

// subscribeZMQ subscribes to the ZMQ KV events (vLLM's wire format, which SGLang shares)
// of an engine given endpoint. Like vLLM, an engine binds only for a "*" host (or ipc://)
// and otherwise connects, in which case this side listens.
func subscribeZMQ(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	ep, listen := kvevents.ConsumerEndpoint(endpoint)
	return kvevents.SubscribeWith(ctx, kvevents.SubscriberConfig{Endpoint: ep, Topic: KVEventsTopic, Listen: listen}, fn)
}
