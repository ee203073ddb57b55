package lab

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/strait-net/strait/lab/topology"
)

// TestCheckEmulator: a lab whose emulator daemon has exited must say so,
// since a split link's delayed direction then carries packets undelayed.
func TestCheckEmulator(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	plan := &topology.Plan{Name: "chk"}
	for _, c := range []struct {
		pid     int
		wantErr bool
	}{
		{0, false},               // no emulator
		{os.Getpid(), false},     // running
		{gone.Process.Pid, true}, // exited and reaped
	} {
		err := (&Lab{Plan: plan, Dir: "/tmp/chk", EmulatorPID: c.pid}).CheckEmulator()
		if (err != nil) != c.wantErr {
			t.Errorf("pid %d: CheckEmulator() = %v, want error %v", c.pid, err, c.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "emulator.log") {
			t.Errorf("pid %d: error %q does not point at the emulator's log", c.pid, err)
		}
	}
}
