package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
)

// testLatency measures, and only logs (unit tests assert no timing), how
// long the controller takes from a Sandbox's creation to its status
// naming a Pod, seen through the API server with a 2 ms poll: a claim
// bound to a ready warm Pod, a claim with none ready (a new Pod), and an
// inline policy (a new Pod), interleaved with the baseline,
// the same client creating a Pod itself and reading it back. There is no
// node: what a warm Pod saves on one (the image, the container's and
// airlock's start) is not in these numbers.
func testLatency(t *testing.T, e *env) {
	ctx := testCtx(t)
	ns := e.namespace(t, "latency")
	const n = 15
	tp := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: v1alpha1.SandboxTemplateSpec{Policy: podPolicy, Image: "img", WarmPool: 1}}
	if err := e.c.Create(ctx, tp); err != nil {
		t.Fatal(err)
	}
	var warm, cold, inline, base []time.Duration
	for i := range n {
		// A ready warm Pod, then a claim of it.
		pods := e.waitPool(t, ctx, ns, "t", 1)
		e.runPod(t, ctx, &pods[0])
		e.waitReady(t, ctx, tp, 1)
		sb, d := e.claimFast(t, ctx, ns, fmt.Sprintf("w%d", i), "t")
		if !sb.Status.Warm {
			t.Fatalf("claim w%d was not bound to the ready warm pod", i)
		}
		warm = append(warm, d)
		// The refilled Pod is not ready: the next claim gets a new Pod.
		e.waitPool(t, ctx, ns, "t", 1)
		sb, d = e.claimFast(t, ctx, ns, fmt.Sprintf("c%d", i), "t")
		if sb.Status.Warm {
			t.Fatalf("claim c%d was bound to a warm pod that was not ready", i)
		}
		cold = append(cold, d)
		in := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("i%d", i)},
			Spec: v1alpha1.SandboxSpec{Policy: podPolicy, Image: "img", Command: []string{"true"}}}
		began := time.Now()
		if err := e.c.Create(ctx, in); err != nil {
			t.Fatal(err)
		}
		e.boundFast(t, ctx, ns, in.Name)
		inline = append(inline, time.Since(began))

		var pod corev1.Pod
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sb.Status.PodName}, &pod); err != nil {
			t.Fatal(err)
		}
		direct := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("direct-%d", i)}, Spec: pod.Spec}
		began = time.Now()
		if err := e.c.Create(ctx, direct); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(direct), direct); err != nil {
			t.Fatal(err)
		}
		base = append(base, time.Since(began))
	}
	q := func(ds []time.Duration) string {
		slices.Sort(ds)
		return fmt.Sprintf("p50 %v, min %v, max %v", ds[len(ds)/2].Round(time.Millisecond), ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	t.Logf("Sandbox created -> status names its Pod, %d each, interleaved: warm claim %s; claim with no ready warm pod %s; inline policy %s; baseline (the test creates a Pod and reads it back) %s", n, q(warm), q(cold), q(inline), q(base))

	// A burst: burst Sandboxes created at once (8 clients), until every
	// one names its Pod: the controller's throughput with its default
	// DefaultWorkers reconciles at once.
	const burst = 50
	began := time.Now()
	var wg sync.WaitGroup
	names := make(chan string, burst)
	for i := range burst {
		names <- fmt.Sprintf("b%d", i)
	}
	close(names)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
					Spec: v1alpha1.SandboxSpec{Policy: podPolicy, Image: "img", Command: []string{"true"}}}
				if err := e.c.Create(ctx, sb); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	created := time.Since(began)
	waitEvery(t, ctx, "the burst bound", 5*time.Millisecond, func() (bool, error) {
		var list v1alpha1.SandboxList
		if err := e.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		bound := 0
		for _, sb := range list.Items {
			if strings.HasPrefix(sb.Name, "b") && sb.Status.PodName != "" {
				bound++
			}
		}
		return bound == burst, nil
	})
	all := time.Since(began)
	t.Logf("burst: %d inline Sandboxes created in %v, all bound %v after the first create (%.0f Sandboxes/s)", burst, created.Round(time.Millisecond), all.Round(time.Millisecond), burst/all.Seconds())
}

// waitReady waits until tp's status counts ready warm Pods.
func (e *env) waitReady(t *testing.T, ctx context.Context, tp *v1alpha1.SandboxTemplate, ready int32) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("%d ready in %s", ready, tp.Name), func() (bool, error) {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(tp), tp)
		return err == nil && tp.Status.Ready == ready, err
	})
}

// claimFast creates a Sandbox claiming template and returns it once
// bound, and the time that took, polling every 2 ms.
func (e *env) claimFast(t *testing.T, ctx context.Context, ns, name, template string) (*v1alpha1.Sandbox, time.Duration) {
	t.Helper()
	sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.SandboxSpec{TemplateRef: &v1alpha1.TemplateRef{Name: template}, Command: []string{"true"}}}
	began := time.Now()
	if err := e.c.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got := e.boundFast(t, ctx, ns, name)
	return got, time.Since(began)
}

// boundFast waits, polling every 2 ms, until the Sandbox names a Pod.
func (e *env) boundFast(t *testing.T, ctx context.Context, ns, name string) *v1alpha1.Sandbox {
	t.Helper()
	sb := new(v1alpha1.Sandbox)
	waitEvery(t, ctx, "sandbox "+name+" bound", 2*time.Millisecond, func() (bool, error) {
		err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sb)
		return err == nil && sb.Status.PodName != "", err
	})
	return sb
}
