package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TCXLinks lists the tcx links (tc programs attached by BPF link, as
// lab/kube/linkemu/nodeemu attaches its own) that processes in network
// namespace netns hold, as "pid P (comm): ifindex I attach_type A prog_id N".
// `bpftool net show` before v7.3 does not list tcx links, and a tcx link
// lives only while a file descriptor (or a bpffs pin, which nodeemu does not
// make) holds it: the holders' /proc/PID/fdinfo name every one.
func TCXLinks(t testing.TB, netns string) []string {
	t.Helper()
	var links []string
	for _, f := range strings.Fields(Run(t, "ip", "netns", "pids", netns)) {
		dir := filepath.Join("/proc", f)
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue // the process has exited
		}
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err != nil || target != "anon_inode:bpf_link" {
				continue
			}
			info, err := os.ReadFile(filepath.Join(dir, "fdinfo", fd.Name()))
			if err != nil {
				continue
			}
			fields := map[string]string{}
			for _, l := range strings.Split(string(info), "\n") {
				if k, v, ok := strings.Cut(l, ":"); ok {
					fields[k] = strings.TrimSpace(v)
				}
			}
			if fields["link_type"] == "tcx" {
				links = append(links, fmt.Sprintf("pid %s (%s): ifindex %s attach_type %s prog_id %s",
					f, strings.TrimSpace(string(comm)), fields["ifindex"], fields["attach_type"], fields["prog_id"]))
			}
		}
	}
	return links
}
