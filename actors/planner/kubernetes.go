package planner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	core "github.com/turbine-llm/turbine/planner"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Kinds of Workload.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
)

// Workload is the Kubernetes object that holds one pool's workers.
type Workload struct {
	Kind string // KindDeployment or KindStatefulSet
	Name string
}

// String is "deployment/NAME" or "statefulset/NAME" (ParseWorkload's input).
func (w Workload) String() string { return strings.ToLower(w.Kind) + "/" + w.Name }

// ParseWorkload reads "deployment/NAME" or "statefulset/NAME" (a flag's value; the kind
// is case-insensitive, "deploy" and "sts" are accepted as kubectl spells them).
func ParseWorkload(s string) (Workload, error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return Workload{}, fmt.Errorf("planner: workload %q, want deployment/NAME or statefulset/NAME", s)
	}
	switch strings.ToLower(kind) {
	case "deployment", "deployments", "deploy":
		return Workload{Kind: KindDeployment, Name: name}, nil
	case "statefulset", "statefulsets", "sts":
		return Workload{Kind: KindStatefulSet, Name: name}, nil
	}
	return Workload{}, fmt.Errorf("planner: workload %q: kind %q, want deployment or statefulset", s, kind)
}

// KubeConfig configures the Kubernetes connector (docs/reference.md §27.5).
type KubeConfig struct {
	// Namespace of the workloads (required).
	Namespace string
	// Pools maps each planned pool to its Deployment or StatefulSet (at least one).
	Pools map[core.Pool]Workload
	// Model, when set, is the only model these workloads serve; other models are refused.
	Model string
}

// Kubernetes is the connector that scales Deployments and StatefulSets through their
// scale subresource (the verbs a service account needs: get on deployments and
// statefulsets, get and update on deployments/scale and statefulsets/scale).
type Kubernetes struct {
	cs  kubernetes.Interface
	cfg KubeConfig
}

// NewKubernetes returns the Kubernetes connector over clientset cs (in a pod:
// kubernetes.NewForConfig(rest.InClusterConfig())). Errors: nil clientset, no
// namespace, no pool, a workload without a name or of another kind.
func NewKubernetes(cs kubernetes.Interface, cfg KubeConfig) (*Kubernetes, error) {
	switch {
	case cs == nil:
		return nil, errors.New("planner: kubernetes connector: nil clientset")
	case cfg.Namespace == "":
		return nil, errors.New("planner: kubernetes connector: missing namespace")
	case len(cfg.Pools) == 0:
		return nil, errors.New("planner: kubernetes connector: no pool mapped to a Deployment or StatefulSet")
	}
	for p, w := range cfg.Pools {
		if w.Name == "" || (w.Kind != KindDeployment && w.Kind != KindStatefulSet) {
			return nil, fmt.Errorf("planner: kubernetes connector: pool %s: workload %q/%q, want a named Deployment or StatefulSet", p, w.Kind, w.Name)
		}
	}
	return &Kubernetes{cs: cs, cfg: cfg}, nil
}

// Name is "kubernetes".
func (k *Kubernetes) Name() string { return "kubernetes" }

func (k *Kubernetes) checkModel(model string) error {
	if k.cfg.Model != "" && model != k.cfg.Model {
		return fmt.Errorf("planner: kubernetes connector: model %q: these workloads serve %q", model, k.cfg.Model)
	}
	return nil
}

// replicaStatus is what Fleet reads of a Deployment or StatefulSet.
type replicaStatus struct {
	desired, ready, current, updated int
	rolling                          bool // the controller has not caught up with the spec
}

// fleetOf turns a workload's replica counts into one pool's ready, starting and
// stopping workers (pure; docs/reference.md §27.5): ready is the ready replicas up to the
// desired count; starting the desired replicas not ready yet; stopping the replicas
// beyond the desired count (pods terminating, or old ones of a rollout). A rollout in
// progress counts at least one worker starting, so the planner waits for it as for any
// unfinished step.
func fleetOf(s replicaStatus) (ready, starting, stopping int) {
	ready = min(s.ready, s.desired)
	starting = max(s.desired-ready, 0)
	if s.rolling {
		starting = max(starting, s.desired-s.updated, 1)
	}
	stopping = max(s.current-s.desired, 0)
	return ready, starting, stopping
}

