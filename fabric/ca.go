// Package fabric is the clusterset's identity layer: a clusterset CA, the
// certificates it issues to each cluster's gateways, and the TLS
// configurations gateways use to authenticate each other.
//
// Identity is the cluster ID, carried as a SPIFFE-style URI SAN,
// spiffe://<clusterset>/cluster/<id>, in an ECDSA P-256 certificate with
// both serverAuth and clientAuth usage (a gateway dials and accepts with
// the same certificate). Peers are verified against the fabric CA only,
// never the system roots, and by that URI, never by host name: gateways are
// reached at whatever address a Peer lists, and the certificate says which
// cluster answered.
//
// On disk a clusterset directory holds ca.crt and ca.key; issuing for a
// cluster writes <id>.crt, <id>.key and a copy of ca.crt, which is what a
// gateway loads. ca.crt may hold several CA certificates of the same
// clusterset, so a CA can be rolled over by distributing a bundle of the
// old and the new one before issuing from the new one.
package fabric

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strait-net/strait/internal/atomicfile"
	"github.com/strait-net/strait/internal/dnsname"
)

// File names in a clusterset directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Default lifetimes of the CLI.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour // 87600h
	DefaultCertLifetime = 90 * 24 * time.Hour       // 2160h
	// Backdate is how long before "now" issued certificates become valid,
	// so a peer whose clock is a little behind accepts a fresh certificate.
	Backdate = 5 * time.Minute
)

// CertFile and KeyFile return the file names of a cluster's certificate
// and key.
func CertFile(cluster string) string { return cluster + ".crt" }

// KeyFile returns the file name of a cluster's private key.
func KeyFile(cluster string) string { return cluster + ".key" }

// SPIFFEID returns the URI identifying a cluster of a clusterset.
func SPIFFEID(clusterset, cluster string) string {
	return "spiffe://" + clusterset + "/cluster/" + cluster
}

// BrokerSPIFFEID returns the URI identifying a broker of a clusterset.
func BrokerSPIFFEID(clusterset, broker string) string {
	return "spiffe://" + clusterset + "/broker/" + broker
}

// Role is what an identity is: a cluster's gateways (and agent), or a
// broker. A certificate has exactly one; each side of a connection checks
// the other's, so a cluster's certificate cannot pose as a broker and a
// broker's cannot pose as a cluster.
type Role string

// The roles, as the path segment of the SPIFFE ID.
const (
	RoleCluster Role = "cluster"
	RoleBroker  Role = "broker"
)

// parseSPIFFEID extracts clusterset, role and name from a URI SAN.
func parseSPIFFEID(u *url.URL) (clusterset string, role Role, name string, ok bool) {
	if u.Scheme != "spiffe" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", "", "", false
	}
	for _, r := range []Role{RoleCluster, RoleBroker} {
		if id, found := strings.CutPrefix(u.Path, "/"+string(r)+"/"); found && dnsname.IsLabel(u.Host) && dnsname.IsLabel(id) {
			return u.Host, r, id, true
		}
	}
	return "", "", "", false
}

// checkName checks a clusterset name or cluster ID: both are DNS labels.
func checkName(what, s string) error {
	if !dnsname.IsLabel(s) {
		return fmt.Errorf("%s %q is not a DNS label (lowercase letters, digits and '-', starting and ending alphanumeric, at most 63)", what, s)
	}
	return nil
}

// CA is a clusterset certificate authority.
type CA struct {
	Cert       *x509.Certificate
	Key        crypto.Signer
	Clusterset string
}

