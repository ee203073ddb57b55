package fabric

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Rejection errors: every handshake the Identity rejects fails with an
// error wrapping exactly one of these, so callers classify with errors.Is
// (or Classify) for metrics. Only the verifying side learns the reason; the
// other side sees a TLS "bad certificate" alert.
var (
	// ErrNoIdentity: the peer sent no certificate, or one without a
	// clusterset gateway URI SAN (spiffe://<clusterset>/cluster/<id>).
	ErrNoIdentity = errors.New("no cluster identity")
	// ErrUnknownCA: the certificate is not signed by the clusterset CA.
	ErrUnknownCA = errors.New("certificate signed by unknown authority")
	// ErrExpired: the certificate (or the CA's) is past its NotAfter.
	ErrExpired = errors.New("certificate expired")
	// ErrNotYetValid: the certificate is before its NotBefore (often a
	// clock skewed by more than Backdate).
	ErrNotYetValid = errors.New("certificate not yet valid")
	// ErrWrongClusterset: signed by a trusted CA but naming another
	// clusterset.
	ErrWrongClusterset = errors.New("certificate of another clusterset")
	// ErrWrongCluster: a valid member, but not the cluster the client
	// meant to reach.
	ErrWrongCluster = errors.New("certificate of another cluster")
	// ErrBadCertificate: anything else wrong with the certificate, such as
	// missing clientAuth/serverAuth usage or a malformed chain.
	ErrBadCertificate = errors.New("bad certificate")
	// ErrWrongRole: a valid member of the clusterset, but a broker where a
	// cluster was expected or the other way round.
	ErrWrongRole = errors.New("certificate of another role")
)

// Reason is a rejection class, short enough for a metric label.
type Reason string

// The rejection reasons, one per error above, and ReasonOther for errors
// that are none of them (I/O, remote alerts).
const (
	ReasonNoIdentity      Reason = "no_identity"
	ReasonUnknownCA       Reason = "unknown_ca"
	ReasonExpired         Reason = "expired"
	ReasonNotYetValid     Reason = "not_yet_valid"
	ReasonWrongClusterset Reason = "wrong_clusterset"
	ReasonWrongCluster    Reason = "wrong_cluster"
	ReasonBadCertificate  Reason = "bad_certificate"
	ReasonWrongRole       Reason = "wrong_role"
	ReasonOther           Reason = "other"
)

const numReasons = 8

// Reasons lists the rejection reasons a verifying Identity counts.
var Reasons = []Reason{ReasonNoIdentity, ReasonUnknownCA, ReasonExpired, ReasonNotYetValid,
	ReasonWrongClusterset, ReasonWrongCluster, ReasonBadCertificate, ReasonWrongRole}

var reasonErrs = []error{ErrNoIdentity, ErrUnknownCA, ErrExpired, ErrNotYetValid,
	ErrWrongClusterset, ErrWrongCluster, ErrBadCertificate, ErrWrongRole}

// Classify returns the reason of a rejection error, such as the error of a
// failed handshake, or ReasonOther.
func Classify(err error) Reason {
	for i, e := range reasonErrs {
		if errors.Is(err, e) {
			return Reasons[i]
		}
	}
	return ReasonOther
}

// DefaultPollInterval is how often an Identity's Run checks its files.
const DefaultPollInterval = 2 * time.Second

// Config says where an Identity's files are. The zero value is not enough
// (there are no files to load), but every field has a default: give Dir
// and Cluster for the layout `strait fabric issue` writes, or the three
// file paths.
type Config struct {
	// Dir is the directory `strait fabric issue --out` wrote to.
	Dir string
	// Cluster is the local cluster ID. If set, the certificate must be
	// this cluster's; with Dir it also names the files.
	Cluster string
	// Broker says the identity is a broker's (spiffe://<clusterset>/
	// broker/<name>, from `strait fabric issue --broker`); Cluster is then
	// the broker's name. Its ServerTLS accepts clusters only.
	Broker bool
	// CertFile, KeyFile and CAFile override Dir/<Cluster>.crt,
	// Dir/<Cluster>.key and Dir/ca.crt.
	CertFile, KeyFile, CAFile string
	// PollInterval is how often Run checks the files' modification time
	// and size; 0 means DefaultPollInterval, negative disables polling
	// (Run then only waits; call Reload yourself).
	PollInterval time.Duration
	// Logger receives reload events; nil discards them.
	Logger *slog.Logger
}

// paths returns the effective file paths.
func (c Config) paths() (cert, key, ca string) {
	cert, key, ca = c.CertFile, c.KeyFile, c.CAFile
	if cert == "" && c.Cluster != "" {
		cert = filepath.Join(c.Dir, CertFile(c.Cluster))
	}
	if key == "" && c.Cluster != "" {
		key = filepath.Join(c.Dir, KeyFile(c.Cluster))
	}
	if ca == "" {
		ca = filepath.Join(c.Dir, CACertFile)
	}
	return cert, key, ca
}

