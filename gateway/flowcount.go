package gateway

import (
	"sync"
	"time"
)

// flowMapRefresh is how long one count of the packet mode's flow map
// serves /metrics: strait_packet_flow_map_entries lags the map by at most
// this (plus the walk), and the map is walked at most once per it however
// often and by how many scrapers /metrics is read (docs/packet.md, "A full
// flow map"; the metric's help text says 10 s).
const flowMapRefresh = 10 * time.Second

// flowMapUser is what flowMapCount counts: packet.Datapath's FlowMapUse,
// which reads the map 4096 entries per system call (one per entry where
// the kernel has no batch reads).
type flowMapUser interface {
	FlowMapUse() (entries, size int, err error)
}

// flowMapCount keeps the last count of the flow map for the scrapes that
// follow it. A count per scrape would read up to packet.flow-entries
// (16 777 216 at most) entries each time; the count changes as flows come
// and go, not as the scrapes come, so a recent one says as much.
type flowMapCount struct {
	now func() time.Time // time.Now; a test's clock

	mu            sync.Mutex // held across a walk: concurrent scrapes wait for one walk, not each walk
	of            flowMapUser
	entries, size int
	at            time.Time // when the walk counted; zero: none yet
}

// read returns the flow map's use as last counted, counting again when
// the count is of another map or flowMapRefresh old. A failed count is
// not kept, so the next scrape tries again.
func (c *flowMapCount) read(m flowMapUser) (entries, size int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	if c.of == m && !c.at.IsZero() && now().Sub(c.at) < flowMapRefresh {
		return c.entries, c.size, nil
	}
	entries, size, err = m.FlowMapUse()
	if err != nil {
		c.of, c.at = nil, time.Time{}
		return entries, size, err
	}
	c.of, c.entries, c.size, c.at = m, entries, size, now()
	return entries, size, nil
}