// NewCA creates a self-signed ECDSA P-256 CA for the clusterset, valid
// from notBefore to notAfter.
func NewCA(clusterset string, notBefore, notAfter time.Time) (*CA, error) {
	if err := checkName("clusterset", clusterset); err != nil {
		return nil, err
	}
	if !notAfter.After(notBefore) {
		return nil, errors.New("lifetime: must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"strait"}, CommonName: "strait clusterset " + clusterset + " CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// Gateways' certificates are signed by the CA directly; no
		// intermediate CA may be made with this key.
		MaxPathLen:     0,
		MaxPathLenZero: true,
		// The trust domain ID names the clusterset, so `fabric issue` and
		// gateways learn it from the CA certificate alone.
		URIs: []*url.URL{{Scheme: "spiffe", Host: clusterset}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, Clusterset: clusterset}, nil
}

// CertPEM returns the CA certificate in PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM returns the CA key in PKCS #8 PEM.
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// Issue creates a key and a certificate for the gateways of cluster, valid
// from notBefore to notAfter, which must lie within the CA's validity.
func (ca *CA) Issue(cluster string, notBefore, notAfter time.Time) (certPEM, keyPEMBytes []byte, err error) {
	if err := checkName("cluster", cluster); err != nil {
		return nil, nil, err
	}
	if !notAfter.After(notBefore) {
		return nil, nil, errors.New("lifetime: must be positive")
	}
	if notAfter.After(ca.Cert.NotAfter) {
		return nil, nil, fmt.Errorf("lifetime: certificate would outlive the CA (valid until %s); shorten it to at most %s",
			ca.Cert.NotAfter.UTC().Format(time.RFC3339), ca.Cert.NotAfter.Sub(notBefore).Truncate(time.Hour))
	}
	u, _ := url.Parse(SPIFFEID(ca.Clusterset, cluster))
	return ca.issue(cluster, []*url.URL{u}, notBefore, notAfter)
}

// IssueBroker is Issue for a broker: its URI SAN is
// spiffe://<clusterset>/broker/<name>, which agents require of a broker
// and gateways and brokers refuse as a cluster.
func (ca *CA) IssueBroker(name string, notBefore, notAfter time.Time) (certPEM, keyPEMBytes []byte, err error) {
	if err := checkName("broker", name); err != nil {
		return nil, nil, err
	}
	if !notAfter.After(notBefore) {
		return nil, nil, errors.New("lifetime: must be positive")
	}
	if notAfter.After(ca.Cert.NotAfter) {
		return nil, nil, fmt.Errorf("lifetime: certificate would outlive the CA (valid until %s); shorten it to at most %s",
			ca.Cert.NotAfter.UTC().Format(time.RFC3339), ca.Cert.NotAfter.Sub(notBefore).Truncate(time.Hour))
	}
	u, _ := url.Parse(BrokerSPIFFEID(ca.Clusterset, name))
	return ca.issue(name, []*url.URL{u}, notBefore, notAfter)
}

// issue signs a gateway certificate with arbitrary URIs; tests use it to
// make certificates Issue refuses to.
func (ca *CA) issue(cn string, uris []*url.URL, notBefore, notAfter time.Time) (certPEM, keyPEMBytes []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"strait"}, CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %s: %w", cn, err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

// ParseCA parses a CA certificate (or a rollover bundle: then the one
// matching the key signs) and its key, as written by InitDir.
func ParseCA(certPEM, keyPEMBytes []byte) (*CA, error) {
	certs, clusterset, err := parseCACerts(certPEM)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(keyPEMBytes)
	if block == nil {
		return nil, errors.New("CA key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		if k, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
			return nil, fmt.Errorf("CA key: %w", err)
		}
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA key: %T is not an ECDSA key", k)
	}
	for _, c := range certs {
		if key.PublicKey.Equal(c.PublicKey) {
			return &CA{Cert: c, Key: key, Clusterset: clusterset}, nil
		}
	}
	return nil, errors.New("CA key matches no certificate in the CA file")
}

// parseCACerts parses a bundle of CA certificates, which must all belong
// to one clusterset.
func parseCACerts(data []byte) ([]*x509.Certificate, string, error) {
	var certs []*x509.Certificate
	clusterset := ""
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, "", fmt.Errorf("CA certificate %d: %w", len(certs)+1, err)
		}
		if !c.IsCA {
			return nil, "", fmt.Errorf("CA certificate %d (%s) is not a CA", len(certs)+1, c.Subject.CommonName)
		}
		cs := ""
		for _, u := range c.URIs {
			if u.Scheme == "spiffe" && (u.Path == "" || u.Path == "/") && dnsname.IsLabel(u.Host) {
				cs = u.Host
			}
		}
		if cs == "" {
			return nil, "", fmt.Errorf("CA certificate %d (%s) names no clusterset (want a URI SAN spiffe://<clusterset>)", len(certs)+1, c.Subject.CommonName)
		}
		if clusterset != "" && cs != clusterset {
			return nil, "", fmt.Errorf("CA bundle mixes clustersets %q and %q", clusterset, cs)
		}
		clusterset = cs
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, "", errors.New("CA certificate: no PEM CERTIFICATE block")
	}
	return certs, clusterset, nil
}