// Validate checks that the files are named and the cluster ID is valid.
func (c Config) Validate() error {
	if c.Cluster != "" {
		if err := checkName("cluster", c.Cluster); err != nil {
			return err
		}
	}
	cert, key, _ := c.paths()
	if cert == "" || key == "" {
		return errors.New("cluster or certFile and keyFile: required to find the certificate and key")
	}
	if c.Dir == "" && c.CAFile == "" {
		return errors.New("dir or caFile: required to find the clusterset CA")
	}
	return nil
}

// Identity is a gateway's certificate and the clusterset CA, reloadable:
// the TLS configurations it returns fetch the current certificate and CA on
// every handshake, so after a Reload new handshakes use the new files and
// connections already open are untouched (TLS 1.3 never re-authenticates
// an established connection).
type Identity struct {
	cfg              Config
	log              *slog.Logger
	certF, keyF, caF string

	cur atomic.Pointer[material]

	mu     sync.Mutex   // serializes Reload
	loaded [3]fileStamp // stamps of the files cur came from
	failed [3]fileStamp // stamps of the last files that failed to load

	rejects [numReasons]atomic.Uint64 // by index in Reasons
	reloads atomic.Uint64
}

// material is one consistent load of the three files.
type material struct {
	cert       *tls.Certificate
	roots      *x509.CertPool
	caDER      [][]byte
	clusterset string
	cluster    string // or the broker's name
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// Load reads the identity's files and checks them: key matching the
// certificate, certificate valid now and signed by the CA, one clusterset.
func Load(cfg Config) (*Identity, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	id := &Identity{cfg: cfg, log: cfg.Logger}
	if id.log == nil {
		id.log = slog.New(slog.DiscardHandler)
	}
	id.certF, id.keyF, id.caF = cfg.paths()
	if _, err := id.Reload(); err != nil {
		return nil, err
	}
	return id, nil
}

// Cluster returns the local cluster ID.
func (id *Identity) Cluster() string { return id.cur.Load().cluster }

// Clusterset returns the clusterset name.
func (id *Identity) Clusterset() string { return id.cur.Load().clusterset }

// Certificate returns the certificate currently served.
func (id *Identity) Certificate() *x509.Certificate { return id.cur.Load().cert.Leaf }

// Reload re-reads the files and, if they differ from what is loaded and
// are valid, makes new handshakes use them. On error the previous files
// stay in use. It reports whether anything changed.
func (id *Identity) Reload() (changed bool, err error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.reloadLocked()
}

func (id *Identity) reloadLocked() (bool, error) {
	stamps := id.stamps()
	m, err := id.read()
	if err != nil {
		id.failed = stamps
		return false, err
	}
	old := id.cur.Load()
	if old != nil {
		if old.cluster != m.cluster {
			id.failed = stamps
			return false, fmt.Errorf("reload %s: certificate is for cluster %q, running as %q (restart to change the cluster ID)", id.certF, m.cluster, old.cluster)
		}
		if old.clusterset != m.clusterset {
			id.failed = stamps
			return false, fmt.Errorf("reload %s: certificate is for clusterset %q, running in %q (restart to change clusterset)", id.certF, m.clusterset, old.clusterset)
		}
	}
	id.loaded, id.failed = stamps, [3]fileStamp{}
	if old != nil && bytes.Equal(old.cert.Leaf.Raw, m.cert.Leaf.Raw) && equalDER(old.caDER, m.caDER) {
		return false, nil
	}
	id.cur.Store(m)
	if old != nil {
		id.reloads.Add(1)
		id.log.Info("fabric identity reloaded", "cluster", m.cluster, "serial", m.cert.Leaf.SerialNumber.Text(16),
			"not_after", m.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return true, nil
}

func equalDER(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func (id *Identity) stamps() [3]fileStamp {
	var s [3]fileStamp
	for i, p := range []string{id.certF, id.keyF, id.caF} {
		if fi, err := os.Stat(p); err == nil {
			s[i] = fileStamp{fi.ModTime(), fi.Size()}
		}
	}
	return s
}

func (id *Identity) read() (*material, error) {
	caPEM, err := os.ReadFile(id.caF)
	if err != nil {
		return nil, fmt.Errorf("load fabric CA: %w", err)
	}
	caCerts, clusterset, err := parseCACerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("load fabric CA %s: %w", id.caF, err)
	}
	certPEM, err := os.ReadFile(id.certF)
	if err != nil {
		return nil, fmt.Errorf("load certificate: %w", err)
	}
	keyPEMBytes, err := os.ReadFile(id.keyF)
	if err != nil {
		return nil, fmt.Errorf("load key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEMBytes)
	if err != nil {
		return nil, fmt.Errorf("load %s and %s: %w", id.certF, id.keyF, err)
	}
	m := &material{cert: &pair, roots: x509.NewCertPool(), clusterset: clusterset}
	for _, c := range caCerts {
		m.roots.AddCert(c)
		m.caDER = append(m.caDER, c.Raw)
	}
	chain := make([]*x509.Certificate, len(pair.Certificate))
	for i, der := range pair.Certificate {
		if chain[i], err = x509.ParseCertificate(der); err != nil {
			return nil, fmt.Errorf("load %s: %w", id.certF, err)
		}
	}
	// Our own certificate must pass the check peers will make; failing
	// here says so at startup instead of in every peer's logs.
	role := RoleCluster
	if id.cfg.Broker {
		role = RoleBroker
	}
	cluster, err := verify(m, chain, role, "", x509.ExtKeyUsageAny, time.Now())
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", id.certF, err)
	}
	if id.cfg.Cluster != "" && cluster != id.cfg.Cluster {
		return nil, fmt.Errorf("load %s: certificate is for cluster %q, configured cluster is %q", id.certF, cluster, id.cfg.Cluster)
	}
	m.cluster = cluster
	return m, nil
}

// Run polls the files every PollInterval and reloads them when their
// modification time or size changed. A failed reload is logged once per
// change of the files and the old identity stays in use; files written in
// several steps (key, then certificate) are picked up once complete. Run
// returns nil when ctx is done.
func (id *Identity) Run(ctx context.Context) error {
	every := id.cfg.PollInterval
	if every == 0 {
		every = DefaultPollInterval
	}
	if every < 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		id.mu.Lock()
		s := id.stamps()
		if s != id.loaded && s != id.failed {
			if _, err := id.reloadLocked(); err != nil {
				id.log.Warn("fabric identity reload failed; keeping the current certificate", "err", err)
			}
		}
		id.mu.Unlock()
	}
}

// Reloads returns how many times a changed identity was loaded after the
// first load.
func (id *Identity) Reloads() uint64 { return id.reloads.Load() }

// Rejections returns how many handshakes this Identity rejected, by
// reason (every reason is present).
func (id *Identity) Rejections() map[Reason]uint64 {
	out := make(map[Reason]uint64, len(Reasons))
	for i, r := range Reasons {
		out[r] = id.rejects[i].Load()
	}
	return out
}

func (id *Identity) count(err error) {
	for i, e := range reasonErrs {
		if errors.Is(err, e) {
			id.rejects[i].Add(1)
			return
		}
	}
}

// ServerTLS returns a configuration for accepting gateway connections:
// TLS 1.3 only, the current certificate, and a client certificate
// required and verified against the fabric CA (any cluster of the
// clusterset). The gateway may clone it and set NextProtos.
func (id *Identity) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return id.cur.Load().cert, nil
		},
		// Request, not Require: a missing certificate then reaches
		// VerifyConnection and is counted as ErrNoIdentity, instead of
		// failing inside crypto/tls with an unclassifiable error.
		ClientAuth:       tls.RequestClientCert,
		VerifyConnection: id.verifier(RoleCluster, "", x509.ExtKeyUsageClientAuth),
		// No resumption: a resumed session would skip verification
		// against a CA that may have been rotated since. Gateways keep
		// long-lived connections, so full handshakes are rare.
		SessionTicketsDisabled: true,
	}
}

