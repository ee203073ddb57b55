//go:build !linux

package gateway

// socketDrops reports no drops: only Linux tells a socket's drop counter
// (SO_MEMINFO), so elsewhere an import's budget pauses are not counted.
func socketDrops(uintptr) (drops uint32, ok bool) { return 0, false }
