package dns_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/strait-net/strait/dns"
)

// A gateway keeps a Static up to date from its catalog and serves it.
func Example() {
	var imports dns.Static
	err := imports.Put("test", "myservice", dns.Import{
		Type:  dns.ClusterSetIP,
		IPs:   []netip.Addr{netip.MustParseAddr("10.42.42.42")},
		Ports: []dns.Port{{Name: "https", Protocol: "TCP", Port: 443}},
	})
	if err != nil {
		panic(err)
	}
	srv, err := dns.New(dns.Config{Listen: "127.0.0.1:0", Imports: &imports})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()

	c := &mdns.Client{Timeout: 2 * time.Second}
	for _, q := range []struct {
		name string
		t    uint16
	}{
		{"myservice.test.svc.clusterset.local.", mdns.TypeA},
		{"_https._tcp.myservice.test.svc.clusterset.local.", mdns.TypeSRV},
		{"dns-version.clusterset.local.", mdns.TypeTXT},
	} {
		m := new(mdns.Msg)
		m.SetQuestion(q.name, q.t)
		resp, _, err := c.Exchange(m, srv.Addr().String())
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.Answer[0])
	}
	// Output:
	// myservice.test.svc.clusterset.local.	5	IN	A	10.42.42.42
	// _https._tcp.myservice.test.svc.clusterset.local.	5	IN	SRV	10 100 443 myservice.test.svc.clusterset.local.
	// dns-version.clusterset.local.	5	IN	TXT	"1.0.0"
}
