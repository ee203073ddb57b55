package wancc

import (
	"testing"

	"github.com/strait-net/strait/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
