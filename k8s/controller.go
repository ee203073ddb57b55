package k8s

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/k8s/api"
)

// Controller reconciles one cluster's MCS objects with the clusterset and
// its gateways. Create it with New, then Run.
type Controller struct {
	cfg    Config
	log    *slog.Logger
	prefix netip.Prefix
	mgr    manager.Manager
	client client.Client
	events record.EventRecorder

	mu     sync.Mutex
	cancel context.CancelFunc
	closed bool
}

var setLoggerOnce sync.Once

// theKey is the one work item: every change means "recompute the cluster".
var theKey = reconcile.Request{}

// New checks cfg and sets up the controller; it contacts the API server
// only in Run.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prefix, _ := cfg.clustersetIPs()
	// controller-runtime's packages log through a global logger; without
	// one they print a warning with a stack trace.
	setLoggerOnce.Do(func() { ctrllog.SetLogger(logr.FromSlogHandler(log.Handler())) })
	mgr, err := ctrl.NewManager(cfg.REST, ctrl.Options{
		Scheme: api.NewScheme(),
		// Pods are cached only as far as Workloads need them (workloads.go).
		Cache:                   cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: stripPod}}},
		Logger:                  logr.FromSlogHandler(log.Handler()),
		Metrics:                 metricsserver.Options{BindAddress: "0"}, // strait serves its own metrics
		HealthProbeBindAddress:  "0",
		LeaderElection:          cfg.LeaderElection,
		LeaderElectionID:        "strait-controller",
		LeaderElectionNamespace: cfg.LeaderElectionNamespace,
		// Hand over at once on a clean stop instead of after the lease
		// runs out; Run returns only after the manager stopped anyway.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("controller: manager: %w", err)
	}
	c := &Controller{cfg: cfg, log: log, prefix: prefix, mgr: mgr, client: mgr.GetClient(),
		events: mgr.GetEventRecorderFor("strait-controller")}

	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{theKey}
	})
	b := ctrl.NewControllerManagedBy(mgr).Named("strait").
		// Tests run several controllers in one process; the name only
		// labels metrics, which strait does not serve from here.
		WithOptions(controller.Options{SkipNameValidation: ptr(true)}).
		Watches(&mcs.ServiceExport{}, all).
		Watches(&mcs.ServiceImport{}, all).
		Watches(&corev1.Service{}, all).
		Watches(&discoveryv1.EndpointSlice{}, all).
		Watches(&api.Peer{}, all).
		Watches(&api.AccessPolicy{}, all).
		// The first pass runs even in an empty cluster: stale objects of a
		// previous run are cleaned up and the gateways get their config.
		WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			q.Add(theKey)
			return nil
		}))
	if len(cfg.GatewayAdmin) > 0 {
		// Only a controller that pushes to gateways needs the pods.
		b = b.Watches(&corev1.Pod{}, all, builder.WithPredicates(podChanges()))
	}
	if cfg.Clusterset != nil {
		b = b.WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-cfg.Clusterset.Changed():
						q.Add(theKey)
					}
				}
			}()
			return nil
		}))
	}
	if err := b.Complete(c); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	return c, nil
}

// Run checks the controller's permissions (so missing RBAC is one clear
// error, not informers retrying forever) and reconciles until ctx ends or
// Close is called. It returns after the manager's goroutines exit.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("controller: closed")
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.mu.Unlock()
	defer c.cancel()
	if err := checkAccess(ctx, c.cfg.REST, c.cfg.SyncOnly, len(c.cfg.GatewayAdmin) > 0, c.cfg.LeaderElection, c.cfg.LeaderElectionNamespace); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	c.log.Info("controller starting", "cluster", c.cfg.Cluster, "syncOnly", c.cfg.SyncOnly,
		"clustersetIPs", c.prefix.String(), "gateways", len(c.cfg.GatewayAdmin))
	return c.mgr.Start(ctx)
}

// Close stops Run; it is idempotent.
func (c *Controller) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.cancel != nil {
		c.cancel()
	}
	return nil
}
