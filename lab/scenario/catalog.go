package scenario

import (
	"fmt"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

// catalogs holds the seed papers' tables, transcribed from
// shared/reference/seed-scenarios.yaml (the tests compare against that
// file). Values are per direction, per interface egress.
var catalogs = map[string][]Scenario{
	"seed000": seed000(),
	"seed001": seed001(),
}

// us converts microseconds; the tables' fractional milliseconds (1.25ms)
// are written in microseconds to stay exact.
func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// seed000 is Table IV of "Evaluating the Impact of Inter-cluster
// Communications in Edge Computing". The paper impairs every node's
// physical interface egress, intra- and inter-cluster alike, so LAN and WAN
// get the same values. Its netem command names no distribution, so jitter
// is uniform.
func seed000() []Scenario {
	rows := []struct {
		name              string
		delayUs, jitterUs int64
		loss              float64
	}{
		{"lcl", 0, 0, 0},
		{"edg2.5", 1250, 250, 0.02},
		{"edg5", 2500, 500, 0.04},
		{"edg10", 5000, 1000, 0.08},
		{"edg15", 7500, 1500, 0.12},
		{"edg20", 10000, 2000, 0.16},
	}
	var out []Scenario
	for _, r := range rows {
		p := emulation.Params{Delay: us(r.delayUs), Jitter: us(r.jitterUs), Loss: r.loss}
		if p.Jitter != 0 {
			p.Distribution = emulation.Uniform
		}
		out = append(out, Scenario{
			Name:        r.name,
			Catalog:     "seed000",
			Description: fmt.Sprintf("seed 000 Table IV %s: every link, each direction: %v", r.name, p),
			LAN:         p,
			WAN:         p,
		})
	}
	return out
}

// seed001 is Table 2 of "An experimental study of the response time in an
// edge-cloud continuum with ClusterLink": phy (intra-cluster interfaces)
// becomes LAN, ovl (inter-cluster overlay interfaces) WAN.
func seed001() []Scenario {
	type imp struct {
		delayUs, jitterUs int64
		loss              float64
	}
	rows := []struct {
		name     string
		phy, ovl imp
	}{
		{"local", imp{0, 0, 0}, imp{0, 0, 0}},
		{"edge5", imp{1250, 250, 0.02}, imp{1250, 250, 0.02}},
		{"edge10", imp{2500, 500, 0.04}, imp{2500, 500, 0.04}},
		{"edge20", imp{5000, 1000, 0.08}, imp{5000, 1000, 0.08}},
		{"edge30", imp{7500, 1500, 0.12}, imp{7500, 1500, 0.12}},
		{"cloud5", imp{0, 0, 0}, imp{2500, 500, 0.04}},
		{"cloud10", imp{0, 0, 0}, imp{5000, 1000, 0.08}},
		{"cloud20", imp{0, 0, 0}, imp{10000, 2000, 0.16}},
		{"cloud30", imp{0, 0, 0}, imp{15000, 3000, 0.24}},
	}
	params := func(i imp) emulation.Params {
		return emulation.Params{Delay: us(i.delayUs), Jitter: us(i.jitterUs), Loss: i.loss}
	}
	var out []Scenario
	for _, r := range rows {
		lan, wan := params(r.phy), params(r.ovl)
		out = append(out, Scenario{
			Name:        r.name,
			Catalog:     "seed001",
			Description: fmt.Sprintf("seed 001 Table 2 %s: lan (phy) %v; wan (ovl) %v, each direction", r.name, lan, wan),
			LAN:         lan,
			WAN:         wan,
		})
	}
	return out
}
