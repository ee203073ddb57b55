package kube_test

import (
	"testing"

	"github.com/strait-net/strait/internal/testenv"
)

// TestMain removes the strait binary TestRunOnClusters builds.
func TestMain(m *testing.M) { testenv.Main(m) }
