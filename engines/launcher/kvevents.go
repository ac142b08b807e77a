package launcher

import (
	"context"

	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/kv"
)

// KVEventsTopic is the topic Turbine asks engines to publish KV events on.
const KVEventsTopic = "kv-events"

// SubscribeZMQ subscribes to the ZMQ KV events (vLLM's wire format, which SGLang shares)
// of an engine given endpoint, calling fn for each batch until ctx ends. Like vLLM, an
// engine binds only for a "*" host (or ipc://) and otherwise connects, in which case
// this side listens.
func SubscribeZMQ(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	ep, listen := kvevents.ConsumerEndpoint(endpoint)
	return kvevents.SubscribeWith(ctx, kvevents.SubscriberConfig{Endpoint: ep, Topic: KVEventsTopic, Listen: listen}, fn)
}