// InitDir creates a clusterset CA in dir (created if missing), writing
// ca.key (mode 0600) and ca.crt. It refuses to replace an existing CA
// unless force is set: every certificate issued by it would stop working.
func InitDir(dir, clusterset string, lifetime time.Duration, force bool) (*CA, error) {
	if err := checkName("clusterset", clusterset); err != nil {
		return nil, err
	}
	if lifetime <= 0 {
		return nil, fmt.Errorf("lifetime: %s is not positive", lifetime)
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	if !force {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Stat(p); err == nil {
				return nil, fmt.Errorf("%s exists: refusing to replace the clusterset CA, which every issued certificate depends on (use --force to replace it)", p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
		}
	}
	now := time.Now()
	ca, err := NewCA(clusterset, now.Add(-Backdate), now.Add(lifetime))
	if err != nil {
		return nil, err
	}
	kp, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(keyPath, kp, 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(certPath, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadCA reads the CA that InitDir wrote to dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("load clusterset CA: %w (create one with `strait fabric init`)", err)
	}
	keyPEMBytes, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("load clusterset CA: %w", err)
	}
	ca, err := ParseCA(certPEM, keyPEMBytes)
	if err != nil {
		return nil, fmt.Errorf("load clusterset CA from %s: %w", dir, err)
	}
	return ca, nil
}

// Issued names the files IssueFiles wrote.
type Issued struct {
	Cert, Key, CA string
	NotAfter      time.Time
}

// IssueFiles issues a certificate for cluster from the CA in caDir and
// writes <cluster>.crt, <cluster>.key (0600) and ca.crt to outDir (caDir
// if empty). Each file is replaced atomically, key first: a gateway
// reloading in between sees a mismatched pair, rejects it and keeps its
// old certificate until the new one lands.
func IssueFiles(caDir, outDir, cluster string, lifetime time.Duration) (Issued, error) {
	return issueFiles(caDir, outDir, cluster, RoleCluster, lifetime)
}

// IssueBrokerFiles is IssueFiles for a broker: <name>.crt carries the
// broker identity spiffe://<clusterset>/broker/<name>.
func IssueBrokerFiles(caDir, outDir, name string, lifetime time.Duration) (Issued, error) {
	return issueFiles(caDir, outDir, name, RoleBroker, lifetime)
}

func issueFiles(caDir, outDir, cluster string, role Role, lifetime time.Duration) (Issued, error) {
	if err := checkName(string(role), cluster); err != nil {
		return Issued{}, err
	}
	if lifetime <= 0 {
		return Issued{}, fmt.Errorf("lifetime: %s is not positive", lifetime)
	}
	ca, err := LoadCA(caDir)
	if err != nil {
		return Issued{}, err
	}
	now := time.Now()
	issue := ca.Issue
	if role == RoleBroker {
		issue = ca.IssueBroker
	}
	certPEM, kp, err := issue(cluster, now.Add(-Backdate), now.Add(lifetime))
	if err != nil {
		return Issued{}, err
	}
	if outDir == "" {
		outDir = caDir
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return Issued{}, err
	}
	out := Issued{
		Cert:     filepath.Join(outDir, CertFile(cluster)),
		Key:      filepath.Join(outDir, KeyFile(cluster)),
		CA:       filepath.Join(outDir, CACertFile),
		NotAfter: now.Add(lifetime),
	}
	if err := atomicfile.Write(out.Key, kp, 0o600); err != nil {
		return Issued{}, err
	}
	if err := atomicfile.Write(out.Cert, certPEM, 0o644); err != nil {
		return Issued{}, err
	}
	// Copy the whole ca.crt, which may be a rollover bundle.
	caPEM, err := os.ReadFile(filepath.Join(caDir, CACertFile))
	if err != nil {
		return Issued{}, err
	}
	if old, err := os.ReadFile(out.CA); err != nil || !bytes.Equal(old, caPEM) {
		if err := atomicfile.Write(out.CA, caPEM, 0o644); err != nil {
			return Issued{}, err
		}
	}
	return out, nil
}

func keyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}
