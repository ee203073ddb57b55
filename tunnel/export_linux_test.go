package tunnel

// HookCongestion makes every congestion control the package sets on a
// socket pass through record first, until the test ends.
func HookCongestion(t interface{ Cleanup(func()) }, record func(name string)) {
	orig := setCC
	setCC = func(fd int, name string) error {
		record(name)
		return orig(fd, name)
	}
	t.Cleanup(func() { setCC = orig })
}

// DefaultCongestion is the congestion control a WAN socket starts with in
// the default mode: strait's own, or cubic where the kernel cannot take it.
func DefaultCongestion() string { return startCongestion(&Config{}) }