// ClientTLS returns a configuration for dialing a gateway of cluster
// expectedPeer ("" accepts any cluster of the clusterset): TLS 1.3 only,
// the current certificate as client certificate, and the server verified
// against the fabric CA and by its cluster ID, not by host name.
func (id *Identity) ClientTLS(expectedPeer string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return id.cur.Load().cert, nil
		},
		// Host-name verification does not apply (gateways are dialed by
		// address and identified by URI SAN); VerifyConnection does the
		// whole verification instead.
		InsecureSkipVerify: true,
		VerifyConnection:   id.verifier(RoleCluster, expectedPeer, x509.ExtKeyUsageServerAuth),
	}
}

// BrokerClientTLS returns a configuration for dialing a broker: as
// ClientTLS, but the server must present a broker identity
// (spiffe://<clusterset>/broker/<name>); a cluster's certificate is
// refused with ErrWrongRole, so a gateway cannot pose as a broker.
func (id *Identity) BrokerClientTLS() *tls.Config {
	c := id.ClientTLS("")
	c.VerifyConnection = id.verifier(RoleBroker, "", x509.ExtKeyUsageServerAuth)
	return c
}

func (id *Identity) verifier(role Role, expected string, usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		_, err := verify(id.cur.Load(), cs.PeerCertificates, role, expected, usage, time.Now())
		if err != nil {
			id.count(err)
		}
		return err
	}
}

