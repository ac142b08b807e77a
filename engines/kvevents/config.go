package kvevents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Defaults of vLLM's KVEventsConfig (vllm/config/kv_events.py).
const (
	DefaultEndpoint = "tcp://*:5557"
	DefaultHWM      = 100_000
)

// Config is the engine-side event configuration, the JSON object of vLLM's
// --kv-events-config flag, e.g.
//
//	{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv-events"}
//
// Keys: enable_kv_cache_events (bool, default false), publisher ("zmq" or "null";
// default "zmq" when events are enabled, as vLLM), endpoint (default tcp://*:5557),
// topic (default ""), hwm (send high-water mark in messages, default 100000),
// buffer_steps and max_queue_size (accepted for compatibility; this publisher does not
// buffer for replay). replay_endpoint is refused: replay is not implemented.
type Config struct {
	EnableKVCacheEvents bool   `json:"enable_kv_cache_events"`
	Publisher           string `json:"publisher"`
	Endpoint            string `json:"endpoint"`
	ReplayEndpoint      string `json:"replay_endpoint"`
	BufferSteps         int    `json:"buffer_steps"`
	HWM                 int    `json:"hwm"`
	MaxQueueSize        int    `json:"max_queue_size"`
	Topic               string `json:"topic"`
}

// Enabled reports whether events are to be published.
func (c Config) Enabled() bool { return c.EnableKVCacheEvents && c.Publisher == "zmq" }

// ParseConfig parses and validates the JSON of --kv-events-config; "" gives the
// disabled default. Errors name the key that is wrong; unknown keys are errors.
func ParseConfig(s string) (Config, error) {
	c := Config{Endpoint: DefaultEndpoint, HWM: DefaultHWM}
	if strings.TrimSpace(s) == "" {
		c.Publisher = "null"
		return c, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("kvevents: --kv-events-config: %w", err)
	}
	if dec.More() {
		return Config{}, errors.New("kvevents: --kv-events-config: trailing data after the JSON object")
	}
	if c.Publisher == "" {
		c.Publisher = "null"
		if c.EnableKVCacheEvents {
			c.Publisher = "zmq"
		}
	}
	switch c.Publisher {
	case "zmq", "null":
	default:
		return Config{}, fmt.Errorf("kvevents: --kv-events-config: publisher %q: want \"zmq\" or \"null\"", c.Publisher)
	}
	if c.ReplayEndpoint != "" {
		return Config{}, errors.New("kvevents: --kv-events-config: replay_endpoint is not supported")
	}
	if c.HWM < 0 {
		return Config{}, fmt.Errorf("kvevents: --kv-events-config: hwm %d is negative", c.HWM)
	}
	if c.BufferSteps < 0 || c.MaxQueueSize < 0 {
		return Config{}, errors.New("kvevents: --kv-events-config: buffer_steps and max_queue_size must not be negative")
	}
	if c.Enabled() {
		if _, _, err := splitEndpoint(c.Endpoint); err != nil {
			return Config{}, fmt.Errorf("kvevents: --kv-events-config: endpoint: %w", err)
		}
	}
	return c, nil
}

// EngineBinds reports whether an engine given endpoint binds its PUB socket (true) or
// connects it to a consumer that binds (false): vLLM binds when the endpoint holds "*"
// or "::" or uses ipc:// or inproc://, and connects otherwise.
func EngineBinds(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// ConsumerEndpoint returns where a consumer's SUB socket must go for an engine started
// with engineEndpoint, and whether it must listen there (the engine connects) or dial
// (the engine binds; a "*" host becomes 127.0.0.1).
func ConsumerEndpoint(engineEndpoint string) (endpoint string, listen bool) {
	if EngineBinds(engineEndpoint) {
		return strings.Replace(engineEndpoint, "*", "127.0.0.1", 1), false
	}
	return engineEndpoint, true
}

// splitEndpoint checks a tcp:// or ipc:// endpoint.
func splitEndpoint(ep string) (scheme, addr string, err error) {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok {
		return "", "", fmt.Errorf("%q has no scheme (want tcp://host:port or ipc://path)", ep)
	}
	switch scheme {
	case "tcp":
		i := strings.LastIndex(addr, ":")
		if i < 0 || i == len(addr)-1 {
			return "", "", fmt.Errorf("%q has no port", ep)
		}
	case "ipc":
		if addr == "" {
			return "", "", fmt.Errorf("%q has no path", ep)
		}
	default:
		return "", "", fmt.Errorf("%q: scheme %q not supported (want tcp or ipc)", ep, scheme)
	}
	return scheme, addr, nil
}
