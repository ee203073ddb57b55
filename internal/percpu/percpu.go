// Package percpu reads the counters BPF programs keep in per-CPU array
// maps: one slot per CPU, so no two CPUs contend for a cache line, summed
// when read.
package percpu

import "github.com/cilium/ebpf"

// Sum returns the total over every CPU of m's uint64 counter at key.
func Sum(m *ebpf.Map, key uint32) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(key, &perCPU); err != nil {
		return 0, err
	}
	var sum uint64
	for _, v := range perCPU {
		sum += v
	}
	return sum, nil
}
