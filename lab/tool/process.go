package tool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/strait-net/strait/lab/topology"
)

// processes are a tool's long-running processes on lab nodes, each with its
// output in a log file of the tool's directory.
type processes struct {
	cmds  []*exec.Cmd
	logs  []*os.File
	procs []Process
}

// start runs argv on node. The process is not tied to ctx: it must outlive
// Setup and stop only in stop.
func (p *processes) start(ctx context.Context, env Env, node *topology.PlanNode, logFile string, argv ...string) error {
	logf, err := os.Create(logFile)
	if err != nil {
		return err
	}
	cmd, err := env.Lab.Command(context.WithoutCancel(ctx), node.ID, argv...)
	if err != nil {
		logf.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s on %s: %w", argv[0], node.ID, err)
	}
	p.cmds = append(p.cmds, cmd)
	p.logs = append(p.logs, logf)
	// `ip netns exec` execs argv in place, so the pid is argv[0]'s.
	p.procs = append(p.procs, Process{Name: filepath.Base(argv[0]), Node: node.ID, PID: cmd.Process.Pid})
	return nil
}

// list returns the running processes.
func (p *processes) list() []Process { return slices.Clone(p.procs) }

// stop interrupts every process, kills those still running after 5 s, and
// closes the logs. It is safe to call more than once.
func (p *processes) stop() error {
	var errs []error
	for _, cmd := range p.cmds {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			errs = append(errs, fmt.Errorf("%s (pid %d) did not stop in 5s", cmd.Args[len(cmd.Args)-1], cmd.Process.Pid))
		}
	}
	for _, f := range p.logs {
		f.Close()
	}
	p.cmds, p.logs, p.procs = nil, nil, nil
	return errors.Join(errs...)
}

// gatewayPair returns the first gateway nodes of the server's and the
// client's clusters, where tools place their data plane so that every tool
// has the hop count of direct routing.
func gatewayPair(env Env, tool string) (serverGW, clientGW *topology.PlanNode, err error) {
	if env.Server.Cluster == env.Client.Cluster {
		return nil, nil, fmt.Errorf("%s connects clusters: server and client are both in cluster %s", tool, env.Server.Cluster)
	}
	for _, p := range []struct {
		gw      **topology.PlanNode
		cluster string
	}{{&serverGW, env.Server.Cluster}, {&clientGW, env.Client.Cluster}} {
		gws := env.Lab.Plan.Gateways(p.cluster)
		if len(gws) == 0 {
			return nil, nil, fmt.Errorf("cluster %s has no gateway node", p.cluster)
		}
		*p.gw = gws[0]
	}
	return serverGW, clientGW, nil
}