// PeerCluster returns the cluster ID of the peer of a connection that
// completed a handshake with a configuration of this Identity. It re-reads
// the ID from the certificate and checks the clusterset; the chain was
// verified during the handshake.
func (id *Identity) PeerCluster(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: peer presented no certificate", ErrNoIdentity)
	}
	return nameOf(cs.PeerCertificates[0], id.cur.Load().clusterset, RoleCluster)
}

// PeerBroker returns the broker name of the peer of a connection that
// completed a handshake with a configuration of this Identity, or
// ErrWrongRole if the peer is not a broker.
func (id *Identity) PeerBroker(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: peer presented no certificate", ErrNoIdentity)
	}
	return nameOf(cs.PeerCertificates[0], id.cur.Load().clusterset, RoleBroker)
}

// BrokerName returns the broker name in a certificate's URI SAN, or an
// error wrapping ErrWrongRole (or ErrNoIdentity) if it is not a broker's.
// It does not verify the certificate: use it on a peer that a verifying
// configuration (BrokerClientTLS) already accepted, as a second check
// that does not depend on how the caller built its configuration.
func BrokerName(leaf *x509.Certificate) (string, error) {
	if len(leaf.URIs) != 1 {
		return "", fmt.Errorf("%w: certificate %q has %d URI SANs, want exactly one spiffe://<clusterset>/broker/<name>", ErrNoIdentity, leaf.Subject.CommonName, len(leaf.URIs))
	}
	cs, _, _, _ := parseSPIFFEID(leaf.URIs[0])
	return nameOf(leaf, cs, RoleBroker)
}

// nameOf extracts the cluster ID (or broker name) from a certificate's URI
// SAN, which must be of the role given.
func nameOf(leaf *x509.Certificate, clusterset string, role Role) (string, error) {
	if len(leaf.URIs) != 1 {
		return "", fmt.Errorf("%w: certificate %q has %d URI SANs, want exactly one spiffe://<clusterset>/%s/<name>", ErrNoIdentity, leaf.Subject.CommonName, len(leaf.URIs), role)
	}
	cs, r, name, ok := parseSPIFFEID(leaf.URIs[0])
	if !ok {
		return "", fmt.Errorf("%w: URI SAN %q is not spiffe://<clusterset>/%s/<name>", ErrNoIdentity, leaf.URIs[0], role)
	}
	if cs != clusterset {
		return "", fmt.Errorf("%w: %s is in clusterset %q, this is %q", ErrWrongClusterset, leaf.URIs[0], cs, clusterset)
	}
	if r != role {
		return "", fmt.Errorf("%w: %s is a %s identity, want a %s", ErrWrongRole, leaf.URIs[0], r, role)
	}
	return name, nil
}

// verify checks a peer's chain and returns its cluster ID. Checks go from
// the most to the least fundamental, so the reason is the one that
// matters: a stranger's expired certificate is "unknown CA", not
// "expired".
func verify(m *material, chain []*x509.Certificate, role Role, expected string, usage x509.ExtKeyUsage, now time.Time) (string, error) {
	if len(chain) == 0 {
		return "", fmt.Errorf("%w: peer presented no certificate", ErrNoIdentity)
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	// Verify the signatures at a moment the leaf is valid, so that the
	// validity check below, against now, can tell expired from not yet
	// valid (x509 reports both as "Expired").
	at := now
	if at.Before(leaf.NotBefore) {
		at = leaf.NotBefore
	} else if at.After(leaf.NotAfter) {
		at = leaf.NotAfter
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots:         m.roots,
		Intermediates: inter,
		CurrentTime:   at,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		var ua x509.UnknownAuthorityError
		var ci x509.CertificateInvalidError
		switch {
		case errors.As(err, &ua):
			return "", fmt.Errorf("%w: %q is not signed by the clusterset %s CA", ErrUnknownCA, leaf.Subject.CommonName, m.clusterset)
		case errors.As(err, &ci) && ci.Reason == x509.Expired:
			return "", fmt.Errorf("%w: %v", ErrExpired, err)
		default:
			return "", fmt.Errorf("%w: %v", ErrBadCertificate, err)
		}
	}
	for _, c := range chains[0] {
		switch {
		case now.After(c.NotAfter):
			return "", fmt.Errorf("%w: %q expired at %s", ErrExpired, c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339))
		case now.Before(c.NotBefore):
			return "", fmt.Errorf("%w: %q is valid from %s", ErrNotYetValid, c.Subject.CommonName, c.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	cluster, err := nameOf(leaf, m.clusterset, role)
	if err != nil {
		return "", err
	}
	if expected != "" && cluster != expected {
		return "", fmt.Errorf("%w: dialed cluster %q, %q answered", ErrWrongCluster, expected, cluster)
	}
	return cluster, nil
}
