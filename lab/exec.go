package lab

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"text/tabwriter"
)

// Command returns a command that runs argv inside the namespace of node
// (an ID "cluster/node" or a namespace name). Labs run workloads, load
// generators and tools this way: as ordinary processes placed with
// `ip netns exec`, never by switching namespaces inside this process.
func (l *Lab) Command(ctx context.Context, node string, argv ...string) (*exec.Cmd, error) {
	n, err := l.Node(node)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command to run on %s", n.ID)
	}
	args := append([]string{"netns", "exec", n.Netns}, argv...)
	return exec.CommandContext(ctx, "ip", args...), nil
}

// WriteStatus prints the lab's nodes and links.
func (l *Lab) WriteStatus(w io.Writer) error {
	fmt.Fprintf(w, "lab %s: %d nodes, %d links, emulation %s", l.Plan.Name, len(l.Plan.Nodes), len(l.Plan.Links), l.Backend)
	if l.EmulatorPID != 0 {
		alive := "running"
		if !processAlive(l.EmulatorPID) {
			alive = "NOT RUNNING"
		}
		fmt.Fprintf(w, " (emulator pid %d, %s)", l.EmulatorPID, alive)
	}
	fmt.Fprintf(w, ", up since %s\n\n", l.Created.Format("2006-01-02 15:04:05Z"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNAMESPACE\tADDRESS\tGATEWAY\tTCP CC")
	for _, n := range l.Plan.Nodes {
		gw := ""
		if n.Gateway {
			gw = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.ID, n.Netns, n.Addr, gw, n.CongestionControl)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINK\tCLASS\tA END\tB END\tA→B\tB→A")
	for _, lk := range l.Plan.Links {
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s %s\t%s\t%s\n", lk.Name, lk.Class,
			lk.A.Device, lk.A.Addr, lk.B.Device, lk.B.Addr, lk.AtoB, lk.BtoA)
	}
	return tw.Flush()
}
