package pool

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// KubernetesConfig names the pool to follow and the clients to follow it with.
type KubernetesConfig struct {
	Dynamic   dynamic.Interface    // reads the InferencePool
	Clientset kubernetes.Interface // reads the Pods
	Namespace string               // --pool-namespace
	Name      string               // --pool-name
	// Resync is the informers' resync period; 0: none (watch events only).
	Resync time.Duration
}

// Kubernetes is a Source that follows one InferencePool and the Pods of its namespace
// through informers: the pool through the dynamic client (InferencePoolGVR, converted by
// PoolFromUnstructured), the Pods through a typed informer, filtered by Members. It needs
// get, list and watch on inferencepools and pods in the pool's namespace.
//
// The informers' caches are authoritative; the endpoint list is derived from them on
// every event and replaced whole. It knows no load: wrap it in a Scraper.
type Kubernetes struct {
	cfg       KubernetesConfig
	poolInf   cache.SharedIndexInformer
	podLister corelisters.PodLister
	podInf    cache.SharedIndexInformer
	dynFact   dynamicinformer.DynamicSharedInformerFactory
	podFact   informers.SharedInformerFactory

	mu      sync.RWMutex
	eps     []Endpoint
	pool    *InferencePool // nil while absent or invalid
	err     error          // why the pool is not usable (absent, invalid); nil when it is
	ready   bool
	changed chan struct{} // closed and replaced on each recompute
}

var _ Source = (*Kubernetes)(nil)

// NewKubernetes builds the informers; Start runs them. Errors: a missing client, name
// or namespace.
func NewKubernetes(cfg KubernetesConfig) (*Kubernetes, error) {
	switch {
	case cfg.Dynamic == nil || cfg.Clientset == nil:
		return nil, fmt.Errorf("pool: a dynamic client and a clientset are both needed")
	case cfg.Name == "":
		return nil, fmt.Errorf("pool: --pool-name is required on Kubernetes")
	case cfg.Namespace == "":
		return nil, fmt.Errorf("pool: --pool-namespace is required on Kubernetes")
	}
	k := &Kubernetes{cfg: cfg, changed: make(chan struct{}),
		err: fmt.Errorf("pool: InferencePool %s/%s not seen yet", cfg.Namespace, cfg.Name)}
	k.dynFact = dynamicinformer.NewFilteredDynamicSharedInformerFactory(cfg.Dynamic, cfg.Resync, cfg.Namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.Name).String()
		})
	k.poolInf = k.dynFact.ForResource(InferencePoolGVR).Informer()
	k.podFact = informers.NewSharedInformerFactoryWithOptions(cfg.Clientset, cfg.Resync, informers.WithNamespace(cfg.Namespace))
	pods := k.podFact.Core().V1().Pods()
	k.podInf = pods.Informer()
	k.podLister = pods.Lister()
	// Keep only what Members reads: the namespace holds pods of other workloads too.
	if err := k.podInf.SetTransform(slimPod); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.recompute() },
		UpdateFunc: func(any, any) { k.recompute() },
		DeleteFunc: func(any) { k.recompute() },
	}
	if _, err := k.poolInf.AddEventHandler(h); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	if _, err := k.podInf.AddEventHandler(h); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	return k, nil
}

// slimPod drops the fields of a Pod that Members does not read.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels,
			DeletionTimestamp: pod.DeletionTimestamp, ResourceVersion: pod.ResourceVersion, UID: pod.UID},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP, Conditions: pod.Status.Conditions},
	}, nil
}

// Start runs the informers until ctx ends and returns at once; Ready turns true once
// both caches have synced and the pool is valid. Call it once.
func (k *Kubernetes) Start(ctx context.Context) {
	k.dynFact.Start(ctx.Done())
	k.podFact.Start(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), k.poolInf.HasSynced, k.podInf.HasSynced) {
			k.recompute()
		}
	}()
}

// Shutdown stops the informers' goroutines and waits for them; the context given to
// Start must have ended.
func (k *Kubernetes) Shutdown() {
	k.dynFact.Shutdown()
	k.podFact.Shutdown()
}

// recompute derives the pool, the endpoints and readiness from the caches and wakes
// Changed's waiters.
func (k *Kubernetes) recompute() {
	var pool *InferencePool
	var perr error
	obj, exists, err := k.poolInf.GetStore().GetByKey(k.cfg.Namespace + "/" + k.cfg.Name)
	switch {
	case err != nil:
		perr = fmt.Errorf("pool: %w", err)
	case !exists:
		perr = fmt.Errorf("pool: InferencePool %s/%s not found", k.cfg.Namespace, k.cfg.Name)
	default:
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			perr = fmt.Errorf("pool: InferencePool %s/%s: unexpected %T", k.cfg.Namespace, k.cfg.Name, obj)
			break
		}
		p, err := PoolFromUnstructured(u)
		if err != nil {
			perr = err
			break
		}
		pool = &p
	}
	var eps []Endpoint
	if pool != nil {
		pods, err := k.podLister.Pods(k.cfg.Namespace).List(labels.Everything())
		if err != nil {
			perr = fmt.Errorf("pool: %w", err)
			pool = nil
		} else {
			eps = Members(*pool, pods)
		}
	}
	synced := k.poolInf.HasSynced() && k.podInf.HasSynced()

	k.mu.Lock()
	defer k.mu.Unlock()
	k.pool, k.err, k.eps, k.ready = pool, perr, eps, pool != nil && synced
	close(k.changed)
	k.changed = make(chan struct{})
}

// Endpoints returns the serving pods' endpoints, sorted by Address; none while the pool
// is absent or invalid.
func (k *Kubernetes) Endpoints() []Endpoint {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return slices.Clone(k.eps)
}

// Ready reports whether the pool is resolved (present and valid) and both informers
// have listed once.
func (k *Kubernetes) Ready() bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.ready
}

// Load knows nothing: ok is false (a Scraper adds loads).
func (k *Kubernetes) Load(string) (Load, bool) { return Load{}, false }

// Pool returns the pool as last read; ok is false while it is absent or invalid.
func (k *Kubernetes) Pool() (InferencePool, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.pool == nil {
		return InferencePool{}, false
	}
	return *k.pool, true
}

// Err says why the pool is not usable (not seen yet, not found, invalid: the field is
// named); nil when it is.
func (k *Kubernetes) Err() error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.err
}

// Changed returns a channel closed at the next recompute (any pool or pod event, and
// the initial sync). Take it before checking state, then wait on it.
func (k *Kubernetes) Changed() <-chan struct{} {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.changed
}