func deploymentStatus(d *appsv1.Deployment) replicaStatus {
	desired := int32(1) // the API server's default
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	st := d.Status
	return replicaStatus{desired: int(desired), ready: int(st.ReadyReplicas), current: int(st.Replicas),
		updated: int(st.UpdatedReplicas),
		rolling: st.ObservedGeneration < d.Generation || st.UpdatedReplicas < desired}
}

func statefulSetStatus(s *appsv1.StatefulSet) replicaStatus {
	desired := int32(1)
	if s.Spec.Replicas != nil {
		desired = *s.Spec.Replicas
	}
	st := s.Status
	return replicaStatus{desired: int(desired), ready: int(st.ReadyReplicas), current: int(st.Replicas),
		updated: int(st.UpdatedReplicas),
		rolling: st.ObservedGeneration < s.Generation ||
			(st.UpdateRevision != "" && st.CurrentRevision != st.UpdateRevision)}
}

// Fleet reads every mapped workload's status.
func (k *Kubernetes) Fleet(ctx context.Context, model string) (core.Fleet, error) {
	if err := k.checkModel(model); err != nil {
		return core.Fleet{}, err
	}
	f := core.Fleet{Ready: map[core.Pool]int{}, Starting: map[core.Pool]int{}, Stopping: map[core.Pool]int{}}
	for pool, w := range k.cfg.Pools {
		var s replicaStatus
		switch w.Kind {
		case KindDeployment:
			d, err := k.cs.AppsV1().Deployments(k.cfg.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				return core.Fleet{}, fmt.Errorf("planner: kubernetes connector: pool %s: %w", pool, err)
			}
			s = deploymentStatus(d)
		case KindStatefulSet:
			ss, err := k.cs.AppsV1().StatefulSets(k.cfg.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				return core.Fleet{}, fmt.Errorf("planner: kubernetes connector: pool %s: %w", pool, err)
			}
			s = statefulSetStatus(ss)
		}
		f.Ready[pool], f.Starting[pool], f.Stopping[pool] = fleetOf(s)
	}
	return f, nil
}

// Scale sets each target pool's workload to its size through the scale subresource
// (GetScale, then UpdateScale when the size differs; a conflict with another writer is
// an error and the next decision tries again). Errors: a pool without a workload, a
// negative size, the API server's errors; pools before a failing one keep their update.
func (k *Kubernetes) Scale(ctx context.Context, model string, target map[core.Pool]int) error {
	if err := k.checkModel(model); err != nil {
		return err
	}
	var errs []error
	for _, pool := range core.Pools {
		n, ok := target[pool]
		if !ok {
			continue
		}
		w, mapped := k.cfg.Pools[pool]
		switch {
		case !mapped:
			errs = append(errs, fmt.Errorf("planner: kubernetes connector: pool %s has no Deployment or StatefulSet", pool))
			continue
		case n < 0:
			errs = append(errs, fmt.Errorf("planner: kubernetes connector: pool %s: size %d < 0", pool, n))
			continue
		}
		if err := k.scale(ctx, w, int32(n)); err != nil {
			errs = append(errs, fmt.Errorf("planner: kubernetes connector: pool %s (%s): %w", pool, w, err))
		}
	}
	return errors.Join(errs...)
}

func (k *Kubernetes) scale(ctx context.Context, w Workload, n int32) error {
	apps := k.cs.AppsV1()
	ns := k.cfg.Namespace
	switch w.Kind {
	case KindDeployment:
		sc, err := apps.Deployments(ns).GetScale(ctx, w.Name, metav1.GetOptions{})
		if err != nil || sc.Spec.Replicas == n {
			return err
		}
		sc.Spec.Replicas = n
		_, err = apps.Deployments(ns).UpdateScale(ctx, w.Name, sc, metav1.UpdateOptions{})
		return err
	default:
		sc, err := apps.StatefulSets(ns).GetScale(ctx, w.Name, metav1.GetOptions{})
		if err != nil || sc.Spec.Replicas == n {
			return err
		}
		sc.Spec.Replicas = n
		_, err = apps.StatefulSets(ns).UpdateScale(ctx, w.Name, sc, metav1.UpdateOptions{})
		return err
	}
}
