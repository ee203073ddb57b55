package kube

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Down removes what any strait lab run left in every cluster of m:
// namespaces and AccessPolicies labelled by the lab, and, with emu, every
// run's link emulation. It works after a crash: it reads only the
// clusters. Unreachable clusters are errors naming them; the others are
// still cleaned.
func Down(ctx context.Context, m *ClusterMap, emu Emulator) error {
	b, err := New(Options{Clusters: m})
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range m.Names() {
		c, err := b.connect(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := c.cs.Discovery().ServerVersion(); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: API server %s unreachable: %w", name, c.cfg.Host, err))
			continue
		}
		if emu != nil {
			if err := emu.Down(ctx, c.cfg, ""); err != nil {
				errs = append(errs, fmt.Errorf("cluster %s: emulation: %w", name, err))
			}
		}
		if err := removeRun(ctx, c, ManagedByLabel+"="+ManagedBy, 5*time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
