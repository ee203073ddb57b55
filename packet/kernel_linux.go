package packet

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// mapMmapable is BPF_F_MMAPABLE, which the maglev map is created with so
// that its buckets are written through a memory mapping (Load).
const mapMmapable = unix.BPF_F_MMAPABLE

// checkOS says whether this OS has the kernel data path: Linux does, and
// Load leaves its version to the verifier.
func checkOS() error { return nil }

func checkBPFFS(dir string) error {
	// The pin root may not exist yet: check the nearest existing parent.
	p := dir
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			if st.Type != unix.BPF_FS_MAGIC {
				return fmt.Errorf("pinRoot %s is not on a bpffs mount (mount -t bpf bpf DIR; `ip netns exec` hides /sys/fs/bpf)", dir)
			}
			return nil
		}
		if !errors.Is(err, unix.ENOENT) || p == "/" {
			return fmt.Errorf("pinRoot %s: %w", dir, err)
		}
		p = filepath.Dir(p)
	}
}

// udpSocket opens an IPv4 UDP socket, closed on exec, nonblocking if asked.
func udpSocket(nonblock bool) (int, error) {
	flags := unix.SOCK_DGRAM | unix.SOCK_CLOEXEC
	if nonblock {
		flags |= unix.SOCK_NONBLOCK
	}
	return unix.Socket(unix.AF_INET, flags, 0)
}
