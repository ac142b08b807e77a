package node

import (
	"fmt"
	"sync"
)

// maxEnginePorts bounds the ports --engine-port hands out: one per worker the node runs
// at once (--workers is at most 256).
const maxEnginePorts = 256

// enginePorts hands each worker a fixed engine port from --engine-port up: the lowest
// not held by another live worker, so that a node's engines listen where a gateway's
// InferencePool targetPorts say (docs/epp.md). A worker keeps its port across engine
// restarts; the agent's Released frees it. base 0: every engine takes a free port at
// each start (take returns 0).
type enginePorts struct {
	base int
	mu   sync.Mutex
	held map[string]int // worker id → port
}

func newEnginePorts(base int) *enginePorts {
	return &enginePorts{base: base, held: map[string]int{}}
}

// take returns worker id's port (the one it holds, else the lowest free); error when
// all maxEnginePorts ports are held.
func (p *enginePorts) take(id string) (int, error) {
	if p == nil || p.base == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if port, ok := p.held[id]; ok {
		return port, nil
	}
	used := make(map[int]bool, len(p.held))
	for _, port := range p.held {
		used[port] = true
	}
	for port := p.base; port < p.base+maxEnginePorts && port <= 65535; port++ {
		if !used[port] {
			p.held[id] = port
			return port, nil
		}
	}
	return 0, fmt.Errorf("--engine-port %d: all %d engine ports are held", p.base, maxEnginePorts)
}

// release frees worker id's port.
func (p *enginePorts) release(id string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	delete(p.held, id)
	p.mu.Unlock()
}
